"""What a team's own code is written against: the contracts of the rewards, eval suites,
teachers and environments a spec names by import path (docs/workloads.md, docs/agents.md).
Import from here rather than from the modules behind it, which may move.

`ModelHandle` (what an eval suite is handed) is imported on first use, since it needs torch:
a job checks a spec's import paths before it imports torch.
"""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from crucible.agents.protocol import AgentEnvironment, Message, ToolResult, ToolSpec, Turn
from crucible.rollouts.environments import Environment

if TYPE_CHECKING:
    from crucible.rollouts.model_handle import ModelHandle

__all__ = [
    "AgentEnvironment",
    "Environment",
    "EvalSuite",
    "Message",
    "ModelHandle",
    "Reward",
    "Teacher",
    "ToolResult",
    "ToolSpec",
    "Turn",
]


class Reward(Protocol):
    """`reward(prompts, completions, metadata, **options) -> scores`: one float per sample;
    `metadata[i]` is the prompt's record without its "prompt" field."""

    def __call__(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
        /,
        **options: Any,
    ) -> Sequence[float]: ...


class Teacher(Protocol):
    """`teacher(prompts, **options) -> completions`: one string per prompt."""

    def __call__(self, prompts: Sequence[str], /, **options: Any) -> Sequence[str]: ...


class EvalSuite(Protocol):
    """`suite(model, **options) -> {metric: value}`, scoring a checkpoint's model."""

    def __call__(self, model: "ModelHandle", /, **options: Any) -> Mapping[str, float]: ...


def __getattr__(name: str) -> Any:
    if name == "ModelHandle":
        from crucible.rollouts.model_handle import ModelHandle

        return ModelHandle
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
