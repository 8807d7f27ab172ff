"""One completion being generated: its tokens, its KV blocks, and why it ended."""

import enum
from dataclasses import dataclass, field

from crucible.config.sampling import SamplingParams


class Status(enum.Enum):
    WAITING = "waiting"
    """Queued for its prefill (new, or preempted and to be recomputed)."""

    RUNNING = "running"
    FINISHED = "finished"


class FinishReason(enum.StrEnum):
    """As the OpenAI API names them."""

    STOP = "stop"
    """EOS, a stop token or a stop string."""

    LENGTH = "length"
    """max_tokens, or the model's context is full."""

    ABORT = "abort"
    """The client went away or cancelled."""


@dataclass
class TokenLogprob:
    token: int
    logprob: float
    top: list[tuple[int, float]] = field(default_factory=list)
    """The most likely alternatives (when asked for), most likely first."""


@dataclass(eq=False)
class Sequence:
    id: int
    request_id: str
    index: int
    """Which of the request's `n` completions this is."""

    prompt: list[int]
    params: SamplingParams
    seed: int
    arrival: int
    """Admission order: the engine's request counter when it arrived."""

    output: list[int] = field(default_factory=list)
    logprobs: list[TokenLogprob] = field(default_factory=list)
    blocks: list[int] = field(default_factory=list)
    computed: int = 0
    """Tokens whose keys and values are in the blocks."""

    named_blocks: int = 0
    """Leading blocks already named in the pool (full and hashed)."""

    prefix_name: int = 0
    """The name of the last of those blocks (0 before the first)."""

    status: Status = Status.WAITING
    finish_reason: FinishReason | None = None
    text_end: int | None = None
    """Where a stop string cut the completion's text, in characters."""

    pending: int = 0
    """Tokens drawn on the device that the host has not read yet (0, 1, or 2 while a step
    is being launched behind the one in flight): `length` counts them, `output` not yet."""

    pending_row: int = -1
    """This sequence's row in the last step launched: where its newest pending token is."""

    @property
    def tokens(self) -> list[int]:
        """Prompt and the output read so far."""
        return self.prompt + self.output

    @property
    def length(self) -> int:
        """Positions, the pending tokens included: where the next token drawn goes."""
        return len(self.prompt) + len(self.output) + self.pending

    @property
    def finished(self) -> bool:
        return self.status is Status.FINISHED
