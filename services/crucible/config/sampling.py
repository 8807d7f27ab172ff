"""What a request asks of the engine: how to sample and when to stop."""

import math
from dataclasses import dataclass


class InvalidParameter(ValueError):
    """A request parameter out of range; `field` names it, as the HTTP error does."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


MAX_TOP_LOGPROBS = 20
"""Alternatives per token a request may ask for (OpenAI's own limit)."""


@dataclass(frozen=True)
class SamplingParams:
    """Sampling and stopping for one request; checked when built."""

    max_tokens: int = 16
    """Longest completion in tokens; fewer when the model's context runs out first."""

    temperature: float = 1.0
    """Softmax temperature; 0 is greedy decoding."""

    top_p: float = 1.0
    """Nucleus sampling: keep the most likely tokens until their probability reaches top_p
    (after top_k), the most likely one always."""

    top_k: int = 0
    """Keep only the k most likely tokens; 0 keeps all."""

    seed: int | None = None
    """Sampling noise comes from (seed, sample index, position) only: the same request with
    the same seed gets the same completion whatever else the engine runs beside it. None
    draws a fresh seed."""

    n: int = 1
    """Completions for the prompt; they share its KV blocks."""

    stop: tuple[str, ...] = ()
    """Strings that end a completion; the text returned stops before the first one."""

    stop_token_ids: tuple[int, ...] = ()
    """Token ids that end a completion (included in its tokens), beside EOS."""

    ignore_eos: bool = False
    """Keep generating after EOS (benchmarks: fixed-length completions)."""

    top_logprobs: int = 0
    """Most likely alternatives to return with each token's logprob."""

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise InvalidParameter("max_tokens", f"must be at least 1, got {self.max_tokens}")
        if not (math.isfinite(self.temperature) and 0.0 <= self.temperature <= 100.0):
            raise InvalidParameter(
                "temperature", f"must be between 0 and 100, got {self.temperature}"
            )
        if not (math.isfinite(self.top_p) and 0.0 < self.top_p <= 1.0):
            raise InvalidParameter("top_p", f"must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InvalidParameter("top_k", f"must be 0 (off) or positive, got {self.top_k}")
        if self.n < 1:
            raise InvalidParameter("n", f"must be at least 1, got {self.n}")
        if any(not s for s in self.stop):
            raise InvalidParameter("stop", "stop strings must not be empty")
        if not 0 <= self.top_logprobs <= MAX_TOP_LOGPROBS:
            raise InvalidParameter(
                "logprobs",
                f"must be between 0 and {MAX_TOP_LOGPROBS}, got {self.top_logprobs}",
            )
        if self.seed is not None and not 0 <= self.seed < 2**63:
            raise InvalidParameter("seed", f"must be in [0, 2**63), got {self.seed}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
