"""Environments and chat prompts through the rollout job as a process (`python -m
crucible.jobs.rollout` against a real API server on SQLite), from a checkpoint of a
two-step SFT: the example environment of docs/workloads.md (examples/team-code/team_loop/
env.py) making the prompts and scoring them, a prompts dataset of chats rendered with the
chat template, and what a job must refuse: a bad reference or option (exit 2, before the
model loads), a dataset record without a prompt (exit 2), an environment returning the wrong
count (exit 1)."""

import importlib.util
import re
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from crucible.artifacts.digest import content_of
from crucible.domain.specs import RolloutJobSpec
from crucible.plugins import ENVIRONMENT, resolve
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.tasks.arithmetic import solve
from crucible.training.records import read_jsonl, write_jsonl
from tests.workloads.test_jobs import Job, Platform, platform, server

__all__ = ["platform", "server"]  # the fixtures, imported for this module

# The first test to ask for the checkpoint waits for a train job and then a rollout, each
# starting torch, on a shared 2-core box.
pytestmark = pytest.mark.timeout(600)

TASK = {"digits": 1, "operators": ["+"]}
WORKDIR = Path(__file__).resolve().parents[2] / "examples" / "team-code"
"""The example of docs/workloads.md: the package team_loop, as a run's workingDir."""

EXAMPLE: dict[str, Any] = {"name": "team_loop.env:ReplyLength", "options": {"longest": 4}}
NUM_PROMPTS, SAMPLES = 6, 2

PROBE = """
import json

def recording_reward(prompts, completions, metadata, *, path):
    with open(path, "a") as out:
        for prompt, meta in zip(prompts, metadata, strict=True):
            out.write(json.dumps({"prompt": prompt, "metadata": meta}) + "\\n")
    return [0.0] * len(prompts)

class ScoresOneTooFew:
    def prompts(self, count, seed):
        return [{"prompt": "1+1="}] * count

    def score(self, prompts, completions, metadata):
        return [0.0] * (len(prompts) - 1)

class PromptsOneTooFew:
    def prompts(self, count, seed):
        return [{"prompt": "1+1="}] * (count - 1)

    def score(self, prompts, completions, metadata):
        return [0.0] * len(prompts)
"""
"""A team's code of the tests' own: a reward that writes down what it was given, and
environments returning one value too few."""

CHATS: list[dict[str, Any]] = [
    {"messages": [{"role": "user", "content": "hi"}], "tag": 1},
    {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
        ],
        "tag": 2,
    },
    {"prompt": "1+1=", "tag": 3},
]
RENDERED = [
    "<|user|>\nhi\n<|assistant|>\n",
    "<|system|>\nBe brief.\n<|user|>\n2+2?\n<|assistant|>\n",
    "1+1=",
]
"""CHATS as the default chat template renders them with the reply's header (and a prompt as
itself)."""


@dataclass
class Policy:
    checkpoint_id: int
    chats: str
    """The prompts dataset of CHATS."""

    no_prompt: str
    """A prompts dataset whose second record has no prompt."""


@dataclass
class Rollouts:
    environment_run: int
    environment: Job
    chats: Job
    recorded: Path
    """Where the chats' reward writes down what it was given."""


def register(platform: Platform, directory: Path, name: str, records: list[Any]) -> str:
    path = directory / f"{name}.jsonl"
    write_jsonl(path, records)
    platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": name,
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
                "record_count": len(records),
            }
        )
    )
    return f"{name}@1"


