"""RL health: what each round of online RL did (`RoundHealth`), and the two checks that fail
a run rather than let it train on something wrong.

- `check_agreement`: at the first update of a round whose samples all come from the
  trainer's current version (every round of a synchronous run), the trainer's logprobs of
  the sampled tokens must equal the engine's: same weights, same tokens. When they do
  not, the generator is not running the trainer's weights (a weight update that did not
  arrive, keys and values cached under old weights) or the two compute differently, and
  every importance ratio of the run would be wrong.
- `check_failures`: episodes that ended because the environment or a tool failed, or the
  reward was not a number, judge nothing about the model: they are left out of training,
  and past `max_failed_fraction` of a batch the run stops.
"""

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from crucible.agents.records import FAILED_ENDS, EpisodeRecord
from crucible.online_rl.learner import LogprobComparison


class LogprobMismatch(RuntimeError):
    """The trainer and the generator disagree on the logprobs of the same tokens under the
    same weights."""


class TooManyFailedEpisodes(RuntimeError):
    """More of a batch's episodes failed than `max_failed_fraction` allows."""


@dataclass(frozen=True)
class GeneratorNote:
    """Something a pool of generators did about one of them, with why
    (`online_rl/generator_pool.py`)."""

    kind: str
    """`behind` (its share shrinks) or `dropped` (it is out of the pool)."""

    generator: int
    detail: str


@dataclass(frozen=True)
class RoundHealth:
    """One round of online RL. Times are wall-clock seconds of this round; counts are of
    this round only."""

    round: int
    version: int
    """The policy version the trainer published to the generator at the end of the round."""

    wall_s: float
    generate_s: float
    """Seconds the generator took for the batches accepted this round (in a background
    thread while the trainer trained, with max_staleness >= 1)."""

    train_s: float
    weight_update_s: float
    """Copying the new weights into the generator's model."""

    idle_s: float
    """The trainer waiting for samples: the whole generation in a synchronous round."""

    episodes: int
    """Episodes in the batches accepted this round."""

    episodes_failed: dict[str, int]
    """Of those, the ones left out because the environment or a tool failed or the reward
    was not a number, by end reason."""

    samples_accepted: int
    """Episodes that entered the buffer."""

    discarded: dict[str, int]
    """Episodes the buffer dropped this round, by reason: `stale`, `duplicate`, `too_small`."""

    samples_trained: int
    updates: int
    """Optimizer steps taken; a step with nothing to train on is not taken."""

    staleness_max: int | None
    """Largest trainer version - sample version among the samples trained (None: none)."""

    mean_reward: float | None
    """Mean reward of the samples trained this round."""

    tool_calls_per_episode: float | None
    """Mean tool calls (those that ran and those refused) per sample trained this round."""

    loss: float | None
    """Mean loss over the round's updates."""

    grad_norm: float | None
    """Mean gradient norm over the round's updates, before clipping."""

    first_update: LogprobComparison | None
    """The trainer's logprobs against the rollout's at the round's first update, before
    its step: the mismatch that staleness and numerics make, not this round's training."""

    trained_groups: tuple[str, ...] = field(default=())
    """Ids of the groups trained on, in order."""

    generators: int | None = None
    """Generators left in the pool at the round's end; None for one in the trainer's
    process."""

    generator_notes: tuple[GeneratorNote, ...] = field(default=())
    """What the pool noted since the round before: a generator behind the others, one
    dropped, each with why."""

    def metrics(self) -> dict[str, float]:
        """The numbers as one flat mapping, for a metrics log (`run.log(..., step=round)`);
        what a round did not measure is left out."""
        values: dict[str, float] = {
            "version": self.version,
            "wall_s": self.wall_s,
            "generate_s": self.generate_s,
            "train_s": self.train_s,
            "weight_update_s": self.weight_update_s,
            "idle_s": self.idle_s,
            "episodes": self.episodes,
            "samples_accepted": self.samples_accepted,
            "samples_trained": self.samples_trained,
            "updates": self.updates,
            "episodes_failed": sum(self.episodes_failed.values()),
            "discarded_stale": self.discarded.get("stale", 0),
        }
        if self.generators is not None:
            values["generators"] = self.generators
            for kind in ("behind", "dropped"):
                notes = [n for n in self.generator_notes if n.kind == kind]
                values[f"generators_{kind}"] = len(notes)
        values |= {f"episodes_failed/{k}": v for k, v in self.episodes_failed.items()}
        values |= {f"discarded/{k}": v for k, v in self.discarded.items()}
        optional = {
            "staleness_max": self.staleness_max,
            "mean_reward": self.mean_reward,
            "tool_calls_per_episode": self.tool_calls_per_episode,
            "loss": self.loss,
            "grad_norm": self.grad_norm,
        }
        if self.first_update is not None:
            optional |= {
                "kl": self.first_update.kl,
                "ratio_mean": self.first_update.ratio_mean,
                "ratio_max_deviation": self.first_update.ratio_max_deviation,
                "logprob_diff_mean": self.first_update.logprob_diff_mean,
                "logprob_diff_max": self.first_update.logprob_diff_max,
            }
        values |= {k: v for k, v in optional.items() if v is not None}
        return {k: float(v) for k, v in values.items()}


def check_agreement(round_index: int, comparison: LogprobComparison, *, tolerance: float) -> None:
    """Raise `LogprobMismatch` when the largest |logp_train - logp_rollout| exceeds
    `tolerance` at the first update of an on-policy round."""
    if comparison.logprob_diff_max > tolerance:
        raise LogprobMismatch(
            f"round {round_index}: at the first update, on samples of the trainer's own "
            f"policy version, the trainer's logprobs differ from the generator's by up to "
            f"{comparison.logprob_diff_max:.3g} (mean {comparison.logprob_diff_mean:.3g}, "
            f"|ratio - 1| up to {comparison.ratio_max_deviation:.3g}, {comparison.tokens} "
            f"tokens), past logprob_tolerance={tolerance:g}: the generator is not running "
            "the trainer's weights, or the two compute differently"
        )


def failed_by_reason(records: Sequence[EpisodeRecord]) -> dict[str, int]:
    """The episodes of `records` that training leaves out, counted by end reason."""
    return dict(sorted(Counter(str(r.end) for r in records if r.end in FAILED_ENDS).items()))


def check_failures(
    where: str, records: Sequence[EpisodeRecord], *, max_failed_fraction: float
) -> None:
    """Raise `TooManyFailedEpisodes` when more than `max_failed_fraction` of `records`
    failed, naming `where` (a round, a job), the reasons and the first failure's detail."""
    failed = [r for r in records if r.end in FAILED_ENDS]
    if len(failed) <= max_failed_fraction * len(records):
        return
    raise TooManyFailedEpisodes(
        f"{where}: {len(failed)} of {len(records)} episodes failed "
        f"({', '.join(f'{k} {v}' for k, v in failed_by_reason(records).items())}), more than "
        f"max_failed_fraction={max_failed_fraction:g} allows; the first: episode "
        f"{failed[0].index}: {failed[0].end_detail}"
    )
