"""Packed rows: documents end to end never see each other, no target crosses a boundary,
rows respect seq_len, chat trains on the assistant only, and a packed run resumes exactly."""

import itertools
from typing import Any

import pytest
import torch

from crucible.config.model_source import HFModelSource
from crucible.config.workload import DataConfig, TrainConfig, model_preset
from crucible.models.bpe import train_bpe
from crucible.models.chat import DEFAULT_CHAT_TEMPLATE
from crucible.models.gpt import build_model
from crucible.models.hf import build_hf_model
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.models.tokenizer import ByteTokenizer
from crucible.training.checkpoint import DirectoryCheckpointer
from crucible.training.data import collate, collate_rows, encode_sft
from crucible.training.records import ListRecords
from crucible.training.shapes import encode_chat, encoder, split_text
from crucible.training.train import Trainer
from crucible.training.train_data import StreamedRows
from tests.workloads.test_hf_model import SMALL
from tests.workloads.test_train import Preempted, PreemptedAfterSave

TOK = ByteTokenizer()
TINY = model_preset("tiny")
DOCS = [encode_sft(TOK, "1+2=", "3"), encode_sft(TOK, "10+20=", "30"), encode_sft(TOK, "7=", "7")]
CHAT = [
    {"role": "system", "content": "Add."},
    {"role": "user", "content": "1+2="},
    {"role": "assistant", "content": "3"},
    {"role": "user", "content": "2+2="},
    {"role": "assistant", "content": "4"},
]


def models() -> dict[str, torch.nn.Module]:
    torch.manual_seed(0)
    built: dict[str, torch.nn.Module] = {"gpt": build_model(TINY)}
    for architecture in ("llama", "gpt2"):
        source = HFModelSource(architecture=architecture, config=SMALL[architecture])
        built[architecture] = build_hf_model(source)
    return {name: model.eval() for name, model in built.items()}


@pytest.mark.parametrize("name", ["gpt", "llama", "gpt2"])
def test_a_packed_row_computes_each_document_as_if_it_were_alone(name: str) -> None:
    model = models()[name]
    packed = collate_rows([DOCS], pad_id=TOK.PAD)
    with torch.no_grad():
        logits = model(packed.inputs, positions=packed.positions)[0]
        at = 0
        for doc in DOCS:
            alone = model(collate([doc], pad_id=TOK.PAD).inputs)[0]
            torch.testing.assert_close(logits[at : at + doc.num_targets], alone)
            at += doc.num_targets


def test_no_target_crosses_a_document_boundary() -> None:
    batch = collate_rows([DOCS, DOCS[:1]], pad_id=TOK.PAD)
    expected: list[int] = [t for doc in DOCS for t in doc.tokens[1:]]
    assert batch.targets[0, : len(expected)].tolist() == expected
    trained = batch.targets[0][batch.loss_mask[0].bool()].tolist()
    assert trained == [*b"3", TOK.EOS, *b"30", TOK.EOS, *b"7", TOK.EOS]
    # The short row's padding is neither trained nor a document of its own.
    assert batch.loss_mask[1, DOCS[0].num_targets :].sum() == 0
    assert batch.positions is not None
    assert batch.positions[1].tolist() == list(range(batch.inputs.size(1)))


def records(n: int) -> list[dict[str, Any]]:
    return [{"prompt": f"{i}+{i}=", "completion": str(2 * i)} for i in range(n)]


def test_packed_rows_hold_whole_examples_in_stream_order_within_seq_len() -> None:
    source = ListRecords(records(40), block_size=8)
    encode = encoder("prompt_completion", TOK, max_targets=32)
    packed = StreamedRows(source, encode, seed=1, max_targets=32, packing=True)
    single = StreamedRows(source, encode, seed=1, max_targets=32, packing=False)
    rows = [row for [row] in packed.take(10)]
    assert all(sum(e.num_targets for e in row) <= 32 for row in rows)
    assert sum(len(row) for row in rows) > 3 * len(rows)
    in_order = [e for row in rows for e in row]
    assert in_order == [row[0] for [row] in single.take(len(in_order))]


def test_a_long_text_is_split_so_every_token_is_predicted_once() -> None:
    text = "the quick brown fox jumps over the lazy dog"
    pieces = split_text(TOK, text, max_targets=10)
    assert all(p.num_targets <= 10 for p in pieces)
    targets = [t for p in pieces for t in p.tokens[1:]]
    assert targets == TOK.encode(text, eos=True)
    # Each piece starts with the last token of the one before it.
    assert all(a.tokens[-1] == b.tokens[0] for a, b in itertools.pairwise(pieces))


def test_chat_trains_on_the_assistant_turns_and_their_end_only() -> None:
    example = encode_chat(TOK, CHAT)
    trained = [t for t, on in zip(example.tokens, example.trained, strict=True) if on]
    # What the template writes for each assistant message: its content, EOS, a newline.
    assert trained == [*b"3", TOK.EOS, *b"\n4", TOK.EOS, *b"\n"]
    assert TOK.decode(example.tokens).startswith("<|system|>\nAdd.\n<|user|>\n1+2=\n")


def test_the_default_chat_template_renders_as_the_built_in_layout(tmp_path) -> None:
    # A BPE tokenizer with DEFAULT_CHAT_TEMPLATE goes through transformers' template path;
    # without one, through the built-in layout: the same tokens, trained alike.
    texts = [m["content"] for m in CHAT] * 20
    train_bpe(texts, tmp_path / "plain", vocab_size=300)
    plain = HFTokenizer.from_directory(tmp_path / "plain")
    templated = HFTokenizer.from_directory(tmp_path / "plain")
    templated.inner.chat_template = DEFAULT_CHAT_TEMPLATE
    by_layout, by_template = encode_chat(plain, CHAT), encode_chat(templated, CHAT)
    assert by_template.tokens == by_layout.tokens
    assert by_template.trained == by_layout.trained


def test_a_packed_run_resumes_with_bitwise_the_same_losses(tmp_path) -> None:
    data = DataConfig(packing=True, seq_len=48, shuffle_block=6)
    config = TrainConfig(steps=8, batch_size=4, warmup_steps=2, checkpoint_every=3, seed=2)
    straight = Trainer(config, TINY, records(30), data=data)
    expected = straight.train()

    first = Trainer(
        config, TINY, records(30), data=data, checkpointer=PreemptedAfterSave(tmp_path, 3)
    )
    seen: list[float] = []
    first.log = lambda step, metrics: seen.append(metrics["loss"])
    with pytest.raises(Preempted):
        first.train()
    resumed = Trainer(
        config, TINY, records(30), data=data, checkpointer=DirectoryCheckpointer(tmp_path)
    )
    assert resumed.step == 3
    assert seen + resumed.train() == expected


def test_packing_trains_on_more_tokens_a_step_than_padding() -> None:
    config = TrainConfig(steps=1, batch_size=4, warmup_steps=1)
    tokens: dict[bool, float] = {}
    for packing in (False, True):
        trainer = Trainer(config, TINY, records(30), data=DataConfig(packing=packing))
        trainer.log = lambda step, metrics, packing=packing: tokens.__setitem__(
            packing, metrics["tokens"]
        )
        trainer.train()
    assert tokens[True] > 3 * tokens[False]
