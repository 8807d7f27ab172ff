"""The workers' handlers against the real control plane (SQLite and Postgres): inputs that
wait for their producers, recovery by budget, exactly one eval per checkpoint and suite,
the heartbeat watchdog. Messages are delivered by the same functions both worker modes use."""

import re
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from crucible.db.engine import transaction
from crucible.db.tables import Attempt, Checkpoint, OutboxMessage, Run
from crucible.settings import Settings
from crucible.workers.handlers import handle_message
from crucible.workers.inprocess import InProcessWorkers
from crucible.workers.relay import relay_once
from crucible.workers.sweeps import (
    expire_silent_attempts,
    promote_recovering,
    retire_checkpoints,
)
from tests.api.test_artifacts import artifact_body
from tests.api.test_checkpoints_datasets import (
    API,
    record_eval,
    register_checkpoint,
    register_dataset,
    submit_kind,
)
from tests.conftest import SHARED_BUCKET, make_project


def drain(app: FastAPI) -> None:
    """Handle every pending outbox message, as the in-process workers do."""
    workers = InProcessWorkers(app.state.session_factory, watchdog_every_seconds=3600)
    workers.tick()


def run_of(admin: TestClient, run_id: int) -> dict[str, Any]:
    response = admin.get(f"{API}/runs/{run_id}")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def report(admin: TestClient, run_id: int, phase: str, reason: str = "") -> None:
    response = admin.post(f"{API}/runs/{run_id}/phase", json={"phase": phase, "reason": reason})
    assert response.status_code == 200, response.text


def start_attempt(admin: TestClient, run_id: int, **body: Any) -> int:
    response = admin.post(f"{API}/runs/{run_id}/attempts", json=body)
    assert response.status_code == 201, response.text
    number: int = response.json()["number"]
    return number


def running(admin: TestClient, run_id: int) -> int:
    """Take a Pending run to Running with a new attempt, like a backend does."""
    phase = run_of(admin, run_id)["phase"]
    if phase != "Scheduling":
        report(admin, run_id, "Scheduling")
    number = start_attempt(admin, run_id)
    report(admin, run_id, "Running")
    return number


def end_badly(admin: TestClient, run_id: int, number: int, reason: str, code: int) -> None:
    response = admin.post(
        f"{API}/runs/{run_id}/attempts/{number}/end",
        json={"end_reason": reason, "exit_code": code},
    )
    assert response.status_code == 200, response.text
    report(admin, run_id, "Interrupted", reason)


def resolve(admin: TestClient, run_id: int) -> dict[str, Any]:
    response = admin.post(f"{API}/runs/{run_id}/inputs/resolve")
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


# --- inputs -----------------------------------------------------------------------------------


def test_a_run_waits_for_its_producer_then_pins_what_it_made(admin: TestClient) -> None:
    make_project(admin)
    consumer = submit_kind(
        admin, "TrainingRun", "sft", inputs=[{"producedBy": "teacher"}, {"dataset": "extra@latest"}]
    )
    waiting = resolve(admin, consumer["id"])
    assert waiting["ready"] is False and waiting["phase"] == "WaitingForInputs"
    assert "run 'teacher' has not been submitted yet" in waiting["message"]
    assert "dataset 'extra' has no version yet" in waiting["message"]

    producer = submit_kind(admin, "RolloutJob", "teacher", output="sft-data")
    running(admin, producer["id"])
    register_dataset(admin, "extra", "e1")
    assert "run 'teacher' is Running" in resolve(admin, consumer["id"])["message"]

    register_dataset(admin, "sft-data", "d1", produced_by_run_id=producer["id"])
    report(admin, producer["id"], "Succeeded")
    ready = resolve(admin, consumer["id"])
    assert ready["ready"] is True
    assert ready["datasets"] == ["sft-data@1", "extra@1"]
    # Pinned: a newer `extra` does not change what later attempts read.
    register_dataset(admin, "extra", "e2")
    assert resolve(admin, consumer["id"])["datasets"] == ["sft-data@1", "extra@1"]
    assert run_of(admin, consumer["id"])["resolved_inputs"]["datasets"] == ["sft-data@1", "extra@1"]
    labels = {i["label"] for i in admin.get(f"{API}/runs/{consumer['id']}/inputs").json()}
    assert labels == {"sft-data@1", "extra@1"}


