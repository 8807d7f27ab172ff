"""The chart of cluster_day.py's results: runs waiting and running, GPUs allocated, the
latencies, the API probe's latency, CPU per process and the database over the day.

    .venv/bin/python -m benchmarks.cluster_day_plot RESULTS.json OUT.png
"""

import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt


def plot(results: Path, png: Path) -> None:
    document = json.loads(results.read_text())
    r = document["results"]
    config = document["config"]
    series = r["series"]
    t = [s["t"] / 60 for s in series]
    figure, axes = plt.subplots(5, 1, figsize=(11, 17), sharex=True, layout="constrained")

    ax = axes[0]
    ax.plot(t, [s["runs_running"] for s in series], label="runs running (all pods)")
    ax.plot(t, [s["runs_waiting"] for s in series], label="runs waiting for their pods")
    ax.plot(t, [s["create_backlog"] for s in series], label="creates not yet accepted")
    ax.plot(t, [s["nodes_not_ready"] for s in series], label="nodes NotReady", linestyle=":")
    ax.plot(
        t,
        [s["rate_per_min"] for s in series],
        color="black",
        linestyle="--",
        label="arrivals per minute (Poisson rate)",
    )
    ax.set_ylabel("count")
    twin = ax.twinx()
    twin.plot(t, [s["gpus_allocated"] for s in series], color="grey", alpha=0.5)
    twin.set_ylabel("GPUs allocated (grey)")
    ax.legend(loc="upper left", fontsize=8)

    ax = axes[1]
    lat = r["latencies"]
    # (series, index of the seconds in each sample, marker, size, label)
    for name, at, marker, size, label in (
        ("scheduling", 2, "o", 4, "scheduling: create -> all pods Running"),
        ("recovery", 1, "x", 8, "recovery: node deleted -> next attempt all Running"),
        ("eval_trigger", 1, "^", 4, "eval trigger: checkpoint -> EvalJob"),
    ):
        samples = lat[name]
        ax.scatter(
            [x[0] / 60 for x in samples],
            [x[at] for x in samples],
            s=size,
            marker=marker,
            label=label,
        )
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log)")
    ax.legend(loc="upper left", fontsize=8)

    ax = axes[2]
    routes = sorted({x[1] for x in lat["api"]})
    for route in routes:
        buckets: dict[int, list[float]] = {}
        for x in lat["api"]:
            if x[1] == route:
                buckets.setdefault(int(x[0] // 30), []).append(x[2])
        keys = sorted(buckets)
        middle = [(k + 0.5) / 2 for k in keys]
        line = ax.plot(
            middle,
            [sorted(buckets[k])[len(buckets[k]) // 2] for k in keys],
            label=f"{route}: median",
        )
        ax.plot(
            middle,
            [max(buckets[k]) for k in keys],
            linestyle=":",
            color=line[0].get_color(),
            label=f"{route}: max",
        )
    ax.set_yscale("log")
    ax.set_ylabel("API probe latency per 30 s, s (log)")
    ax.legend(loc="upper left", fontsize=8)

    ax = axes[3]
    groups = [g for g in r["cpu_cores_mean"] if not g.startswith("machine")]
    rows = [s for s in series if "cpu_cores" in s]
    tc = [s["t"] / 60 for s in rows]
    ax.stackplot(tc, *[[s["cpu_cores"].get(g, 0) for s in rows] for g in groups], labels=groups)
    ax.plot(
        tc,
        [s["cpu_cores"].get("machine (all processes)", 0) for s in rows],
        color="black",
        linewidth=0.8,
        label="machine (all processes)",
    )
    ax.axhline(document["machine"]["cores"], color="red", linestyle="--", linewidth=0.8)
    ax.set_ylabel("CPU cores used")
    ax.legend(loc="upper left", fontsize=7, ncol=3)

    ax = axes[4]
    ax.plot(t, [s.get("db_bytes", 0) / 2**20 for s in series], label="database size (MiB)")
    ax.set_ylabel("MiB")
    twin = ax.twinx()
    for key, color, label in (
        ("celery_queue", "tab:red", "Celery queue"),
        ("outbox_backlog", "tab:purple", "outbox not handled"),
        ("workload_calls_in_flight", "tab:green", "workload calls in flight"),
    ):
        twin.plot(t, [s.get(key, 0) for s in series], color=color, label=label)
    twin.set_ylabel("backlog")
    ax.legend(loc="upper left", fontsize=8)
    twin.legend(loc="upper right", fontsize=8)
    ax.set_xlabel("minutes")

    axes[0].set_title(
        f"A compressed day: {config['nodes']} kwok nodes x 8 GPUs, arrivals "
        f"{config['rate']:g} -> {config['rate_end']:g}/min, {config['preempt_share']:.0%} of "
        f"nodes reclaimed every {config['preempt_every']:g} s; {document['machine']['cores']} "
        f"shared cores ({document['date'][:16].replace('T', ' ')} UTC)",
        fontsize=10,
    )
    figure.savefig(png, dpi=100)


if __name__ == "__main__":
    plot(Path(sys.argv[1]), Path(sys.argv[2]))
