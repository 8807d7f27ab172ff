"""`crucible sweeps run FILE`: a sweep driven from this terminal through the API, so on
either backend: each trial is a TrainingRun submitted like `crucible submit`'s, tagged
with its sweep, its number and its point; ASHA's stops cancel the run and are printed
with the reason; at the end a table of the trials, the best one, and a link to the
dashboard's comparison of them (their curves on shared charts, their configs' differences).

The trials are found again by their tags, so running the same file again after the
terminal closed goes on with the sweep instead of starting it over (ASHA is given the
trials' metric points again, in the same order, and decides as it did). The sweep as a
resource of its own, kept by the control plane, is not built yet (docs/sweeps.md).
"""

import copy
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

import typer
import yaml

from crucible.cli.common import ProjectOpt, client, friendly_errors
from crucible.cli.output import console, table
from crucible.client import CrucibleClient, provenance
from crucible.domain import resources
from crucible.domain.enums import Backend, Phase
from crucible.domain.errors import CrucibleError
from crucible.schemas.runs import RunPublic, RunSubmit
from crucible.settings import DEFAULT_PROJECT, load_settings
from crucible.sweeps.controller import SweepController, TrialState
from crucible.sweeps.plan import SweepPlan, parse_plan
from crucible.sweeps.space import SearchSpaceError, apply, check_point

sweeps_app = typer.Typer(no_args_is_help=True, help="Sweeps: trials as runs, ASHA stops.")

SWEEP_TAG = "sweep"
TRIAL_TAG = "sweep.trial"


@dataclass(frozen=True)
class SweepFile:
    name: str
    plan: SweepPlan
    run_spec: dict[str, Any]
    """The base TrainingRun's spec; each trial's config is its config with the point."""


def load_sweep(path: Path) -> SweepFile:
    """The file's one `kind: Sweep` document, checked whole: the plan, and every trial's
    run config as the job will validate it. A bad value is named; nothing is submitted."""
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d is not None]
    if len(documents) != 1 or not isinstance(documents[0], Mapping):
        raise CrucibleError(f"{path} must hold one Sweep document, found {len(documents)}")
    document = documents[0]
    if document.get("kind") != "Sweep":
        raise CrucibleError(f"{path}: kind must be Sweep, got {document.get('kind')!r}")
    name = (document.get("metadata") or {}).get("name")
    if not isinstance(name, str) or not name:
        raise CrucibleError(f"{path}: metadata.name must name the sweep, got {name!r}")
    spec = dict(document.get("spec") or {})
    run_spec = spec.pop("run", None)
    if not isinstance(run_spec, Mapping):
        raise CrucibleError(f"{path}: spec.run must be a TrainingRun's spec, got {run_spec!r}")
    try:
        plan = parse_plan(spec)
        for number in range(plan.trials):
            check_point(run_spec.get("config") or {}, plan.point(number))
    except SearchSpaceError as error:
        raise CrucibleError(f"{path}: {error}") from None
    sweep = SweepFile(name, plan, dict(run_spec))
    trial_request(sweep, 0, project=DEFAULT_PROJECT, backend=Backend.local)  # the manifest
    return sweep


def trial_request(sweep: SweepFile, number: int, *, project: str, backend: Backend) -> RunSubmit:
    """Trial `number` as a run: the base spec with the point applied, named
    `<sweep>-<number>`, tagged with the sweep, the number and each parameter's value."""
    point = sweep.plan.point(number)
    spec = copy.deepcopy(sweep.run_spec)
    spec["config"] = apply(spec.get("config") or {}, point)
    manifest = {
        "apiVersion": resources.API_VERSION,
        "kind": "TrainingRun",
        "metadata": {"name": f"{sweep.name}-{number:03d}"},
        "spec": spec,
    }
    tags = {SWEEP_TAG: sweep.name, TRIAL_TAG: str(number)}
    tags |= {f"sweep.{path}": json.dumps(value) for path, value in point.items()}
    try:
        return RunSubmit(project=project, manifest=manifest, backend=backend, tags=tags)
    except ValueError as error:
        raise CrucibleError(f"trial {number} of sweep {sweep.name}: {error}") from None