def rollout_of(platform: Platform, checkpoint_id: int, **spec: Any) -> int:
    base: dict[str, Any] = {
        "policy": {"checkpoint": {"id": checkpoint_id}},
        "samplesPerPrompt": SAMPLES,
        "sampling": {"temperature": 1.0, "maxNewTokens": 3},
        "output": "never-published",
        "config": {"rollout": {"num_prompts": NUM_PROMPTS}},
    }
    return platform.submit("rollout", **{**base, **spec})


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A workingDir holding the module `probe_code`."""
    directory = tmp_path_factory.mktemp("probe")
    (directory / "probe_code.py").write_text(textwrap.dedent(PROBE))
    return directory


@pytest.fixture(scope="module")
def policy(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Policy:
    """A checkpoint of a two-step SFT, and the prompts datasets."""
    data = tmp_path_factory.mktemp("data")
    prompts = [f"{a}+{b}=" for a in range(10) for b in range(10)]
    sft_data = register(
        platform, data, "env-sft", [{"prompt": p, "completion": solve(p)} for p in prompts]
    )
    sft_run = platform.submit(
        "train",
        config={
            "model": {"preset": "tiny"},
            "task": TASK,
            "train": {"steps": 2, "batch_size": 4, "warmup_steps": 1},
        },
        inputs=[{"dataset": sft_data}],
    )
    platform.start("train", sft_run, datasets=[sft_data], label="sft").ok()
    return Policy(
        checkpoint_id=platform.checkpoints(sft_run)[-1].id,
        chats=register(platform, data, "chat-prompts", CHATS),
        no_prompt=register(platform, data, "no-prompt", [{"prompt": "1+1="}, {"question": "2+2?"}]),
    )


def start_rollout(
    platform: Platform, policy: Policy, cwd: Path, *, label: str, **spec: Any
) -> tuple[int, Job]:
    run_id = rollout_of(platform, policy.checkpoint_id, **spec)
    datasets = [spec["prompts"]["dataset"]] if "prompts" in spec else []
    job = platform.start(
        "rollout", run_id, datasets=datasets, checkpoint=policy.checkpoint_id, label=label, cwd=cwd
    )
    return run_id, job


@pytest.fixture(scope="module")
def rollouts(platform: Platform, policy: Policy, probe_dir: Path) -> Rollouts:
    """The example environment's rollout and the chats' rollout, side by side."""
    environment_run, environment = start_rollout(
        platform,
        policy,
        WORKDIR,
        label="example environment",
        environment=EXAMPLE,
        output="reply-length-rollouts",
    )
    recorded = probe_dir / "recorded.jsonl"
    _, chats = start_rollout(
        platform,
        policy,
        probe_dir,
        label="chat prompts",
        prompts={"dataset": policy.chats},
        reward={"name": "probe_code:recording_reward", "options": {"path": str(recorded)}},
        output="chat-rollouts",
    )
    return Rollouts(environment_run, environment, chats, recorded)


def records_of(platform: Platform, ref: str) -> list[dict[str, Any]]:
    version = platform.api.resolve_dataset("default", ref)
    return list(read_jsonl(Path(version.uri.removeprefix("file://"))))


def example_environment() -> Any:
    """The example's class, imported from its file as the job imports it from workingDir."""
    spec = importlib.util.spec_from_file_location("team_loop_env", WORKDIR / "team_loop" / "env.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ReplyLength


def test_the_example_environment_makes_the_prompts_and_scores_every_sample(
    platform: Platform, policy: Policy, rollouts: Rollouts
) -> None:
    rollouts.environment.ok()
    version = platform.api.resolve_dataset("default", "reply-length-rollouts@latest")
    assert version.record_count == NUM_PROMPTS * SAMPLES
    assert version.schema_["environment"] == EXAMPLE["name"]
    assert "reward" not in version.schema_
    assert version.schema_["policy_checkpoint"] == policy.checkpoint_id
    # The prompts the environment makes for count=num_prompts and seed=config.rollout.seed.
    expected = example_environment()(**EXAMPLE["options"]).prompts(NUM_PROMPTS, 0)
    records = records_of(platform, "reply-length-rollouts@latest")
    assert [r["group"] for r in records] == [g for g in range(NUM_PROMPTS) for _ in range(SAMPLES)]
    for record in records:
        made = expected[record["group"]]
        (message,) = made["messages"]
        assert record["prompt"] == f"<|user|>\n{message['content']}\n<|assistant|>\n"
        assert record["reward"] == -abs(len(record["completion"].strip()) - made["length"])
        assert 1 <= len(record["completion_tokens"]) <= 3
    assert len({m["length"] for m in expected}) > 1, "scores that depend on the metadata"
    assert "rollout/mean_reward" in platform.metric_keys(rollouts.environment_run)


def test_chats_of_a_prompts_dataset_are_rendered_with_the_chat_template(
    platform: Platform, rollouts: Rollouts
) -> None:
    rollouts.chats.ok()
    records = records_of(platform, "chat-rollouts@latest")
    assert [r["prompt"] for r in records] == [p for p in RENDERED for _ in range(SAMPLES)]
    # The reward saw the rendered text, and the record without its prompt as metadata: a
    # chat's messages included.
    seen = list(read_jsonl(rollouts.recorded))
    assert [s["prompt"] for s in seen] == [r["prompt"] for r in records]
    without_prompt = [{k: v for k, v in c.items() if k != "prompt"} for c in CHATS]
    assert [s["metadata"] for s in seen] == [m for m in without_prompt for _ in range(SAMPLES)]


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (
            "probe_code:ScoresOneTooFew",
            "environment probe_code:ScoresOneTooFew score() returned "
            f"{NUM_PROMPTS * SAMPLES - 1} scores for {NUM_PROMPTS * SAMPLES} samples",
        ),
        (
            "probe_code:PromptsOneTooFew",
            f"environment probe_code:PromptsOneTooFew prompts() returned {NUM_PROMPTS - 1} "
            f"records for count={NUM_PROMPTS}",
        ),
    ],
)
def test_an_environment_returning_the_wrong_count_fails_naming_it(
    platform: Platform, policy: Policy, probe_dir: Path, environment: str, expected: str
) -> None:
    _, job = start_rollout(
        platform, policy, probe_dir, label=environment, environment={"name": environment}
    )
    finished = job.result()
    assert finished.returncode == 1, finished.output
    assert expected in finished.termination_message, finished.output
    assert expected in finished.output


