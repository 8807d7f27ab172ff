"""The reference workloads as processes: `python -m crucible.jobs.<job>` with the
environment the executor sets, against a real API server (SQLite in a temp dir).

Starting a process costs seconds here (torch, and torch._dynamo, which the first optimizer
imports), so the jobs run once per module, several at a time, in stages: teacher data ->
SFT (plus one SFT run preempted and resumed) -> eval and rollouts -> RL.
"""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

from crucible.artifacts.digest import content_of
from crucible.client import CrucibleClient
from crucible.config.workload import TaskConfig, model_preset
from crucible.core import run_profiles
from crucible.domain import contract
from crucible.schemas.lineage import DatasetVersionCreate
from crucible.schemas.profiles import ProfileSummary
from crucible.schemas.runs import AttemptEnd, AttemptStart, RunSubmit
from crucible.tasks.arithmetic import solve
from crucible.training.records import read_jsonl, write_jsonl
from tests.conftest import ADMIN_TOKEN
from tests.sdk.conftest import ServerProcess, server

__all__ = ["server"]  # the fixture, imported for this module

TASK = {"digits": 1, "operators": ["+"]}
SFT_STEPS = 60
SFT_CONFIG = {
    "model": {"preset": "tiny"},
    "task": TASK,
    "train": {
        "steps": SFT_STEPS,
        "batch_size": 16,
        "warmup_steps": 5,
        "seed": 7,
        "save_initial": True,
    },
}
CHECKPOINT_EVERY = 20
PROMPTS, SAMPLES = 16, 4
WAVE = 4
"""Prompts a rollout samples together: the 16 prompts are 4 waves, one per replica of 4."""
KINDS = {"train": "TrainingRun", "rollout": "RolloutJob", "eval": "EvalJob"}


@dataclass(frozen=True)
class Finished:
    returncode: int
    output: str
    seconds: float
    termination_message: str
    """What the job left where the executor reads why it stopped: the run's message."""


