"""MLflow's search syntax for runs: `metrics.loss < 0.5 and params.lr = '0.01'`, and its
`order_by` terms (`metrics.loss DESC`).

A tokenizer and a small recursive grammar rather than sqlparse: the language is a list of
`identifier comparator value` clauses joined by AND, and an error should say which token
was wrong. Identifiers are `<entity>.<key>`, the key bare, in backticks or in double quotes.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from crucible.mlflow_compat.errors import invalid

Entity = Literal["metric", "param", "tag", "attribute", "dataset"]

_ENTITY_ALIASES: dict[str, Entity] = {
    "metric": "metric",
    "metrics": "metric",
    "param": "param",
    "params": "param",
    "parameter": "param",
    "parameters": "param",
    "tag": "tag",
    "tags": "tag",
    "attribute": "attribute",
    "attributes": "attribute",
    "attr": "attribute",
    "run": "attribute",
    "dataset": "dataset",
    "datasets": "dataset",
}
NUMERIC_ATTRIBUTES = frozenset({"start_time", "end_time", "created"})
STRING_ATTRIBUTES = frozenset(
    {"run_id", "run_name", "status", "artifact_uri", "user_id", "lifecycle_stage"}
)
DATASET_KEYS = frozenset({"name", "digest", "context"})
# MLflow sets none of these; they bound what one search may cost. A filter of run ids, as the
# UI's comparison sends, fits in a few thousand characters.
MAX_FILTER_LENGTH = 10_000
MAX_FILTER_CLAUSES = 100
MAX_ORDER_BY_TERMS = 20
# A LIKE costs up to its pattern's length for each character of each value it is tried on.
MAX_LIKE_PATTERN_LENGTH = 500
NUMERIC_COMPARATORS = frozenset({"=", "!=", ">", ">=", "<", "<="})
STRING_COMPARATORS = frozenset({"=", "!=", "LIKE", "ILIKE", "IN", "NOT IN"})

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<number>[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)(?![\w.])
      | (?P<string>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      | (?P<backticked>`[^`]*`)
      | (?P<op>!=|>=|<=|=|>|<)
      | (?P<punct>[(),.])
      | (?P<word>[A-Za-z_][\w\-/:]*)
    )""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Token:
    kind: str
    text: str
    position: int


@dataclass(frozen=True)
class Clause:
    entity: Entity
    key: str
    comparator: str
    value: float | str | tuple[str, ...] | None


@dataclass(frozen=True)
class OrderTerm:
    entity: Entity
    key: str
    ascending: bool


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    position, end = 0, len(source.rstrip())
    while position < end:
        match = _TOKEN.match(source, position)
        if match is None or match.end() == position:
            raise invalid(
                f"Invalid search filter {source!r}: unexpected character "
                f"{source[position:].lstrip()[:1]!r} at position {position}."
            )
        kind = match.lastgroup
        assert kind is not None
        tokens.append(Token(kind, match.group(kind), match.start(kind)))
        position = match.end()
    return tokens


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = tokenize(source)
        self.at = 0

    def fail(self, what: str) -> Exception:
        token = self.peek()
        where = f"at {token.text!r} (position {token.position})" if token else "at its end"
        return invalid(f"Invalid search filter {self.source!r}: {what} {where}.")

    def peek(self) -> Token | None:
        return self.tokens[self.at] if self.at < len(self.tokens) else None

    def take(self) -> Token:
        token = self.peek()
        if token is None:
            raise self.fail("the filter ends too early")
        self.at += 1
        return token

    def word_is(self, *words: str) -> bool:
        token = self.peek()
        return token is not None and token.kind == "word" and token.text.upper() in words

    def clauses(self) -> list[Clause]:
        found = [self.clause()]
        while self.peek() is not None:
            if not self.word_is("AND"):
                raise self.fail("expected AND between clauses (MLflow has no OR)")
            self.take()
            found.append(self.clause())
            if len(found) > MAX_FILTER_CLAUSES:
                raise invalid(
                    f"Invalid search filter {self.source[:100]!r}...: it has more than "
                    f"{MAX_FILTER_CLAUSES} clauses; split the search"
                )
        return found

    def identifier(self) -> tuple[Entity, str]:
        first = self.take()
        if first.kind != "word":
            raise self.fail("expected an identifier such as metrics.loss")
        next_token = self.peek()
        if next_token is not None and next_token.text == ".":
            self.take()
            key_token = self.take()
            if key_token.kind not in ("word", "backticked", "string", "number"):
                raise self.fail("expected a key after the '.'")
            entity_word = first.text
            key = _unquote(key_token.text)
            # MLflow splits at the first dot only: `metrics.eval.loss` is the key eval.loss.
            while key_token.kind == "word" and self._dotted_word_follows():
                self.take()
                key_token = self.take()
                key += "." + key_token.text
        else:
            entity_word, key = "attribute", first.text
        entity = _ENTITY_ALIASES.get(entity_word.lower())
        if entity is None:
            raise invalid(
                f"Invalid search filter {self.source!r}: invalid entity type {entity_word!r}; "
                f"use one of metrics, params, tags, attributes, datasets."
            )
        if entity == "attribute" and key not in NUMERIC_ATTRIBUTES | STRING_ATTRIBUTES:
            raise invalid(
                f"Invalid search filter {self.source!r}: invalid attribute key {key!r}; use one "
                f"of {', '.join(sorted(NUMERIC_ATTRIBUTES | STRING_ATTRIBUTES))}."
            )
        if entity == "dataset" and key not in DATASET_KEYS:
            raise invalid(
                f"Invalid search filter {self.source!r}: invalid dataset key {key!r}; use one "
                f"of {', '.join(sorted(DATASET_KEYS))}."
            )
        return entity, key

    def _dotted_word_follows(self) -> bool:
        rest = self.tokens[self.at : self.at + 2]
        return len(rest) == 2 and rest[0].text == "." and rest[1].kind == "word"

    def comparator(self) -> str:
        token = self.take()
        if token.kind == "op":
            return token.text
        word = token.text.upper()
        if word in ("LIKE", "ILIKE", "IN"):
            return word
        if word == "NOT" and self.word_is("IN"):
            self.take()
            return "NOT IN"
        if word == "IS":
            negated = self.word_is("NOT")
            if negated:
                self.take()
            if not self.word_is("NULL"):
                raise self.fail("expected NULL after IS")
            self.take()
            return "IS NOT NULL" if negated else "IS NULL"
        self.at -= 1
        raise self.fail("expected a comparator")

    def clause(self) -> Clause:
        entity, key = self.identifier()
        comparator = self.comparator()
        numeric = entity == "metric" or (entity == "attribute" and key in NUMERIC_ATTRIBUTES)
        if comparator in ("IS NULL", "IS NOT NULL"):
            return Clause(entity, key, comparator, None)
        allowed = NUMERIC_COMPARATORS if numeric else STRING_COMPARATORS
        if comparator not in allowed:
            raise invalid(
                f"Invalid search filter {self.source!r}: invalid comparator {comparator!r} for "
                f"{entity} {key!r}; use one of {', '.join(sorted(allowed))}."
            )
        if comparator in ("IN", "NOT IN"):
            return Clause(entity, key, comparator, self.string_list())
        token = self.take()
        if numeric:
            if token.kind != "number":
                raise invalid(
                    f"Invalid search filter {self.source!r}: expected a number to compare "
                    f"{entity} {key!r} with, got {token.text!r}."
                )
            return Clause(entity, key, comparator, float(token.text))
        if token.kind != "string":
            raise invalid(
                f"Invalid search filter {self.source!r}: expected a quoted string to compare "
                f"{entity} {key!r} with, got {token.text!r}."
            )
        value = _unquote(token.text)
        if comparator in ("LIKE", "ILIKE") and len(value) > MAX_LIKE_PATTERN_LENGTH:
            raise invalid(
                f"Invalid search filter: the {comparator} pattern {value[:40]!r}... for {entity} "
                f"{key!r} has {len(value)} characters, more than {MAX_LIKE_PATTERN_LENGTH}."
            )
        return Clause(entity, key, comparator, value)

    def string_list(self) -> tuple[str, ...]:
        if self.take().text != "(":
            self.at -= 1
            raise self.fail("expected '(' to open the list")
        values = []
        while True:
            token = self.take()
            if token.kind != "string":
                self.at -= 1
                raise self.fail("expected a quoted string in the list")
            values.append(_unquote(token.text))
            closing = self.take()
            if closing.text == ")":
                return tuple(values)
            if closing.text != ",":
                self.at -= 1
                raise self.fail("expected ',' or ')' in the list")


def _unquote(text: str) -> str:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"`":
        body = text[1:-1]
        return re.sub(r"\\(.)", r"\1", body) if text[0] != "`" else body
    return text


def parse_filter(source: str) -> list[Clause]:
    """The clauses of a filter; an empty filter has none."""
    check_filter_length(source)
    if not source.strip():
        return []
    return _Parser(source).clauses()


def check_filter_length(source: str) -> None:
    if len(source) > MAX_FILTER_LENGTH:
        raise invalid(
            f"Invalid search filter {source[:100]!r}...: it has {len(source)} characters, more "
            f"than {MAX_FILTER_LENGTH}; split the search."
        )


def parse_order_by(terms: list[str]) -> list[OrderTerm]:
    if len(terms) > MAX_ORDER_BY_TERMS:
        raise invalid(
            f"Invalid value for parameter 'order_by': {len(terms)} terms, more than "
            f"{MAX_ORDER_BY_TERMS}."
        )
    parsed = []
    for term in terms:
        check_filter_length(term)
        parser = _Parser(term)
        entity, key = parser.identifier()
        ascending = True
        if parser.word_is("ASC", "DESC"):
            ascending = parser.take().text.upper() == "ASC"
        if parser.peek() is not None:
            raise parser.fail("expected ASC or DESC and nothing after it in order_by")
        parsed.append(OrderTerm(entity, key, ascending))
    return parsed


def like_matcher(pattern: str, *, ignore_case: bool) -> Callable[[str], bool]:
    """SQL LIKE (`%` any run of characters, `_` one) without a backtracking regular
    expression: the pattern is cut at its `%`s, the first piece must start the text, the last
    end it, and each piece between is found at its leftmost place after the one before, which
    is where a match, if any, can always put it. Each piece is a regular expression of
    literals and `.` only, so finding it costs at most the text's length times the piece's,
    whatever the pattern; `%%%...%x` as `.*.*...x` would try every way to split the text."""
    flags = re.DOTALL | (re.IGNORECASE if ignore_case else 0)
    pieces = [
        re.compile("".join("." if c == "_" else re.escape(c) for c in piece), flags)
        for piece in pattern.split("%")
    ]
    if len(pieces) == 1:
        return lambda text: pieces[0].fullmatch(text) is not None
    # One character per pattern character, case folded or not: a piece's length is its span.
    head, middle, tail = pieces[0], [p for p in pieces[1:-1] if p.pattern], pieces[-1]
    tail_length = len(pattern.rsplit("%", 1)[1])
    shortest = len(pattern) - pattern.count("%")

    def matches(text: str) -> bool:
        if len(text) < shortest:
            return False
        found = head.match(text)
        if found is None:
            return False
        at, tail_at = found.end(), len(text) - tail_length
        for piece in middle:
            found = piece.search(text, at, tail_at)
            if found is None:
                return False
            at = found.end()
        return tail.fullmatch(text, tail_at) is not None

    return matches