def test_a_dataset_record_without_a_prompt_exits_2_naming_record_and_field(
    platform: Platform, policy: Policy, probe_dir: Path
) -> None:
    _, job = start_rollout(
        platform,
        policy,
        probe_dir,
        label="no prompt field",
        prompts={"dataset": policy.no_prompt},
        reward={"name": "exact_match"},
    )
    finished = job.result()
    assert finished.returncode == 2, finished.output
    said = (
        "dataset no-prompt@1 record 2 has neither a 'prompt' nor a 'messages' field; its "
        "fields: question"
    )
    assert finished.termination_message == said, finished.output
    assert f"crucible.jobs.rollout: {said}\n" in finished.output


@pytest.mark.parametrize(
    ("environment", "expected"),
    [
        (
            {"name": "team_loop.env:ReplyLenght"},
            "spec.environment.name 'team_loop.env:ReplyLenght': module team_loop.env has no "
            "attribute 'ReplyLenght'",
        ),
        (
            {"name": "team_loop.absent:Environment"},
            "spec.environment.name 'team_loop.absent:Environment': no module named "
            "'team_loop.absent'",
        ),
        (
            {"name": "team_loop.env:ReplyLength", "options": {"longset": 4}},
            "spec.environment.options.longset is not an option of environment "
            "team_loop.env:ReplyLength; its options: longest",
        ),
        (
            {"name": "arithmetic", "options": {"digits": 0}},
            "spec.environment.options: digits=0 must be at least 1",
        ),
    ],
)
def test_a_bad_environment_exits_2_naming_it_before_the_model_loads(
    platform: Platform, environment: dict[str, Any], expected: str
) -> None:
    # No checkpoint exists: the job refuses the spec before it would look for one.
    run_id = rollout_of(platform, 1, environment=environment)
    finished = platform.start("rollout", run_id, checkpoint=1, cwd=WORKDIR).result()
    assert finished.returncode == 2, finished.output
    assert finished.termination_message.startswith(expected), finished.output
    assert f"crucible.jobs.rollout: {expected}" in finished.output
    assert "model of checkpoint" not in finished.output


def test_docs_show_the_example_as_it_is_and_its_specs_validate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "workloads.md").read_text()
    section = docs[docs.index("## Your own environment") : docs.index("## Running one by hand")]
    (code,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert code == (WORKDIR / "team_loop" / "env.py").read_text()
    (fragments,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    specs = [
        RolloutJobSpec.model_validate({"experiment": "team", **f})
        for f in yaml.safe_load_all(fragments)
    ]
    monkeypatch.syspath_prepend(str(WORKDIR))
    environments = [s.environment for s in specs if s.environment is not None]
    assert [e.name for e in environments] == ["team_loop.env:ReplyLength", "arithmetic"]
    for environment in environments:  # the options fit the code they name
        resolve(ENVIRONMENT, environment.name, environment.options, where="w", options_where="o")
    assert environments[0].options == EXAMPLE["options"]
