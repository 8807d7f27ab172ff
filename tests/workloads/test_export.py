"""A checkpoint exported as a Hugging Face directory (training/export.py) is the same model:
the built-in GPT as GPT-2 gives the GPT's logits, and its byte tokenizer as a byte-level BPE
gives the same ids, so `model: {hf: {path: ...}}` of the export continues where it ended.
`export_model` does so for a loaded model of either kind, with the byte tokenizer or a
trained BPE: the directory read back generates the same completions from the same ids."""

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from crucible.config.model_source import ModelSpec
from crucible.config.workload import model_preset
from crucible.models.bpe import train_bpe
from crucible.models.build import build_from_spec, build_tokenizer
from crucible.models.gpt import GPT, build_model
from crucible.models.hf import HFCausalLM, HFModelSource, build_hf_model
from crucible.models.hf_tokenizer import HFTokenizer
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.rollout import greedy_completions
from crucible.training.export import export_gpt, export_model
from tests.workloads.test_hf_model import DECODER

TEXTS = ["37+58=95", "héllo ✓  wörld\n\ttab", "", "<|eos|> is text here"]


def test_the_exported_gpt_gives_the_gpts_logits_and_tokens(model, tmp_path: Path) -> None:
    export_gpt(model.state_dict(), model.config, tmp_path)
    exported = build_hf_model(HFModelSource(path=str(tmp_path))).eval()
    tokenizer, byte = HFTokenizer.from_directory(tmp_path), ByteTokenizer()
    assert (tokenizer.BOS, tokenizer.EOS, tokenizer.PAD) == (byte.BOS, byte.EOS, byte.PAD)
    for text in TEXTS:
        assert tokenizer.encode(text, bos=True, eos=True) == byte.encode(text, bos=True, eos=True)
        assert tokenizer.decode(byte.encode(text)) == text
    tokens = torch.tensor([byte.encode("37+58=95", bos=True)])
    with torch.no_grad():
        assert torch.allclose(model(tokens), exported(tokens), atol=1e-5)


def test_an_exported_model_exports_again_unchanged(tmp_path: Path) -> None:
    torch.manual_seed(1)
    gpt = build_model(model_preset("tiny"))
    export_gpt(gpt.state_dict(), gpt.config, tmp_path / "first")
    first = build_hf_model(HFModelSource(path=str(tmp_path / "first")))
    first.save_pretrained(tmp_path / "second")
    second = build_hf_model(HFModelSource(path=str(tmp_path / "second")))
    for (name, a), (_, b) in zip(
        first.state_dict().items(), second.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name


PROMPTS = ["1+2=", "37+58=", "héllo", "9*9="]
ARITHMETIC = [f"{a}+{b}={a + b}" for a in range(30) for b in range(30)]


def bpe_tokenizer(directory: Path) -> HFTokenizer:
    """A byte-level BPE with a few merges, small enough for the tiny models' 264 ids."""
    train_bpe(ARITHMETIC, directory, vocab_size=264)
    return HFTokenizer.from_directory(directory)


def tiny_llama() -> HFCausalLM:
    torch.manual_seed(0)
    source = HFModelSource(architecture="llama", config=DECODER)
    model = build_hf_model(source)
    # As the GPT fixture: at init scale greedy decoding repeats one token whatever the prompt.
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(std=1.0)
    return model.eval()


@pytest.mark.parametrize("tokenizer_kind", ["bytes", "bpe"])
@pytest.mark.parametrize("architecture", ["gpt", "llama"])
def test_an_exported_model_loads_back_with_the_same_completions_and_ids(
    architecture: str, tokenizer_kind: str, model: GPT, tmp_path: Path
) -> None:
    original = model if architecture == "gpt" else tiny_llama()
    tokenizer = ByteTokenizer() if tokenizer_kind == "bytes" else bpe_tokenizer(tmp_path / "bpe")
    export_model(original, tokenizer, tmp_path / "export")

    spec = ModelSpec(hf=HFModelSource(path=str(tmp_path / "export")))
    loaded, loaded_tokenizer = build_from_spec(spec), build_tokenizer(spec)
    specials = (loaded_tokenizer.BOS, loaded_tokenizer.EOS, loaded_tokenizer.PAD)
    assert specials == (tokenizer.BOS, tokenizer.EOS, tokenizer.PAD)
    for text in [*PROMPTS, *TEXTS]:
        assert loaded_tokenizer.encode(text, bos=True) == tokenizer.encode(text, bos=True)
    expected = greedy_completions(original, tokenizer, PROMPTS, max_new_tokens=8, batch_size=2)
    assert len(set(expected)) > 1  # the completions depend on the prompt
    completions = greedy_completions(
        loaded, loaded_tokenizer, PROMPTS, max_new_tokens=8, batch_size=2
    )
    assert completions == expected


def test_the_exported_gpt2_config_names_the_tokenizers_special_ids(
    model: GPT, tmp_path: Path
) -> None:
    tokenizer = bpe_tokenizer(tmp_path / "bpe")
    export_model(model, tokenizer, tmp_path / "export")
    config = json.loads((tmp_path / "export" / "config.json").read_text())
    ids = (config["bos_token_id"], config["eos_token_id"], config["pad_token_id"])
    assert ids == (tokenizer.BOS, tokenizer.EOS, tokenizer.PAD) == (1, 2, 0)


def test_a_bfloat16_model_exports_float32_weights_and_stays_bfloat16(tmp_path: Path) -> None:
    original = tiny_llama().to(torch.bfloat16)
    config_before = original.hf_config.to_dict()
    export_model(original, ByteTokenizer(), tmp_path)
    assert {p.dtype for p in original.parameters()} == {torch.bfloat16}
    assert original.hf_config.to_dict() == config_before
    with safe_open(str(tmp_path / "model.safetensors"), framework="pt") as weights:
        written = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118
    assert {t.dtype for t in written.values()} == {torch.float32}
    for name, param in original.inner.named_parameters():
        assert torch.equal(written[name], param.float()), name
    assert json.loads((tmp_path / "config.json").read_text())["dtype"] == "float32"


def test_an_unsupported_tokenizer_is_refused_before_any_weights_are_written(
    model: GPT, tmp_path: Path
) -> None:
    class Letters:
        BOS, EOS, PAD, vocab_size = 26, 27, 28, 29

    for original in (model, tiny_llama()):
        with pytest.raises(ValueError, match="tokenizer of type Letters"):
            export_model(original, Letters(), tmp_path)
        assert not (tmp_path / "model.safetensors").exists()
