"""The engine against the uncached reference path: same tokens, same logprobs, whatever the
batching, the block size, the prefix sharing or the preemptions."""

import pytest
import torch

from crucible.config.engine import EngineConfig
from crucible.config.sampling import InvalidParameter, SamplingParams
from crucible.config.workload import model_preset
from crucible.engine.blocks import BlockPool, block_hashes
from crucible.engine.engine import Engine
from crucible.engine.paged_gpt import PagedGPT
from crucible.engine.scheduler import Scheduler
from crucible.engine.sequence import FinishReason, Sequence
from crucible.models.gpt import GPT
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.rollout import generate

TOK = ByteTokenizer()
PROMPTS = ["1+2=", "37+58=", "9*9=", "123-4=", "7=", "a much longer prompt of text"]
NEVER = 10**6
"""An EOS id no model produces: completions run to max_tokens."""

VOCAB = model_preset("tiny").vocab_size
"""The model's embedding rows (the conftest's model), more than the tokenizer's ids."""


def encoded(prompts: list[str] = PROMPTS) -> list[list[int]]:
    return [TOK.encode(p, bos=True) for p in prompts]


def engine(model: GPT, **config: int) -> Engine:
    return Engine(model, TOK, EngineConfig(**{"block_size": 4, "num_blocks": 128, **config}))


def reference(model: GPT, prompts: list[list[int]], new_tokens: int) -> list[list[int]]:
    return generate(
        model, prompts, max_new_tokens=new_tokens, eos_id=NEVER, pad_id=TOK.PAD, use_cache=False
    ).tokens


GREEDY = SamplingParams(max_tokens=20, temperature=0.0, ignore_eos=True)


def test_greedy_tokens_and_logprobs_equal_the_uncached_path(model: GPT) -> None:
    prompts = encoded()
    outputs = engine(model).generate(prompts, GREEDY)
    expected = generate(
        model, prompts, max_new_tokens=20, eos_id=NEVER, pad_id=TOK.PAD, use_cache=False
    )
    got = [o.completions[0] for o in outputs]
    assert [c.tokens for c in got] == expected.tokens
    assert len({tuple(c.tokens) for c in got}) > 1
    for completion, logprobs in zip(got, expected.logprobs, strict=True):
        assert [t.logprob for t in completion.logprobs] == pytest.approx(logprobs, abs=1e-4)
        assert all(c.finish_reason is FinishReason.LENGTH for c in got)


@pytest.mark.parametrize("block_size", [1, 3, 16, 64])
def test_block_size_does_not_change_the_output(model: GPT, block_size: int) -> None:
    outputs = engine(model, block_size=block_size, num_blocks=2048 // block_size).generate(
        encoded(), GREEDY
    )
    assert [o.completions[0].tokens for o in outputs] == reference(model, encoded(), 20)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(max_tokens=15, temperature=1.0, seed=7),
        SamplingParams(max_tokens=15, temperature=0.8, top_p=0.9, top_k=50, seed=7),
    ],
    ids=["plain", "filtered"],
)
def test_a_sampled_completion_does_not_depend_on_its_batch(
    model: GPT, params: SamplingParams
) -> None:
    together = engine(model).generate(encoded(), params)
    alone = [engine(model).generate([p], params)[0] for p in encoded()]
    # Another order, with a greedy and a top-k request in between: the batch takes the
    # other sampling path, and the rows must not notice.
    mixed = engine(model)
    ids = [mixed.add_request(p, params) for p in reversed(encoded())]
    mixed.add_request(encoded()[0], GREEDY)
    mixed.add_request(encoded()[1], SamplingParams(max_tokens=9, top_k=3, seed=1))
    while mixed.has_work:
        mixed.step()
    shuffled = [mixed.output(i) for i in reversed(ids)]
    tokens = [[c.tokens for c in o.completions] for o in together]
    assert tokens == [[c.tokens for c in o.completions] for o in alone]
    assert tokens == [[c.tokens for c in o.completions] for o in shuffled]
    assert len({tuple(t[0]) for t in tokens}) == len(tokens)


