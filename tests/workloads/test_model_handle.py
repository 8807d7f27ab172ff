"""The handle an eval suite gets: log-probabilities that match the model's own, alone or in
a padded batch; greedy generation as the workloads' own; and the errors for inputs that do
not fit the model's context."""

import pytest
import torch
import torch.nn.functional as F

from crucible.config.workload import model_preset
from crucible.models.gpt import build_model
from crucible.models.tokenizer import ByteTokenizer
from crucible.rollouts.model_handle import CheckpointInfo, ModelHandle
from crucible.rollouts.rollout import greedy_completions

TOK = ByteTokenizer()


@pytest.fixture(scope="module")
def handle() -> ModelHandle:
    torch.manual_seed(0)
    model = build_model(model_preset("tiny"))
    return ModelHandle(model, TOK, checkpoint=CheckpointInfo(id=1, run_id=1, step=10), batch_size=2)


def reference_logprob(handle: ModelHandle, prompt: str, completion: str) -> float:
    head = TOK.encode(prompt, bos=True)
    tokens = torch.tensor([head + TOK.encode(completion)])
    with torch.no_grad():
        logprobs = F.log_softmax(handle.model(tokens[:, :-1]).float(), dim=-1)[0]
    return sum(
        float(logprobs[position - 1, int(tokens[0, position])])
        for position in range(len(head), tokens.shape[1])
    )


def test_logprob_is_the_completions_log_likelihood_alone_or_batched(handle: ModelHandle) -> None:
    pairs = [("1+1=", "2"), ("12+30=", "42"), ("7*8=", "56 and more"), ("9-3=", "")]
    scores = handle.logprob([p for p, _ in pairs], [c for _, c in pairs])
    for (prompt, completion), score in zip(pairs, scores, strict=True):
        assert score == pytest.approx(reference_logprob(handle, prompt, completion), abs=1e-4)
        (alone,) = handle.logprob([prompt], [completion])
        assert score == pytest.approx(alone, abs=1e-4)
    assert scores[3] == 0.0 and all(s < 0 for s in scores[:3])


def test_greedy_generate_is_the_workloads_greedy_decoding(handle: ModelHandle) -> None:
    prompts = ["1+1=", "23+45=", "3*3="]
    expected = greedy_completions(handle.model, TOK, prompts, max_new_tokens=4, batch_size=8)
    assert handle.generate(prompts, max_new_tokens=4) == expected
    sampled = handle.generate(prompts, max_new_tokens=4, temperature=1.0, seed=3)
    assert sampled == handle.generate(prompts, max_new_tokens=4, temperature=1.0, seed=3)
    assert handle.model.training  # left as it was found


def test_inputs_beyond_the_context_are_refused_with_their_length(handle: ModelHandle) -> None:
    context = handle.model.max_seq_len
    with pytest.raises(ValueError, match=f"the model's context is {context}"):
        handle.generate(["x" * context], max_new_tokens=1)
    with pytest.raises(ValueError, match=f"more than the model's context of {context}"):
        handle.logprob(["x"], ["y" * (context + 1)])
    with pytest.raises(ValueError, match="2 prompts but 1 completions"):
        handle.logprob(["a", "b"], ["c"])
