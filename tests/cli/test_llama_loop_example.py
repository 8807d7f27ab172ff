"""examples/llama-loop.yaml runs as its comment says: `crucible submit` while `crucible up`
runs; every run succeeds (the teacher, the tokenizer, packed SFT of a Llama model with that
tokenizer, rollouts, RL, and an eval of every checkpoint), and lineage runs from the
teacher's data and the tokenizer to the RL checkpoint."""

import time
from pathlib import Path

import pytest

from crucible.client import CrucibleClient
from crucible.domain.enums import Phase
from tests.servers import crucible, local_server

EXAMPLE = Path(__file__).parents[2] / "examples" / "llama-loop.yaml"


@pytest.mark.slow
@pytest.mark.timeout(900)  # past its own waits: the server's start, the runs
def test_the_llama_loop_example_runs_to_success(tmp_path: Path) -> None:
    with local_server(tmp_path, command="up") as server:
        submitted = crucible(server.env, "submit", str(EXAMPLE))
        assert submitted.returncode == 0, submitted.stderr
        with CrucibleClient(server.url, server.token) as api:
            deadline = time.monotonic() + 720
            while True:
                runs = api.list_runs(project="default", limit=100).items
                # 5 submitted + an EvalJob for each of 2 SFT and 1 RL checkpoints
                if len(runs) >= 8 and all(r.phase.is_terminal for r in runs):
                    break
                assert time.monotonic() < deadline, [(r.name, r.phase, r.message) for r in runs]
                time.sleep(2)
            report = [(r.name, r.phase, r.reason, r.message) for r in runs]
            assert all(r.phase == Phase.Succeeded for r in runs), (
                report,
                server.log.read_text()[-3000:],
            )
            by_name = {r.name: r for r in runs}
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
                r.name: [e.scores["accuracy"] for e in api.list_checkpoint_evals(c.id)]
                for r in runs
                if r.name in ("llama-sft", "llama-rl")
                for c in [api.latest_checkpoint(r.id)]
                if c is not None
            }
            print(f"\nllama loop accuracy (pytest -s shows this): {accuracy}")
