"""The engine: requests in, tokens out, one step at a time.

`step()` plans with the scheduler, runs the prompts' forward and the decode forward,
samples every row at once, and retires what finished. Callers either drive it themselves
(`step` until `has_work` is False, as `generate` does) or run it in a thread behind
`AsyncEngine` (the HTTP server).
"""

import gc
import hashlib
import itertools
import secrets
from collections.abc import Sequence as Seq
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor

from crucible.config.engine import EngineConfig
from crucible.config.sampling import InvalidParameter, SamplingParams
from crucible.engine.blocks import BlockPool
from crucible.engine.decode_batch import decode_batch
from crucible.engine.decode_graphs import DecodeGraphs
from crucible.engine.in_flight import InFlight
from crucible.engine.models import build_runner, bytes_per_block
from crucible.engine.runner import ForwardBatch
from crucible.engine.sampler import SamplingRows, sample
from crucible.engine.scheduler import Plan, Scheduler
from crucible.engine.sequence import FinishReason, Sequence, Status, TokenLogprob
from crucible.models.hf import LanguageModel
from crucible.models.tokenizer import Tokenizer


@dataclass
class Completion:
    index: int
    tokens: list[int]
    logprobs: list[TokenLogprob]
    text: str
    finish_reason: FinishReason | None


@dataclass
class RequestOutput:
    request_id: str
    prompt: list[int]
    completions: list[Completion]

    @property
    def finished(self) -> bool:
        return all(c.finish_reason is not None for c in self.completions)


@dataclass
class Progress:
    """What one step did to one sequence: the token it added, and whether it ended."""

    seq: Sequence
    token: int | None
    finished: bool


@dataclass
class Counters:
    """Totals since the engine started."""

    prompt_tokens: int = 0
    """Prompt tokens computed (those found in cached blocks are not)."""

    generated_tokens: int = 0
    preemptions: int = 0


@dataclass(frozen=True)
class EngineStats:
    waiting: int
    running: int
    blocks_used: int
    blocks_total: int
    counters: Counters


@dataclass
class _Request:
    id: str
    prompt: list[int]
    sequences: list[Sequence] = field(default_factory=list)