class Job:
    """One workload process; a thread collects its output so the pipe never fills."""

    def __init__(
        self,
        module: str,
        env: dict[str, str],
        label: str,
        cwd: Path | None = None,
        replicas: int = 1,
    ) -> None:
        self.module = module
        self.termination_log = Path(env[contract.TERMINATION_LOG_ENV])
        self.label = label
        self.lines: list[str] = []
        self._changed = threading.Condition()
        self.started = time.monotonic()
        self.ended: float | None = None
        command = [sys.executable, "-m", f"crucible.jobs.{module}"]
        if replicas > 1:  # as the local executor starts them
            command[1:1] = [
                "-m",
                "torch.distributed.run",
                "--standalone",
                f"--nproc-per-node={replicas}",
            ]
        self.process = subprocess.Popen(
            command,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=cwd,  # the run's workingDir, as the executor starts it
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._finished: Finished | None = None

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            with self._changed:
                self.lines.append(line)
                self._changed.notify_all()
        self.ended = time.monotonic()  # the pipe closes when the process exits

    def wait_for_line(self, pattern: str, timeout: float = 240) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    if match := re.search(pattern, line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or not self._reader.is_alive():
                    pytest.fail(f"no line matching {pattern!r}:\n{''.join(self.lines)}")
                self._changed.wait(min(left, 0.5))

    def output_so_far(self) -> str:
        with self._changed:
            return "".join(self.lines)

    def result(self, timeout: float = 300) -> Finished:
        if self._finished is None:
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self._reader.join(10)
            ended = self.ended or time.monotonic()
            left = self.termination_log.read_text() if self.termination_log.exists() else ""
            self._finished = Finished(
                self.process.returncode, "".join(self.lines), ended - self.started, left
            )
        return self._finished

    def ok(self) -> Finished:
        finished = self.result()
        assert finished.returncode == 0, finished.output
        return finished


class Platform:
    """Submits runs and starts their processes the way the local executor does."""

    def __init__(self, server: ServerProcess, api: CrucibleClient, home: Path) -> None:
        self.server = server
        self.api = api
        self.home = home
        self.jobs: list[Job] = []

    def submit(self, kind: str, **spec: Any) -> int:
        manifest = {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": KINDS[kind],
            "metadata": {"name": f"{kind}-{uuid.uuid4().hex[:8]}"},
            "spec": {"experiment": "workloads", **spec},
        }
        run = self.api.submit_run(
            RunSubmit.model_validate({"project": "default", "manifest": manifest})
        )
        self.api.start_attempt(run.id, AttemptStart())
        return run.id

    def start(
        self,
        module: str,
        run_id: int,
        *,
        datasets: list[str] | None = None,
        checkpoint: int | None = None,
        attempt: int = 1,
        resume_from: int | None = None,
        label: str = "",
        cwd: Path | None = None,
        replicas: int = 1,
        extra_env: dict[str, str] | None = None,
    ) -> Job:
        spec = self.api.get_run(run_id).manifest["spec"]  # as stored: defaults filled in
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRUCIBLE_")}
        env |= {
            "OMP_NUM_THREADS": "1",
            "PYTHONUNBUFFERED": "1",
            "CRUCIBLE_API_URL": self.server.url,
            "CRUCIBLE_TOKEN": ADMIN_TOKEN,
            "CRUCIBLE_HOME": str(self.home),
            "CRUCIBLE_RUN_ID": str(run_id),
            "CRUCIBLE_ATTEMPT": str(attempt),
            "CRUCIBLE_CHECKPOINT_URI": (self.home / "runs" / str(run_id) / "checkpoints").as_uri(),
            "CRUCIBLE_CONFIG": json.dumps(spec.get("config", {})),
            "CRUCIBLE_SPEC": json.dumps(spec),
            "CRUCIBLE_INPUTS": json.dumps({"datasets": datasets or [], "checkpoint": checkpoint}),
        }
        # As the executor gives each attempt one (executor.launch.termination_log_path): the
        # tests read a failure's reason where the run's message comes from, not from the log,
        # whose last lines any library may write as the process exits.
        messages = self.home / "termination"
        messages.mkdir(exist_ok=True)
        env[contract.TERMINATION_LOG_ENV] = str(messages / f"job-{len(self.jobs)}")
        if resume_from is not None:
            env["CRUCIBLE_RESUME_FROM"] = str(resume_from)
        env |= extra_env or {}
        job = Job(module, env, label or module, cwd, replicas)
        self.jobs.append(job)
        return job

    def preempted(self, run_id: int, step: int) -> int:
        """End attempt 1 of `run_id` as preempted and start attempt 2 from its checkpoint at
        `step`, as the executor does after a recovery; that checkpoint's id."""
        checkpoint = next(c for c in self.checkpoints(run_id) if c.step == step)
        self.api.end_attempt(run_id, 1, AttemptEnd(end_reason="Preempted", exit_code=143))
        self.api.start_attempt(
            run_id, AttemptStart(reason="preemption", resumed_from_checkpoint_id=checkpoint.id)
        )
        return int(checkpoint.id)

    def losses(self, run_id: int) -> dict[int, float]:
        history = self.api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": "loss"})
        (series,) = history["series"]
        return dict(zip(series["steps"], series["values"], strict=True))

    def metric_keys(self, run_id: int) -> set[str]:
        answer = self.api.request("GET", f"/api/v1/runs/{run_id}/metrics/keys")
        return {k["key"] for k in answer["keys"]}

    def checkpoints(self, run_id: int) -> list[Any]:
        return list(self.api.list_checkpoints(run_id).items)


@pytest.fixture(scope="module")
def platform(server: ServerProcess) -> Iterator[Platform]:
    with CrucibleClient(server.url, ADMIN_TOKEN) as api:
        # The server's home, as the executor gives it: runs' checkpoints go in their folder there.
        platform = Platform(server, api, server.root / "home")
        yield platform
        for job in platform.jobs:
            if job.process.poll() is None:
                job.process.kill()
        timings = ", ".join(f"{j.label} {j.result().seconds:.1f}s" for j in platform.jobs)
        print(f"\nworkload processes (pytest -s shows this): {timings}")


# -- stage 1: teacher data, a bad config, a tampered dataset ----------------------------------


@dataclass
class Stage1:
    datagen_run: int
    datagen: Job
    bad_config: Job
    tampered: Job


@pytest.fixture(scope="module")
def stage1(platform: Platform, tmp_path_factory: pytest.TempPathFactory) -> Stage1:
    datagen_run = platform.submit(
        "rollout",
        policy={"teacher": "arithmetic-solver"},
        output="arith-sft",
        config={"task": TASK, "datagen": {"num_prompts": 200, "seed": 1}},
    )
    bad_run = platform.submit(
        "eval", checkpoint={"id": 1}, suite="arithmetic", config={"eval": {"num_problemz": 10}}
    )

    # A dataset whose file changes after it was registered.
    path = tmp_path_factory.mktemp("tampered") / "data.jsonl"
    write_jsonl(path, [{"prompt": "1+1=", "completion": "2"}] * 8)
    platform.api.register_dataset_version(
        DatasetVersionCreate.model_validate(
            {
                "project": "default",
                "name": "tampered",
                "uri": path.as_uri(),
                "digest": content_of(path).digest,
                "record_count": 8,
            }
        )
    )
    write_jsonl(path, [{"prompt": "1+1=", "completion": "3"}] * 8)
    tampered_run = platform.submit(
        "train", config={"train": {"steps": 2}}, inputs=[{"dataset": "tampered@1"}]
    )
    return Stage1(
        datagen_run=datagen_run,
        datagen=platform.start("datagen", datagen_run),
        bad_config=platform.start("eval", bad_run, checkpoint=1, label="bad config"),
        tampered=platform.start(
            "train", tampered_run, datasets=["tampered@1"], label="tampered dataset"
        ),
    )


def test_datagen_publishes_the_teachers_answers(platform: Platform, stage1: Stage1) -> None:
    stage1.datagen.ok()
    version = platform.api.resolve_dataset("default", "arith-sft@latest")
    path = (
        platform.home / "runs" / str(stage1.datagen_run) / "outputs" / "arith-sft.attempt-1.jsonl"
    )
    assert version.version == 1 and version.record_count == 200
    assert version.produced_by_run_id == stage1.datagen_run
    assert version.digest == content_of(path).digest
    assert version.schema_["fields"] == {"prompt": "string", "completion": "string"}
    records = list(read_jsonl(path))
    assert len(records) == 200
    assert all(r["completion"] == solve(r["prompt"]) for r in records)
    assert all(re.fullmatch(r"\d\+\d=", r["prompt"]) for r in records)


def test_a_bad_config_key_exits_2_naming_it(stage1: Stage1) -> None:
    # The eval entry point imports nothing heavy before the config is read: it fails in a
    # fraction of a second (the others spend seconds importing torch first).
    finished = stage1.bad_config.result()
    assert finished.returncode == 2, finished.output
    said = (
        "config.eval.num_problemz is not a field; valid: num_problems, batch_size, "
        "max_new_tokens, seed"
    )
    assert finished.output.strip() == f"crucible.jobs.eval: {said}"
    assert finished.termination_message == said


def test_a_dataset_changed_after_publishing_is_refused(stage1: Stage1) -> None:
    finished = stage1.tampered.result()
    assert finished.returncode == 1, finished.output
    for said in (finished.output, finished.termination_message):
        assert "dataset tampered@1" in said, finished.output
        assert "does not match its registered digest" in said, finished.output
    assert "Traceback" not in finished.output


# -- stage 2: SFT, and the same SFT preempted and resumed -------------------------------------


@dataclass
class Stage2:
    sft_run: int
    sft: Job
    preempted_run: int
    stopped_at: int
    resumed: Job


@pytest.fixture(scope="module")
def stage2(platform: Platform, stage1: Stage1) -> Stage2:
    stage1.datagen.ok()
    spec = {
        "config": SFT_CONFIG,
        "inputs": [{"dataset": "arith-sft@1"}],
        "checkpoints": {"everySteps": CHECKPOINT_EVERY},
    }
    sft_run = platform.submit("train", **spec)
    run_id = platform.submit("train", **spec)
    sft = platform.start("train", sft_run, datasets=["arith-sft@1"], label="sft")
    first = platform.start(
        "train", run_id, datasets=["arith-sft@1"], label="sft attempt 1 (SIGTERM)"
    )
    # Like a node drain: SIGTERM while it trains.
    first.wait_for_line(rf"step 2/{SFT_STEPS} ")
    first.process.send_signal(signal.SIGTERM)
    finished = first.result()
    assert finished.returncode == 143, finished.output
    stopped_at = int(re.findall(rf"step (\d+)/{SFT_STEPS} ", finished.output)[-1])

    # The next attempt, as the executor starts it after recovery.
    resume_from = platform.preempted(run_id, stopped_at)
    resumed = platform.start(
        "train",
        run_id,
        datasets=["arith-sft@1"],
        attempt=2,
        resume_from=resume_from,
        label=f"sft attempt 2 (from step {stopped_at})",
    )
    return Stage2(sft_run, sft, run_id, stopped_at, resumed)


def test_sft_registers_checkpoints_with_meta_and_metrics(
    platform: Platform, stage2: Stage2
) -> None:
    stage2.sft.ok()
    checkpoints = platform.checkpoints(stage2.sft_run)
    assert [c.step for c in checkpoints] == [0, 20, 40, 60], "save_initial, every 20, the end"
    for checkpoint in checkpoints:
        assert checkpoint.meta == {
            "model": asdict(model_preset("tiny")),
            "task": {**asdict(TaskConfig(digits=1)), "operators": ["+"]},
            "mode": "sft",
        }
    assert {"loss", "grad_norm", "lr", "tokens_per_s"} <= platform.metric_keys(stage2.sft_run)
    losses = platform.losses(stage2.sft_run)
    assert sorted(losses) == list(range(1, SFT_STEPS + 1))
    assert sum(losses[s] for s in range(51, 61)) / 10 < 0.5 * losses[1], "it learns"
    inputs = platform.api.list_inputs(stage2.sft_run)
    assert [i.dataset_version_id for i in inputs] == [
        platform.api.resolve_dataset("default", "arith-sft@1").id
    ]


# -- stage 3: eval and rollouts of the SFT model, then RL on the rollouts ---------------------


@dataclass
class Stage3:
    final_checkpoint: Any
    eval_run: int
    eval: Job
    rollout_run: int
    rollout: Job


@pytest.fixture(scope="module")
def stage3(platform: Platform, stage2: Stage2) -> Stage3:
    stage2.sft.ok()
    final = platform.checkpoints(stage2.sft_run)[-1]
    eval_run = platform.submit(
        "eval",
        checkpoint={"id": final.id},
        suite="arithmetic",
        config={"eval": {"num_problems": 50, "max_new_tokens": 4}},
    )
    rollout_run = platform.submit(
        "rollout",
        policy={"checkpoint": {"id": final.id}},
        prompts={"dataset": "arith-sft@1"},
        reward={"name": "exact_match"},
        samplesPerPrompt=SAMPLES,
        sampling={"temperature": 1.0, "maxNewTokens": 4},
        output="arith-rollouts",
        config={"rollout": {"num_prompts": PROMPTS, "batch_size": WAVE}},
    )
    return Stage3(
        final_checkpoint=final,
        eval_run=eval_run,
        eval=platform.start("eval", eval_run, checkpoint=final.id),
        rollout_run=rollout_run,
        rollout=platform.start(
            "rollout", rollout_run, datasets=["arith-sft@1"], checkpoint=final.id
        ),
    )


def test_rollout_publishes_scored_trajectories(platform: Platform, stage3: Stage3) -> None:
    stage3.rollout.ok()
    version = platform.api.resolve_dataset("default", "arith-rollouts@latest")
    assert version.record_count == PROMPTS * SAMPLES
    assert version.schema_["samples_per_prompt"] == SAMPLES
    assert version.schema_["policy_checkpoint"] == stage3.final_checkpoint.id
    assert version.produced_by_run_id == stage3.rollout_run
    path = Path(version.uri.removeprefix("file://"))
    records = list(read_jsonl(path))
    groups: dict[int, list[dict[str, Any]]] = {}
    for record in records:
        groups.setdefault(record["group"], []).append(record)
        assert record["reward"] == (1.0 if record["completion"] == solve(record["prompt"]) else 0.0)
        assert len(record["logprobs"]) == len(record["completion_tokens"]) <= 4
    assert sorted(groups) == list(range(PROMPTS))
    assert all(len(g) == SAMPLES for g in groups.values())
    assert "rollout/mean_reward" in platform.metric_keys(stage3.rollout_run)


def submit_rollout(platform: Platform, checkpoint_id: int, *, replicas: int, output: str) -> int:
    """stage 3's rollout of the SFT checkpoint, on `replicas` replicas."""
    return platform.submit(
        "rollout",
        policy={"checkpoint": {"id": checkpoint_id}},
        prompts={"dataset": "arith-sft@1"},
        reward={"name": "exact_match"},
        samplesPerPrompt=SAMPLES,
        sampling={"temperature": 1.0, "maxNewTokens": 4},
        output=output,
        replicas=replicas,
        config={"rollout": {"num_prompts": PROMPTS, "batch_size": WAVE}},
    )


def test_four_replicas_publish_the_dataset_one_replica_does(
    platform: Platform, stage3: Stage3
) -> None:
    stage3.rollout.ok()
    one = platform.api.resolve_dataset("default", "arith-rollouts@1")
    run_id = submit_rollout(
        platform, stage3.final_checkpoint.id, replicas=4, output="arith-rollouts-x4"
    )
    job = platform.start(
        "rollout",
        run_id,
        datasets=["arith-sft@1"],
        checkpoint=stage3.final_checkpoint.id,
        replicas=4,
        label="rollout x4",
    )
    output = job.ok().output
    four = platform.api.resolve_dataset("default", "arith-rollouts-x4@1")
    assert four.digest == one.digest
    assert four.record_count == PROMPTS * SAMPLES
    # Each replica sampled its own share of the 16 prompts.
    assert sorted(re.findall(r"share (\d) of 4: prompts (\d+)-(\d+)", output)) == [
        ("0", "0", "4"),
        ("1", "4", "8"),
        ("2", "8", "12"),
        ("3", "12", "16"),
    ]


def test_a_replica_lost_mid_job_costs_only_its_share(platform: Platform, stage3: Stage3) -> None:
    stage3.rollout.ok()
    checkpoint = stage3.final_checkpoint.id
    run_id = submit_rollout(platform, checkpoint, replicas=4, output="arith-rollouts-lost")
    first = platform.start(
        "rollout", run_id, datasets=["arith-sft@1"], checkpoint=checkpoint, replicas=4
    )
    # The fault: replica 3 stops (a node gone silent) before it can write its share, the
    # others write theirs, then replica 3 is killed (the node is lost): torchrun ends them all.
    lost = replica_process(first.process.pid, rank=3)
    os.kill(lost, signal.SIGSTOP)
    shares = platform.home / "runs" / str(run_id) / "outputs" / "arith-rollouts-lost.shards"
    assert not (shares / "shard-00003-of-00004.jsonl").exists(), "the fault came too late"
    deadline = time.monotonic() + 240
    while len(list(shares.glob("shard-*.jsonl"))) < 3:
        assert time.monotonic() < deadline, first.output_so_far()
        time.sleep(0.5)
    os.kill(lost, signal.SIGKILL)
    assert first.result().returncode != 0
    assert sorted(p.name for p in shares.glob("shard-*.jsonl")) == [
        f"shard-0000{r}-of-00004.jsonl" for r in range(3)
    ]

    second = platform.start(
        "rollout",
        run_id,
        datasets=["arith-sft@1"],
        checkpoint=checkpoint,
        replicas=4,
        attempt=2,
        label="rollout retry",
    ).ok()
    assert sorted(re.findall(r"share (\d) of 4: written by an earlier attempt", second.output)) == [
        "0",
        "1",
        "2",
    ]
    assert re.findall(r"share (\d) of 4: prompts", second.output) == ["3"]
    retried = platform.api.resolve_dataset("default", "arith-rollouts-lost@1")
    assert retried.digest == platform.api.resolve_dataset("default", "arith-rollouts@1").digest


def replica_process(launcher: int, *, rank: int, timeout: float = 60) -> int:
    """The pid of replica `rank` among the children of torchrun's process `launcher`, found
    as soon as it starts (it imports torch for seconds before it does any work)."""
    wanted = f"RANK={rank}".encode()
    children = Path(f"/proc/{launcher}/task/{launcher}/children")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in children.read_text().split():
            try:
                environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            except OSError:
                continue  # already gone
            if wanted in environ:
                return int(pid)
        time.sleep(0.02)
    pytest.fail(f"no replica {rank} under torchrun's process {launcher} within {timeout} s")


@pytest.fixture(scope="module")
def rl(platform: Platform, stage3: Stage3) -> tuple[int, Job]:
    stage3.rollout.ok()
    sft = stage3.final_checkpoint
    # No config.model: the shape comes from the checkpoint; no samples_per_prompt: the
    # group size of the dataset. Its last two steps are profiled.
    train = {"mode": "rl", "steps": 3, "batch_size": 4, "lr": 1e-4}
    rl_run = platform.submit(
        "train",
        config={"task": TASK, "train": train | {"profile_from_step": 2, "profile_steps": 2}},
        inputs=[{"dataset": "arith-rollouts@1"}],
        initFrom={"id": sft.id},
    )
    job = platform.start(
        "train", rl_run, datasets=["arith-rollouts@1"], checkpoint=sft.id, label="rl"
    )
    return rl_run, job


def test_eval_records_its_scores_against_the_checkpoint(
    platform: Platform, stage3: Stage3, rl: tuple[int, Job]
) -> None:
    stage3.eval.ok()
    checkpoint = stage3.final_checkpoint
    (result,) = platform.api.request("GET", f"/api/v1/checkpoints/{checkpoint.id}/evals")
    assert result["suite"] == "arithmetic" and result["eval_run_id"] == stage3.eval_run
    scores = result["scores"]
    assert set(scores) == {"accuracy", "loss", "num_problems"}
    assert 0 <= scores["accuracy"] <= 1 and scores["loss"] > 0 and scores["num_problems"] > 0
    history = platform.api.request(
        "GET", f"/api/v1/runs/{stage3.eval_run}/metrics", params={"keys": "eval/accuracy"}
    )
    (series,) = history["series"]
    assert series["steps"] == [checkpoint.step] and series["values"] == [scores["accuracy"]]


def test_rl_trains_from_the_sft_checkpoint_on_the_rollouts(
    platform: Platform, stage3: Stage3, rl: tuple[int, Job]
) -> None:
    rl_run, job = rl
    job.ok()
    sft = stage3.final_checkpoint
    (checkpoint,) = platform.checkpoints(rl_run)
    assert checkpoint.step == 3
    assert checkpoint.meta["mode"] == "rl" and checkpoint.meta["model"] == sft.meta["model"]
    assert sorted(platform.losses(rl_run)) == [1, 2, 3]
    # The profile lies in the run's outputs, where the API of a local run reads it.
    profiles = run_profiles.profile_dir(platform.home, rl_run)
    summary = ProfileSummary.model_validate_json(
        (profiles / "rank0-steps2-3.summary.json").read_text()
    )
    assert summary.annotated and summary.top_operators
    assert (profiles / "rank0-steps2-3.trace.json.gz").is_file()


def test_sigterm_saves_the_current_step_and_a_resumed_attempt_matches(
    platform: Platform, stage2: Stage2
) -> None:
    stopped_at = stage2.stopped_at
    assert 2 <= stopped_at < SFT_STEPS
    resumed = stage2.resumed.ok()
    assert f"resumed at step {stopped_at} of {SFT_STEPS}" in resumed.output
    expected = platform.losses(stage2.sft_run)
    assert platform.losses(stage2.preempted_run) == expected, "bitwise the same losses"
    steps = [c.step for c in platform.checkpoints(stage2.preempted_run)]
    assert steps == sorted({0, stopped_at, 20, 40, 60}), "attempt 1 saved where it stopped"
