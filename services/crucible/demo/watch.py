"""Submit the demo loop and follow it in the terminal: a progress bar per run (steps for
training, phases for the rest), then eval accuracy per checkpoint and the final checkpoint's
lineage."""

import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from crucible import provenance
from crucible.client import ApiError, CrucibleClient
from crucible.demo.loop import LoopSize, loop_manifests, run_names
from crucible.domain.enums import Phase, RunKind
from crucible.domain.errors import CrucibleError
from crucible.schemas.lineage import EvalResultPublic
from crucible.schemas.runs import RunPublic, RunSubmit


@dataclass
class DemoOutcome:
    succeeded: bool
    runs: dict[str, RunPublic]
    """Stage -> its run, as it finished."""
    accuracy: dict[str, float]
    """"initial", "sft", "rl" -> held-out accuracy of the first SFT checkpoint, the last SFT
    checkpoint and the last RL checkpoint."""


def run_demo(
    client: CrucibleClient,
    *,
    project: str,
    experiment: str,
    size: LoopSize,
    console: Console,
    timeout_seconds: float = 3600,
) -> DemoOutcome:
    experiment, submitted = _submit(client, project, experiment, size)
    console.print(
        f"demo loop submitted to experiment [bold]{experiment}[/bold] "
        f"(runs {', '.join(str(r.id) for r in submitted.values())}); following it"
    )
    runs = _follow(client, submitted, console, timeout_seconds)
    accuracy = _print_summary(client, runs, console)
    succeeded = all(r.phase == Phase.Succeeded for r in runs.values())
    return DemoOutcome(succeeded, runs, accuracy)


def _submit(
    client: CrucibleClient, project: str, experiment: str, size: LoopSize
) -> tuple[str, dict[str, RunPublic]]:
    """Submit the loop under `experiment`, or `experiment-2`, `-3`... when runs of those names
    already exist with other specs (a demo of an older version). The same specs again return
    the runs already there, so a finished demo is shown again rather than rerun."""
    # The loop runs the reference workloads: their code is the installed crucible package.
    code = provenance.capture(provenance.reference_code_directory()).model_dump(mode="json")
    for attempt in range(1, 100):
        name = experiment if attempt == 1 else f"{experiment}-{attempt}"
        submitted = {}
        try:
            for stage, manifest in zip(run_names(name), loop_manifests(name, size), strict=True):
                submitted[stage] = client.submit_run(
                    RunSubmit.model_validate(
                        {"project": project, "manifest": manifest, "code": code}
                    )
                )
        except ApiError as exc:
            if exc.status != 409:
                raise
            continue
        return name, submitted
    raise CrucibleError(f"experiments {experiment} to {experiment}-99 are all taken")


def _follow(
    client: CrucibleClient,
    submitted: dict[str, RunPublic],
    console: Console,
    timeout_seconds: float,
) -> dict[str, RunPublic]:
    experiment_id = next(iter(submitted.values())).experiment_id
    deadline = time.monotonic() + timeout_seconds
    bars: dict[int, TaskID] = {}
    runs = dict(submitted)
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    ) as progress:
        while True:
            runs = {stage: client.get_run(run.id) for stage, run in runs.items()}
            evals = client.list_runs(
                experiment_id=experiment_id, kind=RunKind.eval.value, limit=1000
            ).items
            for run in [*runs.values(), *sorted(evals, key=lambda r: r.id)]:
                total = _total_steps(run)
                done = (run.latest_step or 0) if total > 1 else int(run.phase == Phase.Succeeded)
                if run.phase == Phase.Succeeded:
                    done = total
                label = f"{run.name:<28} {run.phase:<16}"
                if run.id not in bars:
                    bars[run.id] = progress.add_task(label, total=total)
                progress.update(bars[run.id], description=label, completed=done)
            if _finished(client, runs, evals):
                return runs
            if time.monotonic() > deadline:
                console.print(f"[red]the demo did not finish in {timeout_seconds:.0f} s[/red]")
                return runs
            time.sleep(1.0)


def _total_steps(run: RunPublic) -> int:
    if run.kind != RunKind.train:
        return 1
    train = run.manifest.get("spec", {}).get("config", {}).get("train", {})
    return int(train.get("steps", 1))


def _finished(client: CrucibleClient, runs: dict[str, RunPublic], evals: list[RunPublic]) -> bool:
    """Every loop run ended, and every checkpoint's eval has been scheduled and ended."""
    if not all(r.phase.is_terminal for r in runs.values()):
        return False
    if any(r.phase != Phase.Succeeded for r in runs.values()):
        return True  # a failed stage: what depends on it fails too, nothing more will run
    checkpoints = sum(
        len(client.list_checkpoints(r.id).items) for r in runs.values() if r.kind == RunKind.train
    )
    return len(evals) >= checkpoints and all(e.phase.is_terminal for e in evals)


def _print_summary(
    client: CrucibleClient, runs: dict[str, RunPublic], console: Console
) -> dict[str, float]:
    table = Table(title="held-out accuracy per checkpoint")
    for column in ("run", "step", "accuracy", "loss"):
        table.add_column(column, justify="left" if column == "run" else "right")
    accuracy: dict[str, float] = {}
    for stage in ("sft", "rl"):
        results: list[EvalResultPublic] = sorted(
            client.list_run_evals(runs[stage].id), key=lambda e: e.step
        )
        for result in results:
            table.add_row(
                runs[stage].name,
                str(result.step),
                f"{result.scores.get('accuracy', float('nan')):.1%}",
                f"{result.scores.get('loss', float('nan')):.3f}",
            )
        if results:
            if stage == "sft":
                accuracy["initial"] = results[0].scores.get("accuracy", 0.0)
            accuracy[stage] = results[-1].scores.get("accuracy", 0.0)
    console.print(table)
    if {"initial", "sft", "rl"} <= accuracy.keys():
        console.print(
            f"held-out accuracy: initial {accuracy['initial']:.1%} -> after SFT "
            f"{accuracy['sft']:.1%} -> after RL {accuracy['rl']:.1%}"
        )
    final = client.latest_checkpoint(runs["rl"].id)
    if final is not None:
        _print_lineage(client, final.id, console)
    for run in runs.values():
        if run.phase != Phase.Succeeded:
            console.print(f"[red]{run.name}: {run.phase} ({run.reason}) {run.message}[/red]")
    return accuracy


def _print_lineage(client: CrucibleClient, checkpoint_id: int, console: Console) -> None:
    graph = client.lineage("checkpoint", checkpoint_id, "upstream", depth=10)
    labels = {(n["type"], n["id"]): n["label"] for n in graph["nodes"]}
    table = Table(title=f"lineage of the final checkpoint ({checkpoint_id})")
    for column in ("from", "relation", "to"):
        table.add_column(column)
    for edge in graph["edges"]:
        source, target = edge["source"], edge["target"]
        table.add_row(
            f"{source['type']} {labels.get((source['type'], source['id']), '')}",
            edge["relation"],
            f"{target['type']} {labels.get((target['type'], target['id']), '')}",
        )
    console.print(table)
