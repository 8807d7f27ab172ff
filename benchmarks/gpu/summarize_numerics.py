"""Issue 28's precision study from `research_bench.py --parts numerics` results: a table of
each precision's final loss, its gap to bf16's and its tokens/s against bf16's, and a plot
of the loss curves (with matplotlib, where it is installed).

    python3 benchmarks/gpu/summarize_numerics.py RESEARCH_JSON... [--plot numerics_loss.png]

Prints a table a model as Markdown, for docs/numerics.md, and plots each model's curves
(numerics_loss_<model>.png). Emulated precisions (mxfp8, nvfp4) get
no speed column: their tokens/s measure the emulation, not the format.
"""

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

# precision.EMULATED, repeated so that the script needs no torch (a test keeps them equal).
EMULATED = ("mxfp8", "nvfp4")


def table(runs: dict[str, dict[str, Any]]) -> str:
    """Markdown rows, bf16 first, each with its gap and speed against bf16's. A run that
    did not reach its last step is compared over the last 20 steps it logged instead."""
    if "bf16" not in runs:
        raise SystemExit("the results hold no bf16 run to compare with")
    bf16 = runs["bf16"]
    lines = [
        "| precision | final loss | vs bf16 | tokens/s | vs bf16 |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, run in sorted(runs.items(), key=lambda item: item[0] != "bf16"):
        rate = run.get("tokens_per_s")
        emulated = name.split(" ")[0] in EMULATED
        speed = "emulated" if emulated or rate is None else f"{rate:,.0f}"
        ratio = (
            "-"
            if emulated or rate is None or not bf16.get("tokens_per_s")
            else f"{rate / bf16['tokens_per_s']:.2f}x"
        )
        if run.get("final_loss") is not None:
            gap = run["final_loss"] / bf16["final_loss"] - 1
            lines.append(f"| {name} | {run['final_loss']:.4f} | {gap:+.2%} | {speed} | {ratio} |")
            continue
        logged = run.get("steps_logged", 0)
        if logged < LAST:
            lines.append(f"| {name} | did not finish: {logged} steps, {run.get('error')} | | | |")
            continue
        ours, theirs = curve(run), curve(bf16)
        last = sorted(ours)[-LAST:]
        partial = statistics.fmean(ours[s] for s in last)
        gap = partial / statistics.fmean(theirs[s] for s in last) - 1
        lines.append(
            f"| {name} | {partial:.4f} at steps {last[0]}-{last[-1]} (stopped at {logged}) "
            f"| {gap:+.2%} | {speed} | {ratio} |"
        )
    return "\n".join(lines)


LAST = 20
"""Steps whose mean loss is a run's final loss (research_bench.py's)."""


def curve(run: dict[str, Any]) -> dict[int, float]:
    """A run's loss by step (the results file keys steps as strings)."""
    return {int(step): loss for step, loss in run["loss"].items()}


def plot(runs: dict[str, dict[str, Any]], path: Path) -> None:
    """The loss curves, and beneath them each precision's gap to bf16's loss at the same
    step, averaged over a sliding window: the curves alone overlap where the gaps are
    fractions of a percent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (losses, gaps) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    bf16 = curve(runs["bf16"])
    for name, run in runs.items():
        loss = curve(run)
        if not loss:
            continue
        (line,) = losses.plot(list(loss), list(loss.values()), label=name, linewidth=1)
        if name != "bf16":
            steps = [s for s in loss if s in bf16]
            gap = [100 * (loss[s] / bf16[s] - 1) for s in steps]
            gaps.plot(
                steps[GAP_WINDOW - 1 :], moving_mean(gap), color=line.get_color(), linewidth=1
            )
    losses.set_ylabel("training loss")
    losses.set_yscale("log")
    losses.legend()
    gaps.axhline(0, color="grey", linewidth=0.5)
    gaps.set_ylabel(f"vs bf16, % ({GAP_WINDOW}-step mean)")
    gaps.set_xlabel("step")
    figure.tight_layout()
    figure.savefig(path, dpi=120)


GAP_WINDOW = 20


def moving_mean(values: list[float]) -> list[float]:
    return [
        sum(values[i - GAP_WINDOW : i]) / GAP_WINDOW for i in range(GAP_WINDOW, len(values) + 1)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("results", type=Path, nargs="+", help="research.json files")
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args()
    studies = [json.loads(path.read_text())["numerics"] for path in args.results]
    print(f"{studies[0]['steps']} steps a run, seed {studies[0].get('seed', 0)}")
    for model, runs in merged(studies).items():
        print(f"\n{model}\n\n{table(runs)}")
        if args.plot is not None:
            plot(runs, args.plot.with_stem(f"{args.plot.stem}_{model}"))


def merged(studies: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each model's runs over several results files of the same study (same steps); a
    precision a file before already ran is named after how the later one ran it, e.g.
    `nvfp4 (eager)`, and a later run of it the same way replaces the earlier."""
    if len({study["steps"] for study in studies}) > 1:
        raise SystemExit("the results files ran different numbers of steps")
    # Another seed is another initialisation and data order: its runs are compared with its
    # own bf16, in a table of their own, and the two tables' gaps give the spread.
    if len({study.get("seed", 0) for study in studies}) > 1:
        raise SystemExit("the results files ran different seeds: summarize each seed alone")
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for study in studies:
        for model, runs in models(study).items():
            into = found.setdefault(model, {})
            for name, run in runs.items():
                into[f"{name} ({how_run(study, name)})" if name in into else name] = run
    return found


def how_run(study: dict[str, Any], precision: str) -> str:
    if not study.get("compiled", True):
        return "eager"
    if precision in EMULATED and study.get("emulated_compile") == "roundings":
        return "compiled roundings"
    return "compiled"


def models(study: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """Each model's runs by precision; results from before the study had models hold the
    GPT's runs alone."""
    if "models" in study:
        return {model: found["runs"] for model, found in study["models"].items()}
    return {"gpt": study["runs"]}


if __name__ == "__main__":
    main()