class Engine:
    def __init__(
        self, model: LanguageModel, tokenizer: Tokenizer, config: EngineConfig | None = None
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config = config or EngineConfig()
        num_blocks = config.num_blocks or blocks_that_fit(model, config)
        self.runner = build_runner(model, num_blocks=num_blocks, block_size=config.block_size)
        self.pool = BlockPool(num_blocks, config.block_size)
        self.scheduler = Scheduler(
            self.pool,
            max_running=config.max_running,
            max_prefill_tokens=config.max_prefill_tokens,
            prefix_caching=config.prefix_caching,
        )
        self.device = self.runner.device
        self.graphs: DecodeGraphs | None = None
        if config.cuda_graphs and self.device.type == "cuda" and self.runner.graph_safe:
            self.graphs = DecodeGraphs(
                self.runner, max_rows=config.max_running, block_size=config.block_size
            )
        self.max_seq_len = self.runner.max_seq_len
        self._requests: dict[str, _Request] = {}
        self._ids = itertools.count()
        self.counters = Counters()
        self._in_flight: InFlight | None = None
        # The model, torch's modules and the cache live as long as the engine. Frozen, they
        # are left out of every full collection that the engine's many small per-token
        # objects trigger, which otherwise scans them all, step after step.
        gc.collect()
        gc.freeze()

    # -- requests ---------------------------------------------------------------------

    def add_request(
        self, prompt: Seq[int], params: SamplingParams, request_id: str | None = None
    ) -> str:
        """Queue `params.n` completions of `prompt` (token ids); returns the request's id."""
        prompt = list(prompt)
        self.check(prompt, params)
        request_id = request_id or f"req-{next(self._ids)}"
        if request_id in self._requests:
            raise InvalidParameter("request_id", f"{request_id!r} is already running")
        arrival = next(self._ids)
        seed = params.seed if params.seed is not None else secrets.randbits(62)
        request = _Request(request_id, prompt)
        for index in range(params.n):
            seq = Sequence(
                id=next(self._ids),
                request_id=request_id,
                index=index,
                prompt=prompt,
                params=params,
                seed=sequence_seed(seed, prompt, index),
                arrival=arrival,
            )
            request.sequences.append(seq)
            self.scheduler.add(seq)
        self._requests[request_id] = request
        return request_id

    def check(self, prompt: Seq[int], params: SamplingParams) -> None:
        """Refuse a request that could never run, naming the field at fault. Called before a
        request reaches the engine's step: an id past the embedding would fail the step, and
        with it every request in the batch."""
        if not prompt:
            raise InvalidParameter("prompt", "is empty")
        vocab = self.runner.vocab_size
        if min(prompt) < 0 or max(prompt) >= vocab:
            bad = next(token for token in prompt if not 0 <= token < vocab)
            raise InvalidParameter(
                "prompt",
                f"token id {bad} is outside the model's vocabulary of {vocab} ids "
                f"(0 to {vocab - 1})",
            )
        total = len(prompt) + params.max_tokens
        if total > self.max_seq_len:
            raise InvalidParameter(
                "max_tokens",
                f"the prompt's {len(prompt)} tokens plus max_tokens={params.max_tokens} "
                f"exceed the model's context of {self.max_seq_len} tokens",
            )
        needed = self.scheduler.blocks_for(total)
        if needed > self.pool.num_blocks:
            raise InvalidParameter(
                "max_tokens",
                f"{total} tokens need {needed} KV blocks; the engine has {self.pool.num_blocks}",
            )

    @property
    def max_sequence_tokens(self) -> int:
        """The most tokens, prompt plus completion, one sequence may have: the model's
        context, or the whole KV pool when that holds fewer."""
        return min(self.max_seq_len, self.pool.num_blocks * self.pool.block_size)

    def abort(self, request_id: str) -> None:
        """Stop a request's sequences and free their blocks (a client went away)."""
        request = self._requests.pop(request_id, None)
        if request is None:
            return
        for seq in request.sequences:
            if not seq.finished:
                self.scheduler.finish(seq, FinishReason.ABORT)

    def output(self, request_id: str) -> RequestOutput:
        request = self._requests[request_id]
        return RequestOutput(
            request_id, request.prompt, [self.completion(s) for s in request.sequences]
        )

    def completion(self, seq: Sequence) -> Completion:
        text = self.tokenizer.decode(seq.output)
        if seq.text_end is not None:
            text = text[: seq.text_end]
        return Completion(seq.index, list(seq.output), list(seq.logprobs), text, seq.finish_reason)

    def release(self, request_id: str) -> RequestOutput:
        """The finished request's output, forgotten by the engine."""
        output = self.output(request_id)
        del self._requests[request_id]
        return output

    def reset_prefix_cache(self) -> None:
        """Forget every cached prompt prefix, for when the model's weights change in place:
        keys and values computed under the old weights must not be shared with sequences
        under the new ones. Only while idle, since a running sequence's own blocks hold
        the old weights' keys and values too. The KV pool and any captured CUDA graphs stay
        (the graphs read the weights where they are, so an in-place copy reaches them)."""
        if self.has_work:
            raise RuntimeError(
                "reset the prefix cache only while the engine is idle: "
                f"{len(self.scheduler.running)} running, {len(self.scheduler.waiting)} waiting"
            )
        self.pool.forget_names()

    @property
    def has_work(self) -> bool:
        if self.scheduler.waiting or self.scheduler.running:
            return True
        # A step in flight whose every row was aborted has nothing left to read.
        return self._in_flight is not None and not all(s.finished for s in self._in_flight.rows)

    def generate(self, prompts: Seq[Seq[int]], params: SamplingParams) -> list[RequestOutput]:
        """Completions of every prompt, all queued at once and run to the end."""
        ids = [self.add_request(p, params) for p in prompts]
        while self.has_work:
            self.step()
        return [self.release(i) for i in ids]

    # -- the step ---------------------------------------------------------------------

    @torch.no_grad()
    def step(self) -> list[Progress]:
        """Launch the next step, then read the tokens of the one launched before it (what
        this returns): the device runs the new step while the host handles the last."""
        if self.model.training:
            # The model may be shared with a trainer that switched it back between steps:
            # dropout must not reach the samples.
            self.model.eval()
        plan = self.scheduler.plan()
        self.counters.preemptions += len(plan.preempted)
        # A row whose pending token is its last by length ends when that token is read.
        plan.decode = [s for s in plan.decode if not self._ends_by_length(s)]
        launched = None if plan.empty else self._launch(plan)
        progress = self._collect(self._in_flight) if self._in_flight is not None else []
        self._in_flight = launched
        return progress

    def _launch(self, plan: Plan) -> InFlight:
        rows = plan.prefill + plan.decode
        logits = self._forward(plan)
        sampled = sample(logits, self._sampling_rows(rows))
        for row, seq in enumerate(rows):
            # Queued on the device's one stream, this step's writes come before any later
            # step's reads: its positions count as computed, and its full blocks can be
            # shared from now on (the samples of one prompt find them in the next plan).
            seq.computed = seq.length
            self._name_full_blocks(seq)
            seq.pending += 1
            seq.pending_row = row
        return InFlight(rows, sampled)

    def _collect(self, step: InFlight) -> list[Progress]:
        drawn = step.read()
        progress = []
        for row, seq in enumerate(step.rows):
            if seq.finished:
                continue  # ended (or was aborted) while this step ran: its draw is dropped
            alternatives: list[tuple[int, float]] = []
            if drawn.top is not None and seq.params.top_logprobs:
                wanted = seq.params.top_logprobs
                alternatives = list(
                    zip(drawn.top[0][row][:wanted], drawn.top[1][row][:wanted], strict=True)
                )
            progress.append(
                self._advance(seq, drawn.tokens[row], drawn.logprobs[row], alternatives)
            )
        return progress

    def _ends_by_length(self, seq: Sequence) -> bool:
        return bool(seq.pending) and (
            len(seq.output) + seq.pending >= seq.params.max_tokens or seq.length >= self.max_seq_len
        )

    def stats(self) -> EngineStats:
        return EngineStats(
            waiting=len(self.scheduler.waiting),
            running=len(self.scheduler.running),
            blocks_used=self.pool.used,
            blocks_total=self.pool.num_blocks,
            counters=replace(self.counters),
        )

    def _forward(self, plan: Plan) -> Tensor:
        parts: list[Tensor] = []
        if plan.prefill:
            self.counters.prompt_tokens += sum(s.length - s.computed for s in plan.prefill)
            parts.append(self.runner.forward(self._batch(plan.prefill)))
        if plan.decode:
            parts.append(self._decode(plan.decode))
        return torch.cat(parts) if len(parts) > 1 else parts[0]

    def _decode(self, seqs: list[Sequence]) -> Tensor:
        graphs = self.graphs
        bucket = graphs.bucket(len(seqs)) if graphs is not None else None
        if graphs is not None and bucket is not None:
            rows, width = bucket, graphs.table_width
        else:
            rows, width = len(seqs), max(len(s.blocks) for s in seqs)
        batch = decode_batch(
            seqs,
            rows=rows,
            table_width=width,
            block_size=self.pool.block_size,
            scratch_block=self.runner.scratch_block,
            device=self.device,
            in_flight=self._in_flight.device_tokens if self._in_flight is not None else None,
        )
        if graphs is not None and bucket is not None:
            return graphs.forward(batch, len(seqs))
        return self.runner.forward(batch)

    def _batch(self, seqs: list[Sequence]) -> ForwardBatch:
        """Each sequence's uncomputed tokens as one padded batch (a prompt's forward)."""
        size = self.pool.block_size
        width = max(s.length - s.computed for s in seqs)
        table_width = max(len(s.blocks) for s in seqs)
        scratch = self.runner.scratch_block * size
        tokens, positions, slots, tables, lengths, last = [], [], [], [], [], []
        for seq in seqs:
            todo = range(seq.computed, seq.length)
            pad = width - len(todo)
            all_tokens = seq.tokens
            tokens.append([all_tokens[p] for p in todo] + [0] * pad)
            positions.append(list(todo) + [0] * pad)
            slots.append([seq.blocks[p // size] * size + p % size for p in todo] + [scratch] * pad)
            tables.append(
                seq.blocks + [self.runner.scratch_block] * (table_width - len(seq.blocks))
            )
            lengths.append(seq.length)
            last.append(len(todo) - 1)

        def tensor(rows: list[list[int]] | list[int]) -> Tensor:
            return torch.tensor(rows, dtype=torch.long).to(self.device, non_blocking=True)

        return ForwardBatch(
            tokens=tensor(tokens),
            positions=tensor(positions),
            slots=tensor(slots),
            block_tables=tensor(tables),
            lengths=tensor(lengths),
            last=tensor(last),
        )

    def _sampling_rows(self, seqs: list[Sequence]) -> SamplingRows:
        params = [s.params for s in seqs]
        # Two copies to the device, not one per field: this runs every step.
        floats = torch.tensor(
            [[p.temperature for p in params], [p.top_p for p in params]], dtype=torch.float32
        )
        ints = torch.tensor(
            [[p.top_k for p in params], [s.seed for s in seqs], [s.length for s in seqs]],
            dtype=torch.long,
        )
        floats = floats.to(self.device, non_blocking=True)
        ints = ints.to(self.device, non_blocking=True)
        return SamplingRows(
            temperature=floats[0],
            top_p=floats[1],
            top_k=ints[0],
            seeds=ints[1],
            positions=ints[2],
            filtered=any(p.top_p < 1.0 or p.top_k > 0 for p in params),
            top_logprobs=max(p.top_logprobs for p in params),
        )

    def _advance(
        self, seq: Sequence, token: int, logprob: float, top: list[tuple[int, float]]
    ) -> Progress:
        """Record the sampled token, name the blocks it filled, retire the sequence if done."""
        seq.pending -= 1
        seq.output.append(token)
        if seq.status is Status.RUNNING:
            self._name_full_blocks(seq)
        seq.logprobs.append(TokenLogprob(token, logprob, top))
        self.counters.generated_tokens += 1
        reason = self._finish_reason(seq, token)
        if reason is not None:
            self.scheduler.finish(seq, reason)
            seq.pending = 0  # a step launched behind this one drew a token that is dropped
        return Progress(seq, token, reason is not None)

    def _name_full_blocks(self, seq: Sequence) -> None:
        size = self.pool.block_size
        # A block is named by its tokens: those the host has read, computed on the device.
        # (Called for every row every step: a comparison, not min(), keeps it cheap.)
        read = len(seq.prompt) + len(seq.output)
        full = (seq.computed if seq.computed < read else read) // size
        if full > seq.named_blocks:
            tokens = seq.tokens
            name = seq.prefix_name
            for block in range(seq.named_blocks, full):
                name = hash((name, tuple(tokens[block * size : (block + 1) * size])))
                self.pool.name(seq.blocks[block], name)
            seq.prefix_name = name
            seq.named_blocks = full

    def _finish_reason(self, seq: Sequence, token: int) -> FinishReason | None:
        params = seq.params
        if token in params.stop_token_ids or (
            token == self.tokenizer.EOS and not params.ignore_eos
        ):
            return FinishReason.STOP
        if params.stop:
            text = self.tokenizer.decode(seq.output)
            ends = [i for i in (text.find(s) for s in params.stop) if i >= 0]
            if ends:
                seq.text_end = min(ends)
                return FinishReason.STOP
        if (
            len(seq.output) >= params.max_tokens
            or len(seq.prompt) + len(seq.output) >= self.max_seq_len
        ):
            return FinishReason.LENGTH
        return None


def sequence_seed(seed: int, prompt: Seq[int], index: int) -> int:
    """The noise stream of completion `index` of `prompt` under a request's `seed`: the same
    whatever `n` is and whatever else runs, and a different one for every other prompt (one
    seed for a whole rollout must not give its prompts the same noise)."""
    digest = hashlib.blake2b(digest_size=8)
    digest.update(f"{seed}:{index}:".encode())
    digest.update(",".join(map(str, prompt)).encode())
    return int.from_bytes(digest.digest(), "little") >> 1


def blocks_that_fit(model: LanguageModel, config: EngineConfig) -> int:
    per_block = bytes_per_block(model, config.block_size)
    device = next(model.parameters()).device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        budget = int(free * config.kv_memory_fraction)
    else:
        budget = int(config.cpu_kv_gib * 2**30)
    return max(1, budget // per_block)
