"""Episodes to the trainer's RL rows: the loss on what the model wrote and nothing else,
its logprobs where the importance ratio reads them, one advantage per episode."""

import pytest
import torch

from crucible.agents.records import EndReason, EpisodeRecord, TurnRecord
from crucible.agents.tool_calls import tool_message
from crucible.models.chat import encode_chat_prompt
from crucible.models.tokenizer import ByteTokenizer
from crucible.online_rl.rl_rows import episode_examples, group_advantages
from crucible.training.data import collate_rows

TOK = ByteTokenizer()
CALL = '<tool_call>{"name": "calculate", "arguments": {"expression": "6 * 7"}}</tool_call>'


def two_turns() -> EpisodeRecord:
    """A tool call, its result, then the answer: as the runner records it."""
    messages = [{"role": "user", "content": "What is 6 * 7?"}]
    turns = []
    for reply, after in ((CALL, [tool_message("calculate", "42")]), ("Answer: 42", [])):
        prompt = encode_chat_prompt(TOK, messages)
        completion = [*TOK.encode(reply), TOK.EOS]
        turns.append(
            TurnRecord(
                prompt_ids=prompt,
                completion_ids=completion,
                logprobs=[-0.01 * (i + 1) for i in range(len(completion))],
                finish_reason="stop",
                message={"role": "assistant", "content": reply},
            )
        )
        messages += [{"role": "assistant", "content": reply}, *after]
    return EpisodeRecord(0, 0, "calculator", {}, messages, turns, 1.0, EndReason.DONE)


def test_only_the_models_own_tokens_are_trained_with_their_logprobs() -> None:
    record = two_turns()
    examples = episode_examples(record, 0.5, max_seq_len=512)
    batch = collate_rows([[e] for e in examples], pad_id=TOK.PAD)
    for row, turn in enumerate(record.turns):
        trained = batch.loss_mask[row] > 0
        assert batch.targets[row][trained].tolist() == turn.completion_ids
        assert batch.old_logprobs[row][trained].tolist() == pytest.approx(turn.logprobs)
        assert batch.old_logprobs[row][~trained].abs().sum() == 0
    # The tool's result is in the second turn's prompt, never a trained target.
    assert "42" not in TOK.decode(batch.targets[0][batch.loss_mask[0] > 0].tolist())
    assert "<|tool|>\n42" in TOK.decode(record.turns[1].prompt_ids)
    assert batch.advantages.tolist() == [0.5, 0.5]  # one advantage for every turn


def test_a_turn_longer_than_the_context_is_refused_with_its_lengths() -> None:
    record = two_turns()
    longest = max(len(t.prompt_ids) + len(t.completion_ids) for t in record.turns)
    assert len(episode_examples(record, 0.0, max_seq_len=longest)) == 2
    with pytest.raises(
        ValueError, match=rf"episode 0 turn 2 is {longest} tokens .* holds {longest - 1}"
    ):
        episode_examples(record, 0.0, max_seq_len=longest - 1)


def test_records_without_tokens_or_logprobs_are_refused() -> None:
    scripted = two_turns()
    scripted.turns[0].prompt_ids = []
    with pytest.raises(ValueError, match="episode 0 turn 1 has no prompt tokens"):
        episode_examples(scripted, 0.0, max_seq_len=512)
    short = two_turns()
    short.turns[1].logprobs.pop()
    with pytest.raises(ValueError, match="turn 2 has 10 logprobs for 11 completion tokens"):
        episode_examples(short, 0.0, max_seq_len=512)


def test_advantages_are_normalised_within_the_group() -> None:
    advantages = group_advantages([1.0, 0.0, 0.0, 1.0])
    assert advantages == pytest.approx([1.0, -1.0, -1.0, 1.0], abs=1e-5)
    assert group_advantages([1.0, 1.0, 1.0]) == [0.0, 0.0, 0.0]
    assert sum(group_advantages([0.2, 0.9, 0.4])) == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(ValueError, match="at least 2 rewards"):
        group_advantages([1.0])
    assert torch.tensor(group_advantages([3.0, 1.0])).std(unbiased=False) == pytest.approx(
        1.0, abs=1e-5
    )
