"""examples/llama-loop.yaml runs as its comment says: `crucible submit` while `crucible up`
runs; every run succeeds (the teacher, the tokenizer, packed SFT of a Llama model with that
tokenizer, rollouts, RL, and an eval of every checkpoint), and lineage runs from the
teacher's data and the tokenizer to the RL checkpoint."""

from pathlib import Path

import pytest

from tests.cli.example_runs import example_succeeds

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama-loop.yaml"


@pytest.mark.slow
@pytest.mark.timeout(900)  # past its own waits: the server's start, the runs
def test_the_llama_loop_example_runs_to_success(tmp_path: Path) -> None:
    # 5 submitted + an EvalJob for each of 2 SFT and 1 RL checkpoints
    with example_succeeds(tmp_path, EXAMPLE, runs=8, timeout=720) as done:
        api, by_name = done.api, done.by_name
        (tokenizer,) = api.list_artifacts("default", kind="tokenizer", name="llama-bpe").items
        sft = api.latest_checkpoint(by_name["llama-sft"].id)
        assert sft is not None and sft.meta["model"]["tokenizer"] == f"artifact:{tokenizer.id}"
        rl = api.latest_checkpoint(by_name["llama-rl"].id)
        assert rl is not None and rl.step == 16
        upstream = api.request(
            "GET",
            f"/api/v1/lineage/checkpoint/{rl.id}",
            params={"direction": "upstream", "depth": 10},
        )
        labels = {n["label"] for n in upstream["nodes"]}
        assert "tokenizer llama-bpe" in labels
        assert any(label.startswith("llama-sft-data@") for label in labels), labels
        accuracy = {
            name: [e.scores["accuracy"] for e in api.list_checkpoint_evals(checkpoint.id)]
            for name, checkpoint in (("llama-sft", sft), ("llama-rl", rl))
        }
        print(f"\nllama loop accuracy (pytest -s shows this): {accuracy}")
