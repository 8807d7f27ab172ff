"""docs/agents.md's examples as written: the environment is the file in examples/, and the
code that plays it, with a scripted policy and through the engine, runs."""

import re
from pathlib import Path

import pytest

from crucible.agents.records import EndReason

REPO = Path(__file__).resolve().parents[2]
WORKDIR = REPO / "examples" / "team-code"
"""The run's workingDir of the example: the package team_loop."""


def section() -> str:
    docs = (REPO / "docs" / "agents.md").read_text()
    return docs[docs.index("## The protocol") : docs.index("## Tool calls")]


def test_the_docs_show_the_example_environment_as_it_is() -> None:
    environment, *_ = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    assert environment == (WORKDIR / "team_loop" / "reverse.py").read_text()


def test_the_docs_examples_run_as_written(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _, scripted, served = re.findall(r"```python\n(.*?)```", section(), flags=re.S)
    monkeypatch.syspath_prepend(str(WORKDIR))
    namespace: dict[str, object] = {}
    exec(compile(scripted, "docs/agents.md (scripted)", "exec"), namespace)
    printed = capsys.readouterr().out.strip()
    assert printed == scripted.strip().splitlines()[-1].split("# ")[1] == "[1.0, 1.0, 1.0, 1.0]"
    exec(compile(served, "docs/agents.md (engine)", "exec"), namespace)
    records = namespace["records"]
    assert [r.index for r in records] == [0, 1, 2, 3]  # type: ignore[attr-defined]
    for record in records:  # type: ignore[attr-defined]
        assert record.end in (EndReason.MAX_TURNS, EndReason.DONE, EndReason.CONTEXT_FULL)
        assert record.turns and all(
            len(t.logprobs) == len(t.completion_ids) > 0 for t in record.turns
        )
    assert capsys.readouterr().out.startswith("{'episodes': 4, 'mean_reward': 0.0, 'ends': {")


def test_the_online_rl_example_runs_as_written_and_learns(
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = (REPO / "docs" / "agents.md").read_text()
    online = docs[docs.index("## Online RL in process") :]
    example, *_ = re.findall(r"```python\n(.*?)```", online, flags=re.S)
    namespace: dict[str, object] = {}
    exec(compile(example, "docs/agents.md (online RL)", "exec"), namespace)
    first, last = map(float, capsys.readouterr().out.split())
    assert first < 0.2 < 0.6 < last
    assert len(namespace["logged"]) == 20  # type: ignore[arg-type]
    assert {"model", "optimizer", "progress"} <= set(namespace["checkpoint"])  # type: ignore[arg-type]


def test_the_docs_show_the_online_rl_run_as_the_example_has_it() -> None:
    docs = (REPO / "docs" / "agents.md").read_text()
    online = docs[docs.index("## Online RL as a TrainingRun") :]
    shown, *_ = re.findall(r"```yaml\n(.*?)```", online, flags=re.S)
    example = (REPO / "examples" / "online-rl.yaml").read_text()
    assert shown == "".join(
        line for line in example.splitlines(keepends=True) if not line.startswith("#")
    )


def test_the_docs_show_the_calculator_demonstrations_as_the_example_has_them() -> None:
    docs = (REPO / "docs" / "agents.md").read_text()
    section = docs[docs.index("## From demonstrations to online RL") :]
    shown, *_ = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    example = (REPO / "examples" / "calculator-rl.yaml").read_text()
    first_document = example.split("\n---\n")[0] + "\n"
    assert shown == "".join(
        line for line in first_document.splitlines(keepends=True) if not line.startswith("#")
    )