def test_a_run_waits_for_the_artifacts_its_config_names_then_pins_them(
    admin: TestClient,
) -> None:
    make_project(admin)
    config = {"model": {"tokenizer": "artifact:bpe"}, "suite": {"judge": ["artifact:judge"]}}
    consumer = submit_kind(admin, "TrainingRun", "sft", config=config)
    waiting = resolve(admin, consumer["id"])
    assert waiting["phase"] == "WaitingForInputs"
    assert "artifact 'bpe' does not exist yet" in waiting["message"]
    assert "artifact 'judge' does not exist yet" in waiting["message"]

    def register(name: str, uri: str) -> int:
        body = artifact_body(kind="tokenizer", name=name, uri=uri, sources=[])
        response = admin.post(f"{API}/artifacts", json=body)
        assert response.status_code == 201, response.text
        artifact_id: int = response.json()["id"]
        return artifact_id

    bpe = register("bpe", f"{SHARED_BUCKET}/models/bpe-1")
    judge = register("judge", f"{SHARED_BUCKET}/models/judge-1")
    ready = resolve(admin, consumer["id"])
    assert ready["ready"] is True and ready["artifacts"] == {"bpe": bpe, "judge": judge}
    # Pinned: a newer artifact of the name does not change what later attempts read.
    register("bpe", f"{SHARED_BUCKET}/models/bpe-2")
    assert resolve(admin, consumer["id"])["artifacts"] == {"bpe": bpe, "judge": judge}
    labels = {i["label"] for i in admin.get(f"{API}/runs/{consumer['id']}/inputs").json()}
    assert labels == {"tokenizer bpe", "tokenizer judge"}


def test_an_artifact_id_of_another_project_fails_the_run(admin: TestClient) -> None:
    make_project(admin)
    consumer = submit_kind(
        admin, "TrainingRun", "sft", config={"model": {"tokenizer": "artifact:999"}}
    )
    failed = resolve(admin, consumer["id"])
    assert failed["phase"] == "Failed"
    run = run_of(admin, consumer["id"])
    assert run["reason"] == "ArtifactNotInProject"
    assert "artifact 999 (config `artifact:999`) does not exist in this project" in run["message"]


def test_a_code_package_by_name_is_waited_for_and_pinned_and_must_be_code(
    admin: TestClient,
) -> None:
    make_project(admin)
    consumer = submit_kind(admin, "TrainingRun", "sft", codePackage="artifact:team-code")
    waiting = resolve(admin, consumer["id"])
    assert waiting["phase"] == "WaitingForInputs"
    assert "artifact 'team-code' does not exist yet" in waiting["message"]

    def register(name: str, uri: str, kind: str = "code") -> int:
        body = artifact_body(kind=kind, name=name, uri=uri, sources=[])
        response = admin.post(f"{API}/artifacts", json=body)
        assert response.status_code == 201, response.text
        artifact_id: int = response.json()["id"]
        return artifact_id

    first = register("team-code", f"{SHARED_BUCKET}/code/a.tar")
    ready = resolve(admin, consumer["id"])
    assert ready["ready"] is True and ready["artifacts"] == {"team-code": first}
    # Pinned: a newer package is not this run's.
    register("team-code", f"{SHARED_BUCKET}/code/b.tar")
    assert resolve(admin, consumer["id"])["artifacts"] == {"team-code": first}
    labels = {i["label"] for i in admin.get(f"{API}/runs/{consumer['id']}/inputs").json()}
    assert labels == {"code team-code"}

    bpe = register("bpe", f"{SHARED_BUCKET}/models/bpe", kind="tokenizer")
    wrong = submit_kind(admin, "TrainingRun", "wrong", codePackage=f"artifact:{bpe}")
    assert resolve(admin, wrong["id"])["phase"] == "Failed"
    run = run_of(admin, wrong["id"])
    assert run["reason"] == "NotACodePackage"
    assert f"is artifact {bpe} (bpe), a tokenizer artifact, not a code package" in run["message"]


