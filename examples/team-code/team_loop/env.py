"""An environment, named in a RolloutJob's spec by import path (`team_loop.env:ReplyLength`)
and found on the run's workingDir: it makes the prompts and scores the samples."""

from collections.abc import Mapping, Sequence
from typing import Any


class ReplyLength:
    """Chats asking for a reply of some length; a reply scores minus how far off it is."""

    def __init__(self, *, longest: int = 5) -> None:
        self.longest = longest

    def prompts(self, count: int, seed: int) -> list[dict[str, Any]]:
        """`count` records, the same for the same seed: a chat, and what `score` reads."""
        lengths = [1 + (seed + i) % self.longest for i in range(count)]
        return [
            {"messages": [{"role": "user", "content": f"Reply in {n} letters."}], "length": n}
            for n in lengths
        ]

    def score(
        self,
        prompts: Sequence[str],
        completions: Sequence[str],
        metadata: Sequence[Mapping[str, Any]],
    ) -> list[float]:
        """One score per sample; metadata[i] is its prompt's record (the chat included)."""
        return [
            -abs(len(completion.strip()) - meta["length"])
            for completion, meta in zip(completions, metadata, strict=True)
        ]
