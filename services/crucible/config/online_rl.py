"""The settings of episodes and of online RL: plain dataclasses that check their values,
apart from the code that runs them so that a job's config can be checked without torch
(`config/parse.py` makes the `config.online` section from them)."""

import math
from dataclasses import dataclass, field

from crucible.config.engine import EngineConfig
from crucible.config.sampling import SamplingParams


@dataclass(frozen=True)
class EpisodeConfig:
    max_turns: int = 8
    """Assistant messages per episode, at most."""

    max_tokens_per_turn: int = 256
    """Longest assistant message in tokens (fewer when the context has less room)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    stop: tuple[str, ...] = ()
    """Strings that end a turn, beside the end-of-turn token the chat template writes (EOS
    for the built-in template); a Hugging Face template's end-of-turn token goes in
    `stop_token_ids` where it is not the tokenizer's EOS."""

    stop_token_ids: tuple[int, ...] = ()
    max_tool_calls_per_turn: int = 4
    """Tool calls run from one message; more get a tool message saying so."""

    concurrency: int = 64
    """Episodes live at once; the engine batches their turns."""

    tool_workers: int = 4
    """Tool calls running at once, each a process of its own."""

    def __post_init__(self) -> None:
        for name in (
            "max_turns",
            "max_tokens_per_turn",
            "max_tool_calls_per_turn",
            "concurrency",
            "tool_workers",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"episode config {name} must be a positive integer, got {value!r}")
        self.sampling(max_tokens=self.max_tokens_per_turn, seed=0)  # bad sampling fails now

    def sampling(self, *, max_tokens: int, seed: int) -> SamplingParams:
        """The engine's parameters for one turn (an InvalidParameter names a bad field)."""
        return SamplingParams(
            max_tokens=max_tokens,
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            seed=seed,
            stop=self.stop,
            stop_token_ids=self.stop_token_ids,
        )


GENERATORS = ("thread", "process", "pod")
"""Where online RL's generator may run (`OnlineRLConfig.generator`)."""

DEFAULT_LOGPROB_TOLERANCE = 1e-3
"""The largest |logp_train - logp_rollout| allowed at the first update of an on-policy
round. On the CPU in float32 the two forwards (the engine's paged one, the trainer's
whole-sequence one) differ only by the order of float sums, far below this; a weight that
did not arrive, or keys and values cached under old weights, differ far above it
(docs/agents.md gives the measurement). A GPU in bf16 needs its own measurement."""