def test_seeds_and_samples_differ(model: GPT) -> None:
    prompt = encoded()[:1]
    one = engine(model).generate(prompt, SamplingParams(max_tokens=12, n=4, seed=1))[0]
    again = engine(model).generate(prompt, SamplingParams(max_tokens=12, n=4, seed=1))[0]
    other = engine(model).generate(prompt, SamplingParams(max_tokens=12, n=4, seed=2))[0]
    tokens = [c.tokens for c in one.completions]
    assert tokens == [c.tokens for c in again.completions]
    assert tokens != [c.tokens for c in other.completions]
    assert len({tuple(t) for t in tokens}) == 4
    # Sample i is the same whatever n is.
    two = engine(model).generate(prompt, SamplingParams(max_tokens=12, n=2, seed=1))[0]
    assert [c.tokens for c in two.completions] == tokens[:2]


def test_samples_of_one_prompt_share_its_blocks(model: GPT) -> None:
    prompt = TOK.encode("a prompt of exactly thirty-two tokens long..", bos=True)[:32]
    n = 8
    shared = engine(model, block_size=4)
    shared.generate([prompt], SamplingParams(max_tokens=4, n=n, seed=3))
    # The first sample computes the prompt; the others wait one step and then compute
    # only its last block (the last token is always computed, for its logits).
    assert shared.counters.prompt_tokens == 32 + (n - 1) * 4
    separate = engine(model, block_size=4)
    for i in range(n):
        separate.generate([prompt], SamplingParams(max_tokens=4, seed=i))
    # Separate requests arriving after the first finished reuse its released blocks too.
    assert separate.counters.prompt_tokens == 32 + (n - 1) * 4
    cold = engine(model, block_size=4, num_blocks=9)
    cold.generate([prompt], SamplingParams(max_tokens=4, seed=0))
    cold.generate([TOK.encode("x" * 30, bos=True)], SamplingParams(max_tokens=4, seed=0))
    cold.generate([prompt], SamplingParams(max_tokens=4, seed=0))
    assert cold.counters.prompt_tokens == 32 + 31 + 32  # evicted: computed again


def test_a_reset_prefix_cache_computes_a_seen_prompt_again_under_new_weights(
    model: GPT,
) -> None:
    prompt = TOK.encode("a prompt of exactly thirty-two tokens long..", bos=True)[:32]
    served = engine(model, block_size=4)
    first = served.generate([prompt], SamplingParams(max_tokens=4, temperature=0))[0]
    with torch.no_grad():  # new weights in place, as online RL's weight update copies them
        for param in model.parameters():
            param.mul_(1.5)
    served.reset_prefix_cache()
    again = served.generate([prompt], SamplingParams(max_tokens=4, temperature=0))[0]
    assert served.counters.prompt_tokens == 32 + 32, "nothing of the old weights reused"
    (fresh,) = reference(model, [prompt], 4)
    assert again.completions[0].tokens == fresh != first.completions[0].tokens


def test_the_prefix_cache_is_reset_only_while_idle(model: GPT) -> None:
    served = engine(model)
    served.add_request(encoded()[0], SamplingParams(max_tokens=4))
    served.step()
    with pytest.raises(RuntimeError, match="only while the engine is idle: 1 running"):
        served.reset_prefix_cache()


def test_prefix_sharing_keeps_the_samples_as_they_were(model: GPT) -> None:
    prompt = encoded()[-1]
    params = SamplingParams(max_tokens=10, n=5, seed=11)
    shared = engine(model).generate([prompt], params)[0]
    singles = engine(model)
    alone = []
    for i in range(5):
        # A fresh engine per sample: nothing cached, nothing shared.
        single = engine(model).generate([prompt], SamplingParams(max_tokens=10, n=i + 1, seed=11))
        alone.append(single[0].completions[i].tokens)
    del singles
    assert [c.tokens for c in shared.completions] == alone


def test_preemption_under_memory_pressure_changes_nothing(model: GPT) -> None:
    prompts = encoded() * 3
    roomy = engine(model).generate(prompts, GREEDY)
    tight = engine(model, num_blocks=24)
    squeezed = tight.generate(prompts, GREEDY)
    assert tight.counters.preemptions > 0
    assert [o.completions[0].tokens for o in squeezed] == [o.completions[0].tokens for o in roomy]
    sampled = SamplingParams(max_tokens=20, seed=5, ignore_eos=True)
    assert [
        o.completions[0].tokens for o in engine(model, num_blocks=24).generate(prompts, sampled)
    ] == [o.completions[0].tokens for o in engine(model).generate(prompts, sampled)]


