"""A teacher, a reward and an eval suite, named in specs by import path
(`team_loop.code:length_reward`) and found on the run's workingDir."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the type only: the job imports torch after checking the spec
    from crucible.extensions import ModelHandle


def echo_teacher(prompts: Sequence[str], *, suffix: str) -> list[str]:
    """Teacher: one completion per prompt (here its first character and a suffix)."""
    return [prompt[0] + suffix for prompt in prompts]


def length_reward(
    prompts: Sequence[str],
    completions: Sequence[str],
    metadata: Sequence[Mapping[str, Any]],
    *,
    target: int,
) -> list[float]:
    """Reward: one score per sample; metadata[i] is the rest of the prompt's record."""
    return [-abs(len(completion) - target) for completion in completions]


def likelihood_suite(model: "ModelHandle", *, reference: str) -> dict[str, float]:
    """Eval suite: metrics of one checkpoint, through the handle's logprob and generate."""
    once, twice = model.logprob(["1+1=", "1+1="], [reference, reference * 2])
    (generated,) = model.generate(["1+1="], max_new_tokens=2)
    return {
        "logprob_reference": once,
        "logprob_doubled": twice,
        "generated_chars": len(generated),
        "checkpoint_step": model.checkpoint.step,
    }
