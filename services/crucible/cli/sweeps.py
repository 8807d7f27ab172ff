"""`crucible sweeps`: a sweep submitted to the control plane, which starts its trials as
runs and stops those ASHA stops (the workers' controller, `core/sweep_controller.py`), on
either backend; and the sweeps listed, shown, cancelled.

`crucible sweeps run FILE` checks the file whole before anything is sent, submits it (the
same file again finds the same sweep), then follows it: each trial as it starts, each stop
with its reason, and at the end a table of the trials, the best one, and a link to the
dashboard's pages of it. Closing the terminal stops nothing: the sweep goes on without it.
"""

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml
from pydantic import ValidationError

from crucible import provenance
from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.output import console, table
from crucible.client import calls
from crucible.domain.enums import Backend, Phase
from crucible.domain.errors import CrucibleError
from crucible.domain.specs import SweepManifest
from crucible.schemas.sweeps import SweepPublic, SweepSubmit
from crucible.settings import DEFAULT_PROJECT, load_settings
from crucible.sweeps.plan import checked_plan
from crucible.sweeps.space import SearchSpaceError

sweeps_app = typer.Typer(no_args_is_help=True, help="Sweeps: trials as runs, ASHA stops.")

SweepId = Annotated[int, typer.Argument(min=1, help="The sweep's id.")]


def load_sweep(path: Path) -> SweepManifest:
    """The file's one `kind: Sweep` document, checked whole: the manifest, the plan, and
    every trial's run config as the job will validate it. A bad value is named."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    if len(documents) != 1 or not isinstance(documents[0], Mapping):
        raise CrucibleError(f"{path} must hold one Sweep document, found {len(documents)}")
    document = documents[0]
    if document.get("kind") != "Sweep":
        raise CrucibleError(f"{path}: kind must be Sweep, got {document.get('kind')!r}")
    try:
        manifest = SweepManifest.model_validate(document)
        checked_plan(manifest.spec.plan_settings(), manifest.spec.run.config or {})
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise CrucibleError(f"{path}: {problems}") from None
    except SearchSpaceError as error:
        raise CrucibleError(f"{path}: {error}") from None
    return manifest


@sweeps_app.command("run")
@friendly_errors
def sweeps_run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    project: ProjectOpt = DEFAULT_PROJECT,
    backend: Annotated[Backend, typer.Option(help="local or kubernetes.")] = Backend.local,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between looks.")] = 5.0,
    detach: Annotated[bool, typer.Option(help="Submit, print the id, do not follow.")] = False,
    summary: Annotated[
        Path | None, typer.Option(help="Write the trials and the best as JSON here.")
    ] = None,
) -> None:
    """Submit the sweep in FILE and follow it to its end: trials as they start, stops with
    their reasons, then every trial and the best."""
    manifest = load_sweep(file)
    request = SweepSubmit(
        project=project,
        manifest=manifest,
        backend=backend,
        code=provenance.capture(provenance.reference_code_directory()),
    )
    with client() as api:
        sweep = api.send(calls.submit_sweep(request))
        console.print(f"sweep {sweep.name} is {sweep.id} ({sweep.phase})")
        if detach:
            return
        seen = {t.number for t in sweep.trials}
        stopped = {t.number for t in sweep.trials if t.stopped_reason}
        while not sweep.phase.is_terminal:
            time.sleep(poll)
            sweep = api.send(calls.get_sweep(sweep.id))
            for trial in sweep.trials:
                if trial.number not in seen:
                    seen.add(trial.number)
                    console.print(
                        f"trial {trial.number} started as run {trial.run_id}: "
                        f"{_point(trial.point)}",
                        soft_wrap=True,
                    )
                if trial.stopped_reason and trial.number not in stopped:
                    stopped.add(trial.number)
                    console.print(
                        f"trial {trial.number} (run {trial.run_id}) {trial.stopped_reason}",
                        soft_wrap=True,
                    )
    _print_result(sweep)
    if summary is not None:
        summary.write_text(json.dumps(_summary(sweep), indent=2) + "\n")
    if sweep.phase is not Phase.Succeeded:
        raise typer.Exit(1)


@sweeps_app.command("ls")
@friendly_errors
def sweeps_ls(project: ProjectOpt = DEFAULT_PROJECT) -> None:
    """The project's sweeps, newest first."""
    with client() as api:
        page = api.send(calls.list_sweeps(project))
    table(
        f"sweeps in {project}",
        ["id", "name", "phase", "metric", "trials", "best", "message"],
        [
            [
                str(s.id),
                s.name,
                str(s.phase),
                f"{s.metric} ({s.goal})",
                str(s.budget),
                "-" if s.best_trial is None else str(s.best_trial),
                s.message,
            ]
            for s in page.items
        ],
    )


@sweeps_app.command("get")
@friendly_errors
def sweeps_get(sweep_id: SweepId) -> None:
    """The sweep and every trial started so far."""
    with client() as api:
        sweep = api.send(calls.get_sweep(sweep_id))
    _print_result(sweep)


@sweeps_app.command("cancel")
@friendly_errors
def sweeps_cancel(sweep_id: SweepId) -> None:
    """End the sweep: no more trials, and its running trials cancelled."""
    with client() as api:
        sweep = api.send(calls.cancel_sweep(sweep_id))
    console.print(f"sweep {sweep.name} ({sweep.id}) is {sweep.phase}")


def _point(point: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in point.items())


def _print_result(sweep: SweepPublic) -> None:
    table(
        f"sweep {sweep.name}: {sweep.metric}, {sweep.goal} ({sweep.phase})",
        ["trial", "run", "phase", "point", sweep.metric, "at step", "stopped by ASHA"],
        [
            [
                str(t.number),
                str(t.run_id),
                str(t.phase),
                _point(t.point),
                "-" if t.value is None else f"{t.value:.6g}",
                "-" if t.step is None else str(t.step),
                "yes" if t.stopped_reason else "",
            ]
            for t in sweep.trials
        ],
    )
    if sweep.message:
        console.print(sweep.message, soft_wrap=True)
    base = load_settings().api_url.rstrip("/")
    ids = ",".join(str(t.run_id) for t in sweep.trials)
    console.print(f"the sweep: {base}/#/sweeps/{sweep.id}", soft_wrap=True)
    console.print(f"the trials side by side: {base}/#/compare?runs={ids}", soft_wrap=True)


def _summary(sweep: SweepPublic) -> dict[str, Any]:
    return {
        "sweep": sweep.name,
        "id": sweep.id,
        "phase": str(sweep.phase),
        "metric": sweep.metric,
        "goal": sweep.goal,
        "trials": [
            {
                "trial": t.number,
                "run": t.run_id,
                "phase": str(t.phase),
                "point": t.point,
                "last_step": t.step,
                sweep.metric: t.value,
                "stopped": t.stopped_reason,
            }
            for t in sweep.trials
        ],
        "best": sweep.best_trial,
        "message": sweep.message,
    }
