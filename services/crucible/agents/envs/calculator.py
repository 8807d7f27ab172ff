"""Multi-digit arithmetic with a calculator tool: the answer is hard to write out digit by
digit and easy to look up, so a policy that learns to call the tool is rewarded.

Its tool, `calculate`, evaluates arithmetic from its syntax tree, never with eval: numbers,
+ - * / // % and parentheses, nothing else. This module imports only the standard library
and the protocol, because the sandbox's child imports it for every call.
"""

import ast
import operator
import random
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from crucible.agents.protocol import Message, ToolResult, ToolSpec, Turn

OPERATORS = ("+", "-", "*")
MAX_EXPRESSION_CHARS = 200
"""Longer expressions are refused: with no powers, this bounds the size of any result."""

_BINARY: Mapping[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: Mapping[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_ANSWER = re.compile(r"answer\s*:\s*(-?[\d,]+)", re.I)

SYSTEM = (
    "Solve the arithmetic problem. Use the calculate tool rather than working it out. "
    "When you know the result, reply with: Answer: <number>"
)


def calculate(expression: str) -> str:
    """The value of an arithmetic `expression`, or a sentence saying why there is none."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        return f"error: the expression is longer than {MAX_EXPRESSION_CHARS} characters"
    try:
        tree = ast.parse(expression, mode="eval")
        return str(_value(tree.body))
    except SyntaxError:
        return f"error: {expression!r} is not an arithmetic expression"
    except (ValueError, ArithmeticError) as exc:
        return f"error: {exc}"


def _value(node: ast.expr) -> int | float:
    value = node.value if isinstance(node, ast.Constant) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_value(node.left), _value(node.right))  # type: ignore[no-any-return]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_value(node.operand))  # type: ignore[no-any-return]
    raise ValueError(f"only numbers and + - * / // % ( ) are allowed, not {ast.unparse(node)!r}")


class CalculatorEnvironment:
    """Problems `a op b` of two `digits`-digit numbers; one reward of 1 for a final
    "Answer: <number>" that is right (0 for a wrong one), on the turn it is given."""

    def __init__(self, *, digits: int = 5, operators: Sequence[str] = ("+", "*")) -> None:
        if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 18:
            raise ValueError(f"digits must be a whole number from 1 to 18, got {digits!r}")
        unknown = [o for o in operators if o not in OPERATORS]
        if isinstance(operators, str) or not operators or unknown:
            raise ValueError(
                f"operators must be a non-empty list of {', '.join(OPERATORS)}, got {operators!r}"
            )
        self.digits = digits
        self.operators = tuple(operators)
        self.answer = ""

    def tasks(self, count: int, seed: int) -> list[dict[str, Any]]:
        rng = random.Random(f"calculator:{self.digits}:{seed}")  # noqa: S311 -- tasks, not secrets
        low, high = 10 ** (self.digits - 1), 10**self.digits - 1
        tasks = []
        for _ in range(count):
            a, b = rng.randint(low, high), rng.randint(low, high)
            op = rng.choice(self.operators)
            answer = {"+": a + b, "-": a - b, "*": a * b}[op]
            tasks.append({"question": f"What is {a} {op} {b}?", "answer": str(answer)})
        return tasks

    def reset(self, task: Mapping[str, Any]) -> list[Message]:
        self.answer = str(task["answer"])
        return [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": str(task["question"])},
        ]

    def tools(self) -> list[ToolSpec]:
        return [
            ToolSpec(
                name="calculate",
                description="The value of an arithmetic expression: numbers, + - * / // % ( ).",
                parameters={
                    "type": "object",
                    "properties": {"expression": {"type": "string"}},
                    "required": ["expression"],
                },
                function=calculate,
            )
        ]

    def step(self, message: Message, tool_results: Sequence[ToolResult]) -> Turn:
        if tool_results:
            return Turn()  # the results are in the conversation; the model goes on
        found = _ANSWER.search(message["content"])
        if found is None:
            return Turn(
                observations=[
                    {"role": "user", "content": "Call calculate, or reply with: Answer: <number>"}
                ]
            )
        given = found.group(1).replace(",", "")
        return Turn(reward=1.0 if given == self.answer else 0.0, done=True, info={"given": given})
