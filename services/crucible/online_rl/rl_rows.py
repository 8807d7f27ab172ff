"""Episodes to the trainer's RL rows (`training/data.py`'s `Example`, collated by
`collate_rows`): one row per turn, the loss on the model's completion only.

A turn's row is its `prompt_ids` then its `completion_ids`, the tokens the engine was given
and those it sampled. Everything else the conversation holds, the tool results and the
environment's observations, sits in the next turn's prompt and is never trained on. The
row's `old_logprobs` are the engine's logprobs of the completion, what the importance
ratio exp(logp_train - old_logp) divides by.

Credit: every turn of an episode gets the same advantage, the episode's final reward
normalised within its group of K episodes of one task. Multi-turn environments here reward
the outcome (the calculator's answer, the guess that finds the number), so no turn has a
reward of its own to be judged by, and the group baseline needs no value model.
"""

from collections.abc import Sequence

import torch

from crucible.agents.records import EpisodeRecord
from crucible.training.data import Example

ADVANTAGE_EPS = 1e-6
"""Added to the group's standard deviation, as `train_data.build_rl_groups` does: a group
whose rewards are all equal gets advantages of 0, not a division by zero."""


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """(reward - group mean) / (group std + eps): the GRPO advantage of each episode of a
    group, as an offline RL run computes it for a rollout dataset's groups."""
    if len(rewards) < 2:
        raise ValueError(f"a group needs at least 2 rewards to normalise, got {len(rewards)}")
    values = torch.tensor([float(r) for r in rewards], dtype=torch.float64)
    normalised = (values - values.mean()) / (values.std(unbiased=False) + ADVANTAGE_EPS)
    return [float(a) for a in normalised]


def episode_examples(record: EpisodeRecord, advantage: float, *, max_seq_len: int) -> list[Example]:
    """One example per turn of `record`, each with the episode's `advantage`.

    A turn longer than `max_seq_len` tokens (prompt and completion) is refused rather than
    cut: the engine never samples past the model's context, so such a turn comes from
    another model or another context length, and training on a cut piece of it would train
    on something no policy produced. A turn without completion tokens makes no row."""
    examples = []
    for number, turn in enumerate(record.turns, start=1):
        where = f"episode {record.index} turn {number}"
        if not turn.prompt_ids:
            raise ValueError(
                f"{where} has no prompt tokens (a scripted policy's record?); online RL "
                "trains on the episodes the engine sampled"
            )
        if len(turn.logprobs) != len(turn.completion_ids):
            raise ValueError(
                f"{where} has {len(turn.logprobs)} logprobs for {len(turn.completion_ids)} "
                "completion tokens; the importance ratio needs one per token"
            )
        if not turn.completion_ids:
            continue
        length = len(turn.prompt_ids) + len(turn.completion_ids)
        if length > max_seq_len:
            raise ValueError(
                f"{where} is {length} tokens ({len(turn.prompt_ids)} prompt, "
                f"{len(turn.completion_ids)} completion); the model's context holds "
                f"{max_seq_len}: the episode was not sampled by this model"
            )
        examples.append(
            Example(
                tokens=[*turn.prompt_ids, *turn.completion_ids],
                prompt_len=len(turn.prompt_ids),
                old_logprobs=[float(lp) for lp in turn.logprobs],
                advantage=advantage,
            )
        )
    return examples
