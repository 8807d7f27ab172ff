"""Many episodes at once through the serving engine, or one after another with a scripted
policy (docs/agents.md, "Running episodes").

Through the engine, each live episode's conversation is rendered by the chat template and
submitted as one request per turn: the history it shares with the turn before sits in
cached KV blocks, so only the new messages are computed. While one episode's tools run in
the sandbox, the others keep generating.

Reproducible: a turn's sampling seed comes from (seed, episode, turn), and the engine's
sampling noise from that seed and the prompt alone, so the same seed gives the same
records whatever the concurrency and whatever order the tools finish in.
"""

import hashlib
from collections import deque
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any

from crucible.agents.episode import Episode, PendingCall, Reply
from crucible.agents.loading import EnvironmentSource
from crucible.agents.protocol import ScriptedPolicy
from crucible.agents.records import EndReason, EpisodeRecord
from crucible.agents.sandbox import Sandbox, ToolRun
from crucible.config.online_rl import EpisodeConfig
from crucible.engine.engine import Engine
from crucible.models.chat import encode_chat_prompt


def run_episodes(
    engine: Engine,
    source: EnvironmentSource,
    tasks: Sequence[dict[str, Any]],
    *,
    seed: int,
    config: EpisodeConfig,
    sandbox: Sandbox,
    first_index: int = 0,
) -> list[EpisodeRecord]:
    """One episode per task, sampled from `engine` (which the runner has to itself until it
    returns); the records in the tasks' order. The episodes are numbered from
    `first_index` (a share of a larger batch: the number seeds the sampling)."""
    return _EngineRun(
        engine, source, tasks, seed=seed, config=config, sandbox=sandbox, first_index=first_index
    ).run()


def run_scripted(
    policy: ScriptedPolicy,
    source: EnvironmentSource,
    tasks: Sequence[dict[str, Any]],
    *,
    seed: int,
    config: EpisodeConfig,
    sandbox: Sandbox,
) -> list[EpisodeRecord]:
    """One episode per task, one after another, with `policy` writing the assistant's
    messages: an environment's test, and a baseline. The records hold no tokens."""
    records = []
    for index, task in enumerate(tasks):
        episode = _episode(index, task, source, seed, config)
        episode.open()
        while not episode.ended:
            calls = episode.take_reply(Reply(policy(list(episode.messages))))
            episode.take_tool_runs([sandbox.run(c.target, c.arguments) for c in calls])
        records.append(episode.record())
    return records


def turn_seed(seed: int, episode: int, turn: int) -> int:
    """The sampling seed of one turn of one episode."""
    digest = hashlib.blake2b(f"{seed}:{episode}:{turn}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def _episode(
    index: int, task: dict[str, Any], source: EnvironmentSource, seed: int, config: EpisodeConfig
) -> Episode:
    return Episode(
        index=index,
        task=task,
        source=source,
        seed=seed,
        max_turns=config.max_turns,
        max_tool_calls=config.max_tool_calls_per_turn,
    )


class _EngineRun:
    """The loop of `run_episodes`: admit episodes, submit their turns, step the engine,
    hand finished turns to their episodes, run their tools, repeat."""

    def __init__(
        self,
        engine: Engine,
        source: EnvironmentSource,
        tasks: Sequence[dict[str, Any]],
        *,
        seed: int,
        config: EpisodeConfig,
        sandbox: Sandbox,
        first_index: int,
    ) -> None:
        self.engine, self.config, self.sandbox, self.seed = engine, config, sandbox, seed
        self.episodes = [
            _episode(first_index + i, t, source, seed, config) for i, t in enumerate(tasks)
        ]
        self.unopened = deque(self.episodes)
        self.live = 0
        self.generating: dict[str, tuple[Episode, list[int]]] = {}
        self.tools_running: dict[Episode, list[Future[ToolRun]]] = {}
        self.pool = ThreadPoolExecutor(config.tool_workers, thread_name_prefix="tools")

    def run(self) -> list[EpisodeRecord]:
        with self.pool:
            try:
                self._admit()
                while self.live:
                    self._advance()
            finally:
                # Raised out of the loop (a chat template that cannot render a message):
                # the engine must not keep generating for episodes nobody will read.
                for request_id in self.generating:
                    self.engine.abort(request_id)
        return [e.record() for e in self.episodes]

    def _advance(self) -> None:
        """One engine step (or, with nothing to generate, a wait for a tool), then the
        turns and tool calls that finished, then new episodes in the freed places."""
        if self.engine.has_work:
            for progress in self.engine.step():
                if progress.finished:
                    self._finished_turn(progress.seq.request_id)
        elif self.tools_running:
            running = [f for fs in self.tools_running.values() for f in fs]
            wait(running, return_when=FIRST_COMPLETED)
        else:  # a live episode is either generating or waiting for its tools
            raise RuntimeError(f"{self.live} episodes live, none generating or running a tool")
        self._collect_tools()
        self._admit()

    def _admit(self) -> None:
        while self.unopened and self.live < self.config.concurrency:
            episode = self.unopened.popleft()
            episode.open()
            self.live += 1
            self._next_turn(episode)

    def _next_turn(self, episode: Episode) -> None:
        """Submit the episode's next turn, or count it out when it has ended."""
        if not episode.ended:
            self._submit(episode)
        if episode.ended:
            self.live -= 1

    def _submit(self, episode: Episode) -> None:
        prompt = encode_chat_prompt(self.engine.tokenizer, episode.messages)
        room = self.engine.max_sequence_tokens - len(prompt)
        if room < 1:
            episode.stop(
                EndReason.CONTEXT_FULL,
                f"the conversation is {len(prompt)} tokens; a sequence holds at most "
                f"{self.engine.max_sequence_tokens}",
            )
            return
        params = self.config.sampling(
            max_tokens=min(self.config.max_tokens_per_turn, room),
            seed=turn_seed(self.seed, episode.index, len(episode.turns)),
        )
        request_id = f"episode-{episode.index}-turn-{len(episode.turns)}"
        self.engine.add_request(prompt, params, request_id=request_id)
        self.generating[request_id] = (episode, prompt)

    def _finished_turn(self, request_id: str) -> None:
        episode, prompt = self.generating.pop(request_id)
        (completion,) = self.engine.release(request_id).completions
        calls = episode.take_reply(
            Reply(
                text=completion.text,
                prompt_ids=prompt,
                completion_ids=completion.tokens,
                logprobs=[t.logprob for t in completion.logprobs],
                finish_reason=str(completion.finish_reason),
            )
        )
        if calls:
            self.tools_running[episode] = [self._run_tool(c) for c in calls]
        else:
            episode.take_tool_runs([])
            self._next_turn(episode)

    def _run_tool(self, call: PendingCall) -> "Future[ToolRun]":
        return self.pool.submit(self.sandbox.run, call.target, call.arguments)

    def _collect_tools(self) -> None:
        done = [e for e, fs in self.tools_running.items() if all(f.done() for f in fs)]
        for episode in sorted(done, key=lambda e: e.index):
            runs = [f.result() for f in self.tools_running.pop(episode)]
            episode.take_tool_runs(runs)
            self._next_turn(episode)
