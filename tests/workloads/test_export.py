"""A checkpoint exported as a Hugging Face directory (workloads/export.py) is the same model:
the built-in GPT as GPT-2 gives the GPT's logits, and its byte tokenizer as a byte-level BPE
gives the same ids, so `model: {hf: {path: ...}}` of the export continues where it ended."""

from pathlib import Path

import torch

from crucible.workloads.config import model_preset
from crucible.workloads.export import export_gpt
from crucible.workloads.hf_model import HFModelSource, build_hf_model
from crucible.workloads.hf_tokenizer import HFTokenizer
from crucible.workloads.model import build_model
from crucible.workloads.tokenizer import ByteTokenizer

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
