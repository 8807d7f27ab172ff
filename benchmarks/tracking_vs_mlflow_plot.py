"""The chart of tracking_vs_mlflow.py's results: how many times faster Crucible is, per measure.

Run by tracking_vs_mlflow.py with MLflow's venv, which has matplotlib:

    .bench/mlflow-venv/bin/python benchmarks/tracking_vs_mlflow_plot.py RESULTS.json OUT.png
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def main(results: Path, png: Path) -> None:
    document = json.loads(results.read_text())
    labels = document["labels"]
    keys = list(document["ratio"])[::-1]
    ratios = [document["ratio"][k] for k in keys]
    figure, axes = plt.subplots(figsize=(10, 5.5), layout="constrained")
    goals = document["goals"]
    colours = [
        "tab:red" if r < 1 else "tab:orange" if k in goals and not goals[k]["met"] else "tab:green"
        for k, r in zip(keys, ratios, strict=True)
    ]
    axes.barh([labels[k] for k in keys], ratios, color=colours)
    axes.set_xscale("log")
    axes.axvline(1, color="black", linewidth=0.8)
    for goal, what in (
        (10, "history goal 10x"),
        (20, "ingestion goal 20x"),
        (50, "SDK ingestion goal 50x"),
    ):
        axes.axvline(goal, color="grey", linestyle="--", linewidth=0.8)
        axes.text(goal, -0.6, what, rotation=90, va="bottom", ha="right", fontsize=8)
    for row, key in enumerate(keys):
        ours = document["results"][key]
        theirs = document["baseline"][key if key in document["baseline"] else "ingest_1000"]
        unit = ours["unit"]
        axes.text(
            ratios[row] * 1.05,
            row,
            f"{ratios[row]:g}x  ({ours['median']:,} vs {theirs['median']:,} {unit})",
            va="center",
            fontsize=8,
        )
    axes.set_xlim(min(0.5, min(ratios) / 2), max(ratios) * 20)
    machine = document["machine"]
    axes.set_xlabel(
        "times faster than MLflow (median against median; log scale); "
        "orange: a goal missed (issue 9; issue 25 for ingestion)"
    )
    axes.set_title(
        f"Crucible vs MLflow {machine['mlflow']}, same Postgres {machine['postgres'].split()[0]}, "
        f"{document['config']['clients']} clients, {machine['cores']} shared cores "
        f"({document['date'][:16].replace('T', ' ')} UTC)",
        fontsize=10,
    )
    figure.savefig(png, dpi=120)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
