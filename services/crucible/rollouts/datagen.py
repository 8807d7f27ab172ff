"""A teacher answers problems; the answers become an SFT dataset (JSONL of prompt/completion)."""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from crucible.tasks.arithmetic import Problem, Teacher
from crucible.training.records import write_jsonl


def teach(teacher: Teacher, problems: Sequence[Problem]) -> list[dict[str, Any]]:
    """One {"prompt", "completion"} record per problem, answered by the teacher."""
    prompts = [p.prompt for p in problems]
    completions = teacher.complete(prompts)
    if len(completions) != len(prompts):
        raise ValueError(
            f"the teacher answered {len(completions)} of {len(prompts)} prompts; "
            "a Teacher must return one completion per prompt"
        )
    return [{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)]


def write_sft_dataset(path: Path | str, teacher: Teacher, problems: Sequence[Problem]) -> int:
    """Write the teacher's answers as JSONL; returns the record count."""
    return write_jsonl(path, teach(teacher, problems))
