"""The byte tokenizer round-trips any text and keeps its special tokens apart from bytes."""

from crucible.models.tokenizer import ByteTokenizer


def test_round_trip_ascii_and_unicode() -> None:
    tokenizer = ByteTokenizer()
    for text in ["37+58=95", "", "héllo wörld ✓ 数学", "\n\t\x00"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_special_tokens_wrap_the_bytes_and_decode_to_nothing() -> None:
    tokenizer = ByteTokenizer()
    tokens = tokenizer.encode("1+2=", bos=True, eos=True)
    assert tokens[0] == tokenizer.BOS and tokens[-1] == tokenizer.EOS
    assert all(0 <= t < 256 for t in tokens[1:-1])
    assert tokenizer.decode([*tokens, tokenizer.PAD]) == "1+2="
    assert len({tokenizer.BOS, tokenizer.EOS, tokenizer.PAD}) == 3
    assert max(tokenizer.BOS, tokenizer.EOS, tokenizer.PAD) < tokenizer.vocab_size


def test_invalid_utf8_from_a_model_decodes_without_raising() -> None:
    assert ByteTokenizer().decode([0xFF, ord("7")]) == "\ufffd7"
