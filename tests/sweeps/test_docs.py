"""docs/sweeps.md's example runs as written and prints what its comments say."""

import re
from pathlib import Path

import pytest
import yaml

from crucible.sweeps.plan import parse_plan

REPO = Path(__file__).resolve().parents[2]


def test_the_search_space_example_runs_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    docs = (REPO / "docs" / "sweeps.md").read_text()
    (example,) = re.findall(r"```python\n(.*?)```", docs, flags=re.S)
    exec(compile(example, "docs/sweeps.md", "exec"), {})
    printed = capsys.readouterr().out.strip().splitlines()
    promised = [line.split("# ", 1)[1] for line in example.splitlines() if "print(" in line]
    assert printed == promised


def test_the_plans_example_settings_are_accepted() -> None:
    docs = (REPO / "docs" / "sweeps.md").read_text()
    (settings,) = re.findall(r"```yaml\n(.*?)```", docs, flags=re.S)
    plan = parse_plan(yaml.safe_load(settings))
    assert (plan.method, plan.metric, plan.trials, plan.concurrency) == (
        "random",
        "eval/accuracy",
        32,
        4,
    )
    assert plan.stopper() is not None
