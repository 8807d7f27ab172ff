"""examples/hf-loop runs as its header says, on `crucible up`: make_inputs.py writes a
Hugging Face model directory and a Parquet dataset, the dataset is registered, the loop is
submitted, and every run succeeds (SFT of the model directory, rollouts scored by the team's
reward, RL from the SFT weights, the team's eval suite on every checkpoint); each training
run exports its model, the exported RL model loads and generates with transformers, and its
lineage runs back through the SFT checkpoint to the Parquet dataset version. The commands
run are the header's, which docs/workloads.md gives too."""

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from crucible.client import CrucibleClient
from tests.cli.example_runs import example_succeeds
from tests.servers import local_server

REPO = Path(__file__).parents[2]
EXAMPLE = REPO / "examples" / "hf-loop" / "loop.yaml"
DOCS = REPO / "docs" / "workloads.md"
DOCS_SECTION = "A Hugging Face model and a Parquet dataset through the loop"
TEAM_CODE = "examples/team-code"
TEAM_SUITE = "team_loop.code:likelihood_suite"
TEAM_METRICS = {"logprob_reference", "logprob_doubled", "generated_chars", "checkpoint_step"}


def header_blocks() -> list[list[str]]:
    """The command blocks of the example's header comment: runs of `#   command` lines."""
    header = EXAMPLE.read_text().split("\napiVersion:", 1)[0]
    blocks: list[list[str]] = [[]]
    for line in header.splitlines():
        if line.startswith("#   "):
            blocks[-1].append(line.removeprefix("#   "))
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def run_block(commands: list[str], cwd: Path, env: dict[str, str]) -> str:
    """The commands in bash from `cwd`, stopping at the first failure; their stdout."""
    # `python` and `crucible` as a user of this checkout has them: the venv's.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", "\n".join(commands)],
        cwd=cwd,
        env=env | {"PATH": path},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{commands} failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    return done.stdout


def test_the_docs_give_the_commands_of_the_examples_header() -> None:
    text = DOCS.read_text()
    start = text.find(f"\n## {DOCS_SECTION}\n")
    assert start >= 0, f"docs/workloads.md has no section '## {DOCS_SECTION}'"
    end = text.find("\n## ", start + 1)
    blocks = re.findall(r"```bash\n(.*?)```", text[start : end if end >= 0 else None], re.S)
    assert [block.splitlines() for block in blocks] == header_blocks()


@pytest.mark.slow
@pytest.mark.timeout(900)  # past its own waits: three server starts, the runs
def test_the_hf_loop_example_runs_to_an_exported_model_with_lineage(tmp_path: Path) -> None:
    started = time.monotonic()
    setup, inspect = header_blocks()
    *prepare, submit = setup
    assert submit == f"crucible submit {EXAMPLE.relative_to(REPO)} --package {TEAM_CODE}", (
        "the harness submits the example itself, with these arguments"
    )
    # The user's checkout: the examples as they are, whatever is written goes to tmp_path.
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(REPO / "examples")
    with local_server(tmp_path) as server:  # the same CRUCIBLE_HOME as the `up` below
        run_block(prepare, work, server.env)
        with CrucibleClient(server.url, server.token) as api:
            (arith,) = api.list_datasets("default").items
    # 3 submitted + an EvalJob per suite for each of 2 SFT and 1 RL checkpoints
    with example_succeeds(
        tmp_path,
        EXAMPLE.relative_to(REPO),
        runs=7,
        timeout=600,
        submit_args=["--package", TEAM_CODE],
        cwd=work,
    ) as done:
        api, by_name = done.api, done.by_name
        (parquet,) = api.list_dataset_versions(arith.id).items
        assert (parquet.ref, parquet.schema_["format"]) == ("hf-arith@1", "parquet")

        sft, rl = (api.list_checkpoints(by_name[name].id).items for name in ("hf-sft", "hf-rl"))
        assert [c.step for c in sft] == [50, 100] and [c.step for c in rl] == [8]
        team = {}
        for checkpoint in (*sft, *rl):
            (found,) = [
                e for e in api.list_checkpoint_evals(checkpoint.id) if e.suite == TEAM_SUITE
            ]
            assert set(found.scores) == TEAM_METRICS
            assert found.scores["checkpoint_step"] == checkpoint.step
            team[checkpoint.id] = found.scores
        (held_out,) = [e for e in api.list_checkpoint_evals(rl[0].id) if e.suite == "arithmetic"]
        # Problems make_inputs.py kept out of the data: above zero only if the loop learned.
        assert 0 < held_out.scores["accuracy"] <= 1 and held_out.scores["num_problems"] == 20

        models = {a.name: a for a in api.list_artifacts("default", kind="model").items}
        assert set(models) == {"hf-model", "hf-sft-step100-hf", "hf-rl-step8-hf"}
        assert all(Path(urlparse(m.uri).path).is_dir() for m in models.values()), models
        exported = models["hf-rl-step8-hf"]
        assert [(s.type, s.id) for s in exported.sources] == [("checkpoint", rl[0].id)]
        (model,) = api.list_artifacts("default", name="hf-model").items
        (package,) = api.list_artifacts("default", kind="code").items
        upstream = api.lineage("artifact", exported.id, "upstream", depth=10)
        nodes = {(n["type"], n["id"]) for n in upstream["nodes"]}
        # Back to the data, the registered model directory (and its tokenizer) and the code.
        assert {
            ("checkpoint", sft[-1].id),
            ("dataset_version", parquet.id),
            ("artifact", model.id),
            ("artifact", package.id),
        } <= nodes, nodes
        # The ids the header's commands name, as a fresh `crucible up` gives them.
        assert (by_name["hf-rl"].id, exported.id) == (3, 4)
    scores_as_the_checkpoint(Path(urlparse(exported.uri).path), team[rl[0].id])

    with local_server(tmp_path) as server:  # the API again, for the header's last commands
        shown = run_block(inspect, work, server.env | {"COLUMNS": "200"})  # no wrapped cells
    assert f"registered model artifact {exported.id} (hf-rl-step8-hf" in shown
    assert "hf-arith@1" in shown and "hf-sft" in shown, shown
    # What docs/workloads.md shows of these commands' output (pytest -s prints it).
    print(f"\n{shown}\nhf loop example: {time.monotonic() - started:.0f} s")


def scores_as_the_checkpoint(directory: Path, team: dict[str, float]) -> None:
    """The exported directory, read by transformers alone, is the checkpoint's model: it
    gives the likelihood the team's suite measured on the checkpoint, and generates."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    # As the suite's handle encodes them: BOS and the prompt, then the completion's tokens.
    prompt = [tokenizer.bos_token_id, *tokenizer.encode("1+1=", add_special_tokens=False)]
    answer = tokenizer.encode("2", add_special_tokens=False)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + answer])).logits[0, len(prompt) - 1 : -1]
        logprob = logits.log_softmax(-1).gather(1, torch.tensor(answer)[:, None]).sum()
        out = model.generate(torch.tensor([prompt]), max_new_tokens=2, do_sample=False)
    assert float(logprob) == pytest.approx(team["logprob_reference"], abs=1e-3)
    generated = tokenizer.decode(out[0, len(prompt) :], skip_special_tokens=True)
    assert len(generated) == team["generated_chars"], generated