def test_more_requests_than_blocks_wait_their_turn(model: GPT) -> None:
    tight = engine(model, num_blocks=16)
    ids = [tight.add_request(p, GREEDY) for p in encoded() * 4]
    most_waiting = 0
    while tight.has_work:
        tight.step()
        most_waiting = max(most_waiting, tight.stats().waiting)
        assert tight.stats().blocks_used <= 16
    assert most_waiting > 0
    assert all(len(tight.release(i).completions[0].tokens) == 20 for i in ids)
    assert tight.pool.free == 16


def test_stops_at_eos_stop_tokens_stop_strings_and_length(model: GPT) -> None:
    prompt = encoded()[1]
    (full,) = engine(model).generate([prompt], GREEDY)
    tokens = full.completions[0].tokens
    eos = tokens[5]
    at_eos = engine(model)
    at_eos.tokenizer = _WithEos(eos)
    (stopped,) = at_eos.generate([prompt], SamplingParams(max_tokens=20, temperature=0.0))
    assert stopped.completions[0].tokens == tokens[: tokens.index(eos) + 1]
    assert stopped.completions[0].finish_reason is FinishReason.STOP

    (by_token,) = engine(model).generate(
        [prompt], SamplingParams(max_tokens=20, temperature=0.0, stop_token_ids=(eos,))
    )
    assert by_token.completions[0].tokens == tokens[: tokens.index(eos) + 1]

    text = full.completions[0].text
    stop = text[7:9]
    (by_string,) = engine(model).generate(
        [prompt], SamplingParams(max_tokens=20, temperature=0.0, stop=(stop,), ignore_eos=True)
    )
    completion = by_string.completions[0]
    assert completion.finish_reason is FinishReason.STOP
    assert completion.text == text[: text.index(stop)]
    assert len(completion.tokens) < 20

    (short,) = engine(model).generate([prompt], SamplingParams(max_tokens=3, ignore_eos=True))
    assert len(short.completions[0].tokens) == 3
    assert short.completions[0].finish_reason is FinishReason.LENGTH


class _WithEos(ByteTokenizer):
    def __init__(self, eos: int) -> None:
        self.EOS = eos


def test_abort_frees_the_blocks(model: GPT) -> None:
    running = engine(model)
    request = running.add_request(encoded()[-1], SamplingParams(max_tokens=30, n=3))
    for _ in range(5):
        running.step()
    assert running.pool.used > 0
    running.abort(request)
    assert running.pool.used == 0
    assert not running.has_work


def test_top_logprobs_are_the_most_likely_tokens(model: GPT) -> None:
    (output,) = engine(model).generate(
        encoded()[:1], SamplingParams(max_tokens=5, temperature=0.0, top_logprobs=3)
    )
    for step in output.completions[0].logprobs:
        assert len(step.top) == 3
        values = [lp for _, lp in step.top]
        assert values == sorted(values, reverse=True)
        assert step.top[0][0] == step.token
        assert step.top[0][1] == pytest.approx(step.logprob)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"temperature": -1.0}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -2}, "top_k"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 0}, "n"),
        ({"stop": ("",)}, "stop"),
        ({"top_logprobs": 21}, "logprobs"),
    ],
)
def test_bad_sampling_parameters_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidParameter) as error:
        SamplingParams(**change)  # type: ignore[arg-type]
    assert error.value.field == field


def test_requests_that_cannot_fit_are_refused(model: GPT) -> None:
    small = engine(model, num_blocks=8)
    with pytest.raises(InvalidParameter, match="context of 64") as error:
        small.add_request(list(range(60)), SamplingParams(max_tokens=10))
    assert error.value.field == "max_tokens"
    with pytest.raises(InvalidParameter, match="the engine has 8"):
        small.add_request(list(range(30)), SamplingParams(max_tokens=10))
    with pytest.raises(InvalidParameter, match="empty"):
        small.add_request([], SamplingParams())
    assert not small.has_work
    # What fits is the smaller of the context (64) and the pool (8 blocks of 4).
    assert small.max_sequence_tokens == 32
    assert engine(model).max_sequence_tokens == 64


@pytest.mark.parametrize("bad", [VOCAB, 10**6, -1])
def test_a_prompt_id_outside_the_vocabulary_is_refused(model: GPT, bad: int) -> None:
    refusing = engine(model)
    with pytest.raises(InvalidParameter, match=f"token id {bad} .*vocabulary of {VOCAB} ") as error:
        refusing.add_request([TOK.BOS, 65, bad, 66], GREEDY)
    assert error.value.field == "prompt"
    assert not refusing.has_work
    # The engine serves on, the vocabulary's last id included.
    (output,) = refusing.generate([[TOK.BOS, 65, VOCAB - 1]], GREEDY)
    assert len(output.completions[0].tokens) == GREEDY.max_tokens