def test_the_evals_of_a_packaged_run_read_the_package_it_read_and_its_working_dir(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    body = artifact_body(
        kind="code", name="team-code", uri=f"{SHARED_BUCKET}/code/a.tar", sources=[]
    )
    first = admin.post(f"{API}/artifacts", json=body).json()["id"]
    run = submit_kind(
        admin,
        "TrainingRun",
        "sft",
        codePackage="artifact:team-code",
        workingDir="/work/team",
        evals=[{"suite": "team_loop.code:likelihood_suite"}],
    )
    assert resolve(admin, run["id"])["artifacts"] == {"team-code": first}
    newer = artifact_body(
        kind="code", name="team-code", uri=f"{SHARED_BUCKET}/code/b.tar", sources=[]
    )
    assert admin.post(f"{API}/artifacts", json=newer).status_code == 201
    running(admin, run["id"])
    register_checkpoint(admin, run["id"], 100)
    drain(app)
    (evaluation,) = admin.get(f"{API}/runs", params={"kind": "eval"}).json()["items"]
    spec = evaluation["manifest"]["spec"]
    assert spec["codePackage"] == f"artifact:{first}"  # not the newer one of the same name
    assert spec["workingDir"] == "/work/team"


def test_a_failed_producer_fails_its_consumers(admin: TestClient) -> None:
    make_project(admin)
    producer = submit_kind(admin, "TrainingRun", "sft")
    consumer = submit_kind(
        admin, "RolloutJob", "rollouts", policy={"checkpoint": {"run": "sft"}}, output="r"
    )
    assert resolve(admin, consumer["id"])["phase"] == "WaitingForInputs"
    report(admin, producer["id"], "Failed", "ErrorExit")
    failed = resolve(admin, consumer["id"])
    assert failed["ready"] is False and failed["phase"] == "Failed"
    run = run_of(admin, consumer["id"])
    assert run["reason"] == "ProducerFailed"
    assert "run 'sft' it depends on is Failed" in run["message"]


def test_init_from_the_latest_checkpoint_links_lineage(admin: TestClient) -> None:
    make_project(admin)
    sft = submit_kind(admin, "TrainingRun", "sft")
    running(admin, sft["id"])
    register_checkpoint(admin, sft["id"], 100)
    last = register_checkpoint(admin, sft["id"], 200)
    report(admin, sft["id"], "Succeeded")
    rl = submit_kind(admin, "TrainingRun", "rl", initFrom={"run": "sft", "checkpoint": "latest"})
    assert resolve(admin, rl["id"])["checkpoint"] == last["id"]
    graph = admin.get(f"{API}/lineage/run/{rl['id']}", params={"direction": "upstream"}).json()
    assert {"type": "checkpoint", "id": last["id"]} in [e["source"] for e in graph["edges"]]


# --- eval trigger -----------------------------------------------------------------------------


def test_each_checkpoint_gets_one_eval_per_suite_exactly_once(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    run = submit_kind(
        admin,
        "TrainingRun",
        "sft",
        evals=[
            {"suite": "arithmetic", "config": {"eval": {"num_problems": 10}}},
            {"suite": "team_evals.reasoning:gsm8k"},
            {
                "suite": "harness",
                "image": "registry.example/team-evals:3",
                "command": ["python", "-m", "team_evals.harness"],
                "args": ["--shots", "5"],
            },
        ],
    )
    running(admin, run["id"])
    checkpoint = register_checkpoint(admin, run["id"], 100)
    register_checkpoint(admin, run["id"], 100)  # the same checkpoint registered again
    drain(app)
    with app.state.session_factory() as session:
        message_id = session.scalar(
            select(OutboxMessage.id).where(OutboxMessage.topic == "checkpoint.registered")
        )
    assert handle_message(app.state.session_factory, message_id) == "already handled"
    # Even a handler run twice (its mark lost) submits nothing new: the names are fixed.
    with transaction(app.state.session_factory) as session:
        session.execute(update(OutboxMessage).values(handled_at=None))
    drain(app)

    evals = admin.get(f"{API}/runs", params={"kind": "eval"}).json()["items"]
    assert len(evals) == 3
    by_suite = {e["manifest"]["spec"]["suite"]: e for e in evals}
    assert set(by_suite) == {"arithmetic", "team_evals.reasoning:gsm8k", "harness"}
    # An import path is no DNS label: the name is its slug and a digest.
    assert re.fullmatch(
        rf"sft-c{checkpoint['id']}-team-evals-reasoning-gsm8k-[0-9a-f]{{4}}",
        by_suite["team_evals.reasoning:gsm8k"]["name"],
    )
    # A team's own harness: its image and command, not the reference eval workload's.
    harness = by_suite["harness"]["manifest"]["spec"]
    assert harness["image"] == "registry.example/team-evals:3"
    assert harness["command"] == ["python", "-m", "team_evals.harness"]
    assert harness["args"] == ["--shots", "5"]
    assert by_suite["arithmetic"]["manifest"]["spec"].get("command", []) == []
    spec = by_suite["arithmetic"]["manifest"]["spec"]
    assert spec["checkpoint"] == {"id": checkpoint["id"], "checkpoint": "latest"}
    assert spec["config"] == {"eval": {"num_problems": 10}}
    assert by_suite["arithmetic"]["name"] == f"sft-c{checkpoint['id']}-arithmetic"
    assert by_suite["arithmetic"]["tags"]["crucible.dev/evaluates-run"] == str(run["id"])
    assert resolve(admin, by_suite["arithmetic"]["id"])["checkpoint"] == checkpoint["id"]


# --- recovery ---------------------------------------------------------------------------------


def test_preemption_resumes_from_the_latest_checkpoint_after_the_backoff(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", recovery={"backoffSeconds": 30})
    first = running(admin, run["id"])
    register_checkpoint(admin, run["id"], 100)
    latest = register_checkpoint(admin, run["id"], 200)
    end_badly(admin, run["id"], first, "Preempted", 143)
    drain(app)

    recovering = run_of(admin, run["id"])
    assert recovering["phase"] == "Recovering"
    assert recovering["next_attempt_reason"] == "preemption"
    assert recovering["resume_checkpoint_id"] == latest["id"]
    assert "interruption 1 of 20 allowed" in recovering["message"]
    assert promote_recovering(app.state.session_factory) == []  # the backoff is not over
    with transaction(app.state.session_factory) as session:
        session.execute(
            update(Run).values(next_attempt_at=datetime.now(UTC) - timedelta(seconds=1))
        )
    assert promote_recovering(app.state.session_factory) == [run["id"]]
    assert run_of(admin, run["id"])["phase"] == "Scheduling"
    drain(app)  # the attempt.ended message again: nothing more happens
    assert run_of(admin, run["id"])["phase"] == "Scheduling"


def test_the_report_completing_the_facts_answers_with_the_decision(
    admin: TestClient, app: FastAPI
) -> None:
    """No worker runs here until the end: the Interrupted report itself answers with the
    next attempt due and the checkpoint it resumes from, and a retry of that report (its
    answer lost) changes nothing."""
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", recovery={"backoffSeconds": 0})
    first = running(admin, run["id"])
    latest = register_checkpoint(admin, run["id"], 300)
    ended = admin.post(
        f"{API}/runs/{run['id']}/attempts/{first}/end",
        json={"end_reason": "Preempted", "exit_code": 143},
    )
    assert ended.status_code == 200, ended.text
    answer = admin.post(
        f"{API}/runs/{run['id']}/phase", json={"phase": "Interrupted", "reason": "Preempted"}
    )
    assert answer.status_code == 200, answer.text
    decided = answer.json()
    assert (decided["phase"], decided["next_attempt_reason"]) == ("Scheduling", "preemption")
    assert decided["resume_checkpoint_id"] == latest["id"]

    retried = admin.post(
        f"{API}/runs/{run['id']}/phase", json={"phase": "Interrupted", "reason": "Preempted"}
    )
    assert retried.status_code == 200, retried.text
    assert retried.json()["phase"] == "Scheduling"
    events = admin.get(f"{API}/runs/{run['id']}/events").json()
    assert [e["type"] for e in events].count("RecoveryScheduled") == 1
    assert [e["data"].get("phase") for e in events].count("Interrupted") == 1

    drain(app)  # the follow-up checks the chosen checkpoint's digest, and decides nothing
    types = [e["type"] for e in admin.get(f"{API}/runs/{run['id']}/events").json()]
    assert types.count("CheckpointVerified") == 1 and types.count("RecoveryScheduled") == 1
    assert run_of(admin, run["id"])["resume_checkpoint_id"] == latest["id"]


def test_a_chosen_checkpoint_that_fails_its_digest_is_replaced_before_the_attempt_starts(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", recovery={"backoffSeconds": 30})
    first = running(admin, run["id"])
    intact = register_checkpoint(admin, run["id"], 100)
    content = f"altered in place later {uuid.uuid4().hex}"  # a folder of this test's own
    altered = register_checkpoint(admin, run["id"], 200, content=content)
    shard = Path(altered["uri"].removeprefix("file://")) / "state"
    shard.write_text(content.upper())  # same size: only the digest can tell
    end_badly(admin, run["id"], first, "Preempted", 143)
    # Decided at the report, from what can be told without reading the files.
    assert run_of(admin, run["id"])["resume_checkpoint_id"] == altered["id"]

    drain(app)
    recovering = run_of(admin, run["id"])
    assert recovering["phase"] == "Recovering"
    assert recovering["resume_checkpoint_id"] == intact["id"]
    damaged = [
        e
        for e in admin.get(f"{API}/runs/{run['id']}/events").json()
        if e["type"] == "CheckpointDamaged"
    ]
    assert [e["data"]["checkpoint_id"] for e in damaged] == [altered["id"]]
    assert f"{altered['digest']} was registered" in damaged[0]["message"]


def test_interruptions_and_failures_are_counted_apart(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run = submit_kind(
        admin,
        "TrainingRun",
        "sft",
        recovery={"maxInterruptions": 2, "maxFailures": 1, "backoffSeconds": 0},
    )
    for reason, code in [("Preempted", 143), ("ErrorExit", 1), ("NodeLost", 137)]:
        number = running(admin, run["id"])
        end_badly(admin, run["id"], number, reason, code)
        drain(app)
        promote_recovering(app.state.session_factory)
        assert run_of(admin, run["id"])["phase"] == "Scheduling", reason
    number = running(admin, run["id"])
    end_badly(admin, run["id"], number, "ErrorExit", 1)
    drain(app)
    failed = run_of(admin, run["id"])
    assert (failed["phase"], failed["reason"]) == ("Failed", "ReachedMaxFailures")
    assert "failure 2 of 1 allowed" in failed["message"]


def test_over_the_interruption_budget_fails_with_its_reason(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    run = submit_kind(
        admin, "TrainingRun", "sft", recovery={"maxInterruptions": 1, "backoffSeconds": 0}
    )
    for expected in ("Scheduling", "Failed"):
        number = running(admin, run["id"])
        end_badly(admin, run["id"], number, "Evicted", 137)
        drain(app)
        promote_recovering(app.state.session_factory)
        assert run_of(admin, run["id"])["phase"] == expected
    assert run_of(admin, run["id"])["reason"] == "ReachedMaxInterruptions"


def test_a_silent_attempt_is_interrupted_and_recovered(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", recovery={"backoffSeconds": 0})
    silent = submit_kind(admin, "TrainingRun", "no-sdk")
    number = running(admin, run["id"])
    running(admin, silent["id"])  # never sends a heartbeat: not judged
    assert (
        admin.post(f"{API}/runs/{run['id']}/heartbeat", json={"attempt": number}).status_code == 200
    )
    with transaction(app.state.session_factory) as session:
        session.execute(
            update(Attempt).values(heartbeat_at=datetime.now(UTC) - timedelta(minutes=5))
        )
        session.execute(
            update(Attempt).where(Attempt.run_id == silent["id"]).values(heartbeat_at=None)
        )
    assert expire_silent_attempts(app.state.session_factory, 120) == [run["id"]]
    attempt = admin.get(f"{API}/runs/{run['id']}/attempts").json()[0]
    assert attempt["end_reason"] == "HeartbeatTimeout"
    drain(app)
    promote_recovering(app.state.session_factory)
    recovered = run_of(admin, run["id"])
    assert (recovered["phase"], recovered["next_attempt_reason"]) == ("Scheduling", "node-lost")
    assert run_of(admin, silent["id"])["phase"] == "Running"


def test_the_relay_keeps_what_the_broker_refused(admin: TestClient, app: FastAPI) -> None:
    make_project(admin)
    submit_kind(admin, "TrainingRun", "sft")
    published: list[int] = []

    def broker_down(message_id: int, topic: str) -> None:
        raise ConnectionError("redis is restarting")

    assert relay_once(app.state.session_factory, broker_down) == 0
    with app.state.session_factory() as session:
        row = session.scalars(select(OutboxMessage)).one()
        assert row.sent_at is None and "redis is restarting" in row.last_error
    assert relay_once(app.state.session_factory, lambda i, t: published.append(i)) == 1
    assert relay_once(app.state.session_factory, lambda i, t: published.append(i)) == 0
    # Published but never handled (a worker died with it): published again later.
    assert (
        relay_once(
            app.state.session_factory,
            lambda i, t: published.append(i),
            republish_after=timedelta(0),
        )
        == 1
    )
    assert published == [row.id, row.id]


def test_the_relay_waits_longer_before_each_republish_and_sends_new_rows_first(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    for name in ("a", "b", "c"):
        submit_kind(admin, "TrainingRun", name)
    factory = app.state.session_factory
    now = datetime.now(UTC)
    with transaction(factory) as session:
        waiting, lingering, new = session.scalars(select(OutboxMessage.id).order_by("id")).all()
        # Published 3 times: the next republish is due 30 s x 2^2 = 120 s after the last.
        sent(session, waiting, publishes=3, at=now - timedelta(seconds=100))
        # Published 9 times: every 30 s x 2^5 = 16 min from then on.
        sent(session, lingering, publishes=9, at=now - timedelta(minutes=15))
    published: list[int] = []

    def publish(message_id: int, topic: str) -> None:
        published.append(message_id)

    assert relay_once(factory, publish, republish_after=timedelta(seconds=30)) == 1
    assert published == [new]
    with transaction(factory) as session:
        sent(session, waiting, publishes=3, at=now - timedelta(seconds=130))
        sent(session, lingering, publishes=9, at=now - timedelta(minutes=17))
    submit_kind(admin, "TrainingRun", "d")
    with factory() as session:
        newest = session.scalars(select(OutboxMessage.id).order_by(OutboxMessage.id.desc())).first()
    # Two rows are due again and one was never sent: with room for one, the unsent row goes
    # first, though its id is the highest; then the one whose last publish is oldest.
    assert relay_once(factory, publish, batch=1, republish_after=timedelta(seconds=30)) == 1
    assert relay_once(factory, publish, batch=1, republish_after=timedelta(seconds=30)) == 1
    assert published == [new, newest, lingering]


def sent(session: Session, message_id: int, *, publishes: int, at: datetime) -> None:
    session.execute(
        update(OutboxMessage)
        .where(OutboxMessage.id == message_id)
        .values(sent_at=at, publish_attempts=publishes)
    )


# --- goodput ----------------------------------------------------------------------------------


def test_goodput_counts_work_since_the_last_checkpoint_and_restart_gaps(
    admin: TestClient, app: FastAPI
) -> None:
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "sft", gpusPerNode=2, recovery={"backoffSeconds": 0})
    first = running(admin, run["id"])
    register_checkpoint(admin, run["id"], 100, attempt=first)
    end_badly(admin, run["id"], first, "Preempted", 143)
    drain(app)
    promote_recovering(app.state.session_factory)
    second = start_attempt(admin, run["id"], reason="preemption")
    report(admin, run["id"], "Running")
    admin.post(f"{API}/runs/{run['id']}/attempts/{second}/end", json={"end_reason": "Completed"})
    report(admin, run["id"], "Succeeded", "Completed")
    # Pin the clock: attempt 1 ran 0-100 s with its checkpoint at 70 s; attempt 2 ran 110-200 s.
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    at = lambda s: t0 + timedelta(seconds=s)  # noqa: E731
    with transaction(app.state.session_factory) as session:
        for number, (start, end) in {1: (0, 100), 2: (110, 200)}.items():
            session.execute(
                update(Attempt)
                .where(Attempt.run_id == run["id"], Attempt.number == number)
                .values(started_at=at(start), ended_at=at(end))
            )
        session.execute(update(Checkpoint).values(created_at=at(70)))

    body = admin.get(f"{API}/runs/{run['id']}/goodput").json()
    assert [
        (a["duration_s"], a["work_lost_s"], a["restart_overhead_s"]) for a in body["attempts"]
    ] == [
        (100.0, 30.0, 0.0),
        (90.0, 0.0, 10.0),
    ]
    assert body["devices"] == 2
    assert body["allocated_device_s"] == 2 * (100 + 90 + 10)
    assert body["productive_device_s"] == 2 * (200 - 30 - 10)
    assert body["goodput"] == 160 / 200
    experiment = admin.get(f"{API}/experiments/{run['experiment_id']}/goodput").json()
    assert (experiment["runs"], experiment["goodput"]) == (1, 160 / 200)


# --- retention --------------------------------------------------------------------------------


def test_retention_keeps_the_last_k_the_best_and_those_in_use(
    admin: TestClient, app: FastAPI, settings: Settings
) -> None:
    make_project(admin)
    run = submit_kind(
        admin, "TrainingRun", "sft", checkpoints={"keepLast": 2, "best": "max:accuracy"}
    )
    running(admin, run["id"])
    # Where the local executor has the run write them: retention deletes only there.
    tmp_path = settings.home / "runs" / str(run["id"]) / "checkpoints"
    tmp_path.mkdir(parents=True)
    checkpoints = {}
    for step in range(100, 800, 100):
        folder = tmp_path / f"step-{step}"
        folder.mkdir()
        (folder / "weights").write_bytes(b"w" * step)
        checkpoints[step] = register_checkpoint(
            admin, run["id"], step, uri=folder.as_uri(), size_bytes=step
        )
    record_eval(admin, checkpoints[100]["id"], {"accuracy": 0.9})
    record_eval(admin, checkpoints[600]["id"], {"accuracy": 0.5})
    reader = submit_kind(admin, "TrainingRun", "rl", initFrom={"id": checkpoints[200]["id"]})
    resolve(admin, reader["id"])
    pending = submit_kind(admin, "EvalJob", "ev-300", checkpoint={"id": checkpoints[300]["id"]})
    with transaction(app.state.session_factory) as session:
        session.get_one(Run, pending["id"]).tags = {
            "crucible.dev/checkpoint": str(checkpoints[300]["id"])
        }

    # Not before their checkpoint.registered messages are handled (evals not yet triggered).
    assert retire_checkpoints(app.state.session_factory) == 0
    drain(app)  # the in-process workers also run retention, which retires two now
    live = {
        c["step"]
        for c in admin.get(f"{API}/runs/{run['id']}/checkpoints").json()["items"]
        if c["deleted_at"] is None
    }
    assert live == {100, 200, 300, 600, 700}
    assert not (tmp_path / "step-400").exists() and not (tmp_path / "step-500").exists()
    assert (tmp_path / "step-300").exists()

    report(admin, pending["id"], "Failed", "ErrorExit")  # its eval is over
    assert retire_checkpoints(app.state.session_factory) == 1
    assert not (tmp_path / "step-300").exists()
    assert retire_checkpoints(app.state.session_factory) == 0


def test_an_init_from_checkpoint_outside_the_project_fails_saying_so(admin: TestClient) -> None:
    """No producer failed: the checkpoint id names nothing this project wrote (here, nothing
    at all; another project's checkpoint takes the same path)."""
    make_project(admin)
    run = submit_kind(admin, "TrainingRun", "tune", initFrom={"id": 999_999})
    assert resolve(admin, run["id"])["phase"] == "Failed"
    failed = run_of(admin, run["id"])
    assert failed["reason"] == "CheckpointNotInProject", failed
    assert "checkpoint 999999 does not exist in this project" in failed["message"]