@dataclass(frozen=True)
class OnlineRLConfig:
    episodes_per_round: int = 64
    """Episodes generated per round: `episodes_per_round / group_size` tasks, each played
    `group_size` times."""

    group_size: int = 8
    """K, the episodes of one task whose rewards normalise each other's advantages: at
    least 2."""

    updates_per_round: int = 1
    """Optimizer steps per round; each takes an equal share of the round's groups, so the
    number of tasks per round must divide by it."""

    micro_batch_size: int = 0
    """Rows (an episode's turns, one row each) per forward and backward within an optimizer
    step; their gradients accumulate, each micro-batch's loss weighted by its share of the
    step's tokens, so the step is the one-pass step up to float rounding. 0: the step's
    rows in one pass. Bounds the trainer's activation memory."""

    max_staleness: int = 0
    """How many policy versions a sample may lag the trainer when trained on. 0:
    synchronous, generate then train. k >= 1: batch i is sampled by version max(0, i - k),
    in a background thread, up to k rounds ahead of the trainer; a sample older than the
    bound (after a resume with a tighter one) is dropped and counted as `stale`."""

    lr: float = 1e-5
    """AdamW's learning rate, constant."""

    weight_decay: float = 0.0
    """AdamW weight decay on the matmul weights (`training/train.py` `build_optimizer`)."""

    grad_clip: float = 1.0
    """Clip the gradient norm to this; 0 does not clip."""

    clip_eps: float = 0.2
    """The importance ratio exp(logp_train - old_logp) is clipped to [1 - eps, 1 + eps]
    (PPO-style); 0 does not clip."""

    kl_coef: float = 0.0
    """Weight of the KL penalty to the starting policy (a frozen copy is kept when > 0)."""

    logprob_tolerance: float = DEFAULT_LOGPROB_TOLERANCE
    """At the first update of a round whose samples are all from the trainer's version, the
    largest |logp_train - logp_rollout| allowed before the run fails (`LogprobMismatch`);
    `math.inf` turns the check off."""

    max_failed_fraction: float = 0.5
    """A batch in which more than this share of the episodes failed (the environment raised
    or broke its contract, a tool failed, a reward was not a number) fails the run
    (`TooManyFailedEpisodes`); below it they are counted and left out."""

    seed: int = 0
    """Seeds the tasks and the sampling of every batch."""

    episode: EpisodeConfig = field(default_factory=EpisodeConfig)
    """How episodes are played: turns, tokens per turn, sampling. Sample at temperature 1
    with top_p 1 and top_k 0 for an unbiased gradient: the engine's logprobs, and so the
    importance ratios, are of the untempered, unfiltered policy."""

    engine: EngineConfig = field(default_factory=EngineConfig)
    """The generator's engine, built once for the run. On the CPU give `num_blocks`: the
    default sizes the KV cache at `cpu_kv_gib`."""

    generator: str = "thread"
    """Where the generator runs: "thread", in the trainer's process (each new policy version
    copied in memory); "process", in a process of its own on the same device (each version
    through a safetensors file, the requests over a local socket); "pod", in pods of their
    own that the operator starts beside the trainer's on Kubernetes (the same files on the
    run's shared volume, the requests over the pod network), and processes as for "process"
    in the local mode."""

    generators: int = 1
    """With `generator: process` or `pod`, how many generators sample each batch: each
    plays a contiguous share of the batch's tasks (whole groups) at the same time, and an
    episode is the same whichever plays it (its seeds come from its place in the batch).
    Each has its own engine, holding `engine.num_blocks` blocks when given, else sized for
    its share of the episodes. One that falls behind the others gets smaller shares
    (`online_rl/generator_pool.py`)."""

    generator_timeout_s: float = 600.0
    """With `generator: process` or `pod`: a generator that has not answered its share of a
    batch, or a weight update, in this many seconds is dropped, its share played by the
    others; the run fails when none is left. Give more than a share takes."""

    def __post_init__(self) -> None:
        if self.generator not in GENERATORS:
            raise ValueError(
                f"online RL generator must be one of {', '.join(GENERATORS)}, got "
                f"{self.generator!r}"
            )
        for name in ("episodes_per_round", "updates_per_round", "generators"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"online RL {name} must be a positive integer, got {value!r}")
        micro = self.micro_batch_size
        if isinstance(micro, bool) or not isinstance(micro, int) or micro < 0:
            raise ValueError(
                f"online RL micro_batch_size must be an integer >= 0 (0: the whole step in "
                f"one pass), got {micro!r}"
            )
        k = self.group_size
        if isinstance(k, bool) or not isinstance(k, int) or k < 2:
            raise ValueError(
                f"online RL group_size must be an integer of at least 2 (a group's advantages "
                f"are normalised against the others in it), got {k!r}"
            )
        if self.episodes_per_round % k:
            raise ValueError(
                f"online RL episodes_per_round={self.episodes_per_round} is not a multiple of "
                f"group_size={k}: each task is played group_size times"
            )
        if self.groups_per_round % self.updates_per_round:
            raise ValueError(
                f"online RL's {self.groups_per_round} tasks per round (episodes_per_round / "
                f"group_size) do not split into updates_per_round={self.updates_per_round} "
                "equal updates"
            )
        if self.generators > 1 and self.generator == "thread":
            raise ValueError(
                f"online RL generators={self.generators} needs generator: process or pod (a "
                f"generator in the trainer's process is one), got generator: {self.generator}"
            )
        if self.generators > self.groups_per_round:
            raise ValueError(
                f"online RL generators={self.generators} is more than the "
                f"{self.groups_per_round} tasks of a round: a generator plays whole groups"
            )
        staleness = self.max_staleness
        if isinstance(staleness, bool) or not isinstance(staleness, int) or staleness < 0:
            raise ValueError(
                f"online RL max_staleness must be an integer >= 0 (0: synchronous), got "
                f"{staleness!r}"
            )
        for name in ("lr", "weight_decay", "grad_clip", "clip_eps", "kl_coef"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or not value >= 0 or math.isinf(value):
                raise ValueError(f"online RL {name} must be a finite number >= 0, got {value!r}")
        timeout = self.generator_timeout_s
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(
                f"online RL generator_timeout_s must be a number of seconds > 0, got {timeout!r}"
            )
        if not self.logprob_tolerance > 0:
            raise ValueError(
                f"online RL logprob_tolerance must be > 0 (math.inf: no check), got "
                f"{self.logprob_tolerance!r}"
            )
        if not 0 <= self.max_failed_fraction <= 1:
            raise ValueError(
                "online RL max_failed_fraction must be from 0 to 1, got "
                f"{self.max_failed_fraction!r}"
            )

    @property
    def groups_per_round(self) -> int:
        return self.episodes_per_round // self.group_size
