"""Batches train on completions only; the sampler resumes exactly where it stopped."""

import pytest

from crucible.models.tokenizer import ByteTokenizer
from crucible.training.data import Sampler, collate, encode_sft

TOK = ByteTokenizer()


def test_loss_mask_covers_the_completion_and_eos_only() -> None:
    batch = collate([encode_sft(TOK, "37+58=", "95"), encode_sft(TOK, "1+2=", "3")], pad_id=TOK.PAD)
    for row, (prompt, completion) in enumerate([("37+58=", "95"), ("1+2=", "3")]):
        targets = batch.targets[row][batch.loss_mask[row].bool()].tolist()
        assert targets == [*completion.encode(), TOK.EOS]
        # The first masked target is predicted from the prompt's last token, "=".
        first = int(batch.loss_mask[row].nonzero()[0])
        assert batch.inputs[row, first] == ord("=")
        assert len(prompt) + 1 + len(completion) == int((batch.inputs[row] != TOK.PAD).sum())


def test_sampler_visits_every_item_once_per_epoch_in_a_new_order() -> None:
    sampler = Sampler(10, seed=0)
    first, second = sampler.take(10), sampler.take(10)
    assert sorted(first) == sorted(second) == list(range(10))
    assert first != second


def test_a_restored_sampler_continues_the_same_sequence() -> None:
    straight = Sampler(7, seed=5)
    expected = [straight.take(3) for _ in range(6)]
    interrupted = Sampler(7, seed=5)
    got = [interrupted.take(3) for _ in range(2)]
    resumed = Sampler(7, seed=5)
    resumed.load_state_dict(interrupted.state_dict())
    got += [resumed.take(3) for _ in range(4)]
    assert got == expected


def test_sampler_state_from_another_dataset_is_refused() -> None:
    with pytest.raises(ValueError, match="7 items"):
        Sampler(8, seed=5).load_state_dict(Sampler(7, seed=5).state_dict())