def test_kv_memory_is_sized_from_the_budget(model: GPT) -> None:
    sized = Engine(model, TOK, EngineConfig(block_size=16, cpu_kv_gib=1 / 1024))
    per_block = 2 * model.config.n_layer * 16 * model.config.d_model * 4
    assert sized.pool.num_blocks == 2**20 // per_block
    runner = sized.runner
    assert isinstance(runner, PagedGPT)
    assert runner.k.shape[:3] == (2, sized.pool.num_blocks + 1, 16)


def test_a_model_put_back_in_training_mode_samples_without_dropout(model: GPT) -> None:
    shared = engine(model)
    expected = shared.generate(encoded()[:2], GREEDY)
    model.train()
    for block in model.blocks:
        block.attn.proj = torch.nn.Sequential(block.attn.proj, torch.nn.Dropout(0.5))
    again = shared.generate(encoded()[:2], GREEDY)
    assert [o.completions[0].tokens for o in again] == [o.completions[0].tokens for o in expected]


def test_the_samples_of_many_prompts_start_within_two_steps(model: GPT) -> None:
    # The first sample of every prompt computes its prompt in step 1; the other samples wait
    # for those blocks and start in step 2, rather than one prompt's samples a step. A step
    # returns the tokens of the step launched before it.
    prompts = [TOK.encode(f"{i} is the prompt", bos=True) for i in range(4)]
    batched = engine(model)
    ids = [batched.add_request(p, SamplingParams(max_tokens=5, n=3, seed=0)) for p in prompts]
    assert batched.step() == []
    first, second = batched.step(), batched.step()
    assert {(p.seq.request_id, p.seq.index) for p in first} == {(i, 0) for i in ids}
    assert batched.stats().running == 12 and batched.stats().waiting == 0
    assert len(second) == 12
    # 16 prompt tokens each: 4 blocks, the last recomputed by each later sample.
    assert batched.counters.prompt_tokens == 4 * 16 + 8 * 4


@pytest.mark.parametrize("prefix_caching", [True, False])
def test_prefix_caching_off_gives_every_sequence_blocks_of_its_own(prefix_caching: bool) -> None:
    pool = BlockPool(num_blocks=16, block_size=4)
    scheduler = Scheduler(pool, max_running=4, max_prefill_tokens=64, prefix_caching=prefix_caching)
    prompt = list(range(1, 11))  # two full blocks ahead of the last token, which is computed
    first, second = (
        Sequence(id=i, request_id=f"r{i}", index=0, prompt=prompt, params=GREEDY, seed=0, arrival=i)
        for i in range(2)
    )
    scheduler.add(first)
    scheduler.add(second)
    plans = [scheduler.plan()]
    # What the engine does once a prefill has filled blocks: name them for later sharers.
    for block, name in zip(first.blocks, block_hashes(prompt[:-1], 4), strict=False):
        pool.name(block, name)
    plans.append(scheduler.plan())
    admitted = [[seq.id for seq in plan.prefill] for plan in plans]
    if prefix_caching:
        # The second waits a step for the first's prompt blocks, then computes only its tail.
        assert admitted == [[0], [1]]
        assert second.blocks[:2] == first.blocks[:2]
        assert second.blocks[2] != first.blocks[2]
        assert second.computed == 8
        assert pool.used == 4
    else:
        assert admitted == [[0, 1], []]
        assert not set(first.blocks) & set(second.blocks)
        assert second.computed == 0
        assert pool.used == 6


def test_a_full_engine_admits_in_batches_of_free_slots() -> None:
    # 32 running slots: admission waits for 2 free ones while sequences run, so that one
    # finishing sequence does not make the next step a prompt step.
    pool = BlockPool(num_blocks=256, block_size=4)
    scheduler = Scheduler(pool, max_running=32, max_prefill_tokens=1024)
    queued = [
        Sequence(
            id=i, request_id=f"r{i}", index=0, prompt=[1, 2, i], params=GREEDY, seed=0, arrival=i
        )
        for i in range(36)
    ]
    for seq in queued:
        scheduler.add(seq)
    assert len(scheduler.plan().prefill) == 32
    scheduler.finish(queued[0], FinishReason.STOP)
    assert scheduler.plan().prefill == []
    scheduler.finish(queued[1], FinishReason.STOP)
    assert [seq.id for seq in scheduler.plan().prefill] == [32, 33]