def trial_runs(api: CrucibleClient, sweep: SweepFile, project: str) -> list[RunPublic]:
    """The sweep's runs so far, by trial number."""
    page = api.list_runs(project=project, tag=f"{SWEEP_TAG}={sweep.name}", limit=1000)
    runs = sorted(page.items, key=lambda run: int(run.tags[TRIAL_TAG]))
    numbers = [int(run.tags[TRIAL_TAG]) for run in runs]
    if numbers != list(range(len(runs))):
        raise CrucibleError(f"sweep {sweep.name}'s trials in {project} are {numbers}, not 0 up")
    return runs


def metric_points(api: CrucibleClient, run_id: int, key: str) -> list[tuple[int, float]]:
    answer = api.request("GET", f"/api/v1/runs/{run_id}/metrics", params={"keys": key})
    series = answer["series"]
    if not series:
        return []
    return list(zip(series[0]["steps"], series[0]["values"], strict=True))


def trial_state(api: CrucibleClient, run: RunPublic, metric: str) -> TrialState:
    """`run` as listed on this look (its phase is as fresh as its points)."""
    return TrialState(
        number=int(run.tags[TRIAL_TAG]),
        run_id=run.id,
        ended=Phase(run.phase).is_terminal,
        points=metric_points(api, run.id, metric),
    )


@sweeps_app.command("run")
@friendly_errors
def sweeps_run(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, readable=True)],
    project: ProjectOpt = DEFAULT_PROJECT,
    backend: Annotated[Backend, typer.Option(help="local or kubernetes.")] = Backend.local,
    poll: Annotated[float, typer.Option(min=0.1, help="Seconds between looks.")] = 5.0,
    summary: Annotated[
        Path | None, typer.Option(help="Write the trials and the best as JSON here.")
    ] = None,
) -> None:
    """Run the sweep in FILE to its end: start trials up to the budget's concurrency, stop
    those ASHA stops (the reason printed), and print every trial and the best."""
    sweep = load_sweep(file)
    plan = sweep.plan
    controller = SweepController(plan)
    code = provenance.capture(provenance.reference_code_directory())
    with client() as api:
        while True:
            runs = trial_runs(api, sweep, project)
            trials = [trial_state(api, run, plan.metric) for run in runs]
            actions = controller.decide(trials)
            for stop in actions.stop:
                api.cancel_run(stop.run_id)
                console.print(
                    f"trial {stop.number} (run {stop.run_id}) {stop.reason}", soft_wrap=True
                )
            for number in actions.start:
                request = trial_request(sweep, number, project=project, backend=backend)
                run = api.submit_run(request.model_copy(update={"code": code}))
                point = ", ".join(f"{k}={v!r}" for k, v in plan.point(number).items())
                console.print(f"trial {number} started as run {run.id}: {point}", soft_wrap=True)
            if actions.finished:
                break
            time.sleep(poll)
        results = controller.results(trials)
        best = plan.best(results)
        rows: list[dict[str, Any]] = []
        for trial, run, result in zip(trials, runs, results, strict=True):
            last = trial.points[-1] if trial.points else None
            rows.append(
                {
                    "trial": trial.number,
                    "run": run.id,
                    "phase": str(run.phase),
                    "point": plan.point(trial.number),
                    "last_step": last[0] if last else None,
                    plan.metric: last[1] if last else None,
                    "stopped": controller.stopped.get(trial.number),
                    "candidate": result.value is not None,
                }
            )
    table(
        f"sweep {sweep.name}: {plan.metric}, {plan.goal}",
        ["trial", "run", "phase", "point", plan.metric, "at step", "stopped by ASHA"],
        [
            [
                str(row["trial"]),
                str(row["run"]),
                row["phase"],
                ", ".join(f"{k}={v!r}" for k, v in row["point"].items()),
                "-" if row[plan.metric] is None else f"{row[plan.metric]:.6g}",
                "-" if row["last_step"] is None else str(row["last_step"]),
                "yes" if row["stopped"] else "",
            ]
            for row in rows
        ],
    )
    if best is None:
        console.print(f"no trial logged {plan.metric}: no best")
    else:
        console.print(
            f"best: trial {best.number} (run {rows[best.number]['run']}), "
            f"{plan.metric} {best.value:.6g}"
        )
    ids = ",".join(str(row["run"]) for row in rows)
    console.print(
        f"the trials side by side: {load_settings().api_url.rstrip('/')}/#/compare?runs={ids}",
        soft_wrap=True,
    )
    if summary is not None:
        payload = {
            "sweep": sweep.name,
            "metric": plan.metric,
            "goal": plan.goal,
            "trials": rows,
            "best": None if best is None else best.number,
        }
        summary.write_text(json.dumps(payload, indent=2) + "\n")
