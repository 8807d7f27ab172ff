"""The built-in reward, eval suite, teacher and environment, registered by import path in
`plugins.py` and held to the same contracts as a team's own (docs/workloads.md)."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from crucible.config.parse import SECTIONS, build_task, given_fields, validated
from crucible.config.workload import TaskConfig
from crucible.rollouts.environments import ArithmeticEnvironment
from crucible.tasks.arithmetic import SolverTeacher, solve

if TYPE_CHECKING:  # torch is imported by the job once the config is known to be good
    from crucible.rollouts.model_handle import ModelHandle


def exact_match(
    prompts: Sequence[str], completions: Sequence[str], metadata: Sequence[Mapping[str, Any]]
) -> list[float]:
    """1.0 where the completion is exactly the answer (surrounding whitespace ignored): the
    `answer` field of the prompt's record, or, for an arithmetic prompt without one, the
    solver's answer (so a dataset of a weaker teacher's answers is still scored right)."""
    scores = []
    for index, (prompt, completion, meta) in enumerate(
        zip(prompts, completions, metadata, strict=True)
    ):
        answer = meta.get("answer")
        if answer is None:
            try:
                answer = solve(prompt)
            except ValueError:
                raise ValueError(
                    f"exact_match needs an `answer` field in the record of prompt {index} "
                    f"({prompt!r}), which is not an arithmetic problem"
                ) from None
        scores.append(1.0 if completion.strip() == str(answer).strip() else 0.0)
    return scores


def arithmetic(model: "ModelHandle") -> dict[str, float]:
    """Held-out exact-match accuracy and answer loss on the arithmetic task: the task of the
    checkpoint's meta with `config.task` on top, `config.eval` for the problems."""
    from crucible.config.parse import parse_config_object
    from crucible.rollouts.evaluate import evaluate
    from crucible.tasks.arithmetic import ArithmeticTask

    config = parse_config_object(model.config)
    task = ArithmeticTask(
        config.task_over(model.checkpoint.meta.get("task"), "the checkpoint's meta.task")
    )
    problems = task.sample("held_out", config.eval.num_problems, seed=config.eval.seed, unique=True)
    result = evaluate(model.model, model.tokenizer, problems, config.eval)
    return {
        "accuracy": result.accuracy,
        "loss": result.loss,
        "num_problems": float(result.num_problems),
    }


def arithmetic_solver(prompts: Sequence[str]) -> list[str]:
    """The programmatic teacher: the exact answer to each arithmetic prompt."""
    return SolverTeacher().complete(prompts)


def arithmetic_environment(
    *,
    digits: int = TaskConfig.digits,
    operators: Sequence[str] = TaskConfig.operators,
    held_out_fraction: float = TaskConfig.held_out_fraction,
) -> ArithmeticEnvironment:
    """The arithmetic task as an environment (`environments.ArithmeticEnvironment`), its
    options the fields of `config.task`; a value the task cannot draw from is a ConfigError."""
    where = "spec.environment.options"
    given = {"digits": digits, "operators": operators, "held_out_fraction": held_out_fraction}
    return ArithmeticEnvironment(
        build_task(given_fields(validated(SECTIONS["task"], where, given)), where)
    )
