"""Which sequences run in the next step: continuous batching over the block pool.

Every step, each running sequence gets room for its next token (a new block when its last
one is full); when the pool runs dry the newest running sequence is preempted: its blocks
go back and it waits at the head of the queue to be recomputed, prompt and output so far,
when memory allows. Then waiting sequences are admitted in arrival order while there are
blocks, running slots and prefill tokens to spare; a sequence first takes the cached
blocks of its prefix and computes only the rest (unless prefix caching is off: then every
sequence computes its whole prompt in blocks of its own).
"""

import bisect
from collections import deque
from dataclasses import dataclass, field

from crucible.engine.blocks import BlockPool, block_hashes
from crucible.engine.sequence import FinishReason, Sequence, Status


@dataclass
class Plan:
    prefill: list[Sequence] = field(default_factory=list)
    """Sequences computing `tokens[computed:]`, then sampling their next token."""

    decode: list[Sequence] = field(default_factory=list)
    """Running sequences computing their last token and sampling the next."""

    preempted: list[Sequence] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.prefill and not self.decode


def _order(seq: Sequence) -> tuple[int, int]:
    return (seq.arrival, seq.index)


class Scheduler:
    def __init__(
        self,
        pool: BlockPool,
        *,
        max_running: int,
        max_prefill_tokens: int,
        prefix_caching: bool = True,
    ) -> None:
        self.pool = pool
        self.max_running = max_running
        self.max_prefill_tokens = max_prefill_tokens
        self.prefix_caching = prefix_caching
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        """In arrival order: the oldest keep their blocks when memory runs short."""

        self.watermark = max(1, pool.num_blocks // 100)
        """Blocks admission leaves free, so running sequences can grow a while before
        anything is preempted."""

        self.admission_batch = max(1, max_running // 16)
        """Free running slots admission waits for while sequences run. A step with prompts
        in it runs their forward eagerly, kernel by kernel, where a decode-only step replays
        a graph: admitting one sequence each time one finishes would make nearly every step
        such a step. A slot or two stays empty for a few steps instead."""

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def blocks_for(self, tokens: int) -> int:
        return -(-tokens // self.pool.block_size)

    def finish(self, seq: Sequence, reason: FinishReason) -> None:
        """Retire `seq` wherever it is, its blocks back to the pool."""
        if seq.status is Status.RUNNING:
            self.running.remove(seq)
        elif seq.status is Status.WAITING:
            self.waiting.remove(seq)
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.status = Status.FINISHED
        seq.finish_reason = reason

    def plan(self) -> Plan:
        plan = Plan()
        self._grow_running(plan)
        if not plan.preempted:
            self._admit(plan)
        return plan

    def _grow_running(self, plan: Plan) -> None:
        for seq in list(self.running):
            if seq.status is not Status.RUNNING:
                continue  # preempted for an older sequence in this loop
            while len(seq.blocks) * self.pool.block_size < seq.length and not self.pool.free:
                victim = self.running[-1]
                self._preempt(victim, plan)
                if victim is seq:
                    break
            if seq.status is not Status.RUNNING:
                continue
            if len(seq.blocks) * self.pool.block_size < seq.length:
                seq.blocks.append(self.pool.allocate())
            plan.decode.append(seq)

    def _preempt(self, seq: Sequence, plan: Plan) -> None:
        self.running.remove(seq)
        self.pool.release(seq.blocks)
        seq.blocks = []
        seq.computed = 0
        seq.named_blocks = seq.prefix_name = 0
        seq.status = Status.WAITING
        self.waiting.appendleft(seq)
        plan.preempted.append(seq)

    def _admit(self, plan: Plan) -> None:
        if self.running and self.max_running - len(self.running) < self.admission_batch:
            return
        budget = self.max_prefill_tokens
        filling: set[int] = set()
        """Names of the blocks this step's prefills fill: a later sequence with the same
        prefix waits a step and shares them instead of computing them again, while the
        sequences behind it are admitted (the K samples of each of many prompts would
        otherwise come in one prompt a step)."""

        deferred: deque[Sequence] = deque()
        while self.waiting and len(self.running) < self.max_running:
            seq = self.waiting.popleft()
            tokens = seq.tokens
            # The last token is always computed: its logits give the next one. Without
            # prefix caching there are no names to look up, so nothing is shared and
            # nothing waits for another sequence's prefill either.
            names = block_hashes(tokens[:-1], self.pool.block_size) if self.prefix_caching else []
            shared: list[int] = []
            for name in names:
                block = self.pool.cached(name)
                if block is None:
                    break
                shared.append(block)
            if len(shared) < len(names) and names[len(shared)] in filling:
                self.pool.release(shared)
                deferred.append(seq)
                continue
            fresh = self.blocks_for(len(tokens)) - len(shared)
            to_compute = len(tokens) - len(shared) * self.pool.block_size
            alone = not self.running and not plan.prefill
            over_budget = not alone and to_compute > budget
            # Alone, a sequence may dip below the watermark: nothing else could grow.
            short = self.pool.free - fresh < (0 if alone else self.watermark)
            if over_budget or short:
                # Memory and the budget go in arrival order: nothing behind it jumps ahead.
                self.pool.release(shared)
                self.waiting.appendleft(seq)
                break
            seq.blocks = shared + [self.pool.allocate() for _ in range(fresh)]
            seq.named_blocks = len(shared)
            seq.prefix_name = names[len(shared) - 1] if shared else 0
            seq.computed = len(shared) * self.pool.block_size
            seq.status = Status.RUNNING
            bisect.insort(self.running, seq, key=_order)
            filling.update(names[len(shared) :])
            budget -= to_compute
            plan.prefill.append(seq)
        self.waiting.extendleft(reversed(deferred))
