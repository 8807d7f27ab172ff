"""`crucible deployments` against a real server, fed as the operator feeds it: through the
client's report and remove calls, blocking and asynchronous."""

import asyncio
import json

from crucible.client import CrucibleClient, calls
from crucible.client.async_http import AsyncCrucibleClient
from crucible.domain.specs import CheckpointRef
from crucible.schemas.deployments import DeploymentPhase, DeploymentReport
from crucible.schemas.lineage import CheckpointCreate
from crucible.schemas.runs import RunSubmit
from tests.checkpoint_files import checkpoint_files
from tests.conftest import training_run
from tests.servers import LocalServer, crucible

# Wide enough that the table is never wrapped or cut, whatever the terminal.
WIDE = {"COLUMNS": "250"}


def _remove(server: LocalServer, name: str) -> None:
    """Through the asynchronous client, as the operator's finalizer calls it."""

    async def send() -> None:
        api = AsyncCrucibleClient(server.url, server.token)
        try:
            assert await api.send(calls.remove_deployment("kubernetes", "serving", name)) is None
        finally:
            await api.close()

    asyncio.run(send())


def test_list_and_show_what_the_backend_reported(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    live_api.create_project("serving")
    live_api.create_project("other")
    run = live_api.submit_run(RunSubmit(project="serving", manifest=training_run(name="sft")))
    files = checkpoint_files(run.id, 100, "cli-deployments")
    checkpoint = live_api.register_checkpoint(run.id, CheckpointCreate(step=100, **files))
    report = DeploymentReport(
        uid="uid-1",
        checkpoint=CheckpointRef(run="sft", checkpoint="latest"),
        replicas=2,
        ready_replicas=1,
        serving_checkpoint_id=checkpoint.id,
        phase=DeploymentPhase.Rolling,
        url="http://chat.serving.svc:8000",
    )
    chat = live_api.report_deployment("kubernetes", "serving", "chat", report)
    assert chat.checkpoint_id == checkpoint.id and chat.serving is not None
    unresolved = report.model_copy(update={"checkpoint": CheckpointRef(run="missing")})
    broken = live_api.report_deployment("kubernetes", "serving", "broken", unresolved)
    assert broken.checkpoint_id is None
    elsewhere = unresolved.model_copy(update={"serving_checkpoint_id": None})
    live_api.report_deployment("kubernetes", "other", "elsewhere", elsewhere)

    listed = crucible(live_server.env | WIDE, "deployments", "list", "--project", "serving")
    assert listed.returncode == 0, listed.stderr
    rows = {line.split("│")[2].strip(): line for line in listed.stdout.splitlines() if "│" in line}
    assert set(rows) == {"chat", "broken"}
    assert f"{checkpoint.id} (sft/step 100)" in rows["chat"]
    assert "1/2" in rows["chat"] and "Rolling" in rows["chat"]
    assert "http://chat.serving.svc:8000" in rows["chat"]
    assert "run 'missing' does not exist" in rows["broken"]
    every = crucible(live_server.env | WIDE, "deployments", "list")
    assert "elsewhere" in every.stdout and "chat" in every.stdout

    shown = crucible(live_server.env, "deployments", "show", str(chat.id))
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout) == json.loads(
        live_api.get_deployment(chat.id).model_dump_json()
    )

    _remove(live_server, "chat")
    _remove(live_server, "chat")  # already gone: still no error
    live_api.remove_deployment("kubernetes", "serving", "broken")
    assert live_api.list_deployments("serving").items == []
    missing = crucible(live_server.env, "deployments", "show", str(chat.id))
    assert missing.returncode == 1 and f"deployment {chat.id} not found" in missing.stderr


def test_promote_says_what_will_serve_it_and_why_not(
    live_server: LocalServer, live_api: CrucibleClient
) -> None:
    live_api.create_project("promoting")
    live_api.create_project("elsewhere")
    run = live_api.submit_run(RunSubmit(project="promoting", manifest=training_run(name="sft")))
    old, new = (
        live_api.register_checkpoint(
            run.id, CheckpointCreate(step=step, **checkpoint_files(run.id, step, f"p{step}"))
        )
        for step in (100, 200)
    )
    report = DeploymentReport(
        checkpoint=CheckpointRef(id=old.id),
        replicas=1,
        ready_replicas=1,
        serving_checkpoint_id=old.id,
        phase=DeploymentPhase.Ready,
    )
    chat = live_api.report_deployment("kubernetes", "promoting", "chat", report)

    promoted = crucible(live_server.env, "deployments", "promote", str(chat.id), str(new.id))
    assert promoted.returncode == 0, promoted.stderr
    assert promoted.stdout.strip() == (
        f"promotion accepted: ServedModel promoting/chat will serve checkpoint {new.id}"
    )
    other = live_api.submit_run(RunSubmit(project="elsewhere", manifest=training_run(name="o")))
    foreign = live_api.register_checkpoint(
        other.id, CheckpointCreate(step=1, **checkpoint_files(other.id, 1, "o"))
    )
    refused = crucible(live_server.env, "deployments", "promote", str(chat.id), str(foreign.id))
    assert refused.returncode == 1
    assert f"checkpoint {foreign.id} does not exist in project 'promoting'" in refused.stderr
