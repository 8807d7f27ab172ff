"""The operator SIGKILLed again and again while it reconciles 200 TrainingRuns (issue 11,
fault 2; the test suite's version kills it once among 50): every run converges to Running
with exactly one pod of attempt 1, no pod is left without its owner, and the control plane
holds one run with one attempt per resource.

    eval "$(scripts/services up)"
    .venv/bin/python -m benchmarks.operator_chaos [--runs 200] [--kills 3]

The first kill lands at the first pod, each next one as soon as the restarted operator has
moved something on (another pod, another run Running): each interrupts a different mix of
registration, pod creation, gate lifting and status writes.
Result: benchmarks/results/operator_chaos.json.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

from benchmarks.operator_bench import TOLERATE_GPU, bench_stack, write
from tests.k8s import cluster_helpers as h
from tests.k8s.operator_stack import Stack


def _listed(kind: str, namespace: str) -> list[dict[str, Any]]:
    """The objects of a kind; on two loaded cores the API server sometimes answers a list
    with a timeout, which is asked again rather than ending the run."""
    for _ in range(10):
        try:
            items: list[dict[str, Any]] = h.kubectl_json(
                "get", kind, namespace=namespace, timeout=120
            )["items"]
            return items
        except h.KubectlError as exc:
            print(f"kubectl get {kind}: {exc}; asking again", file=sys.stderr)
            time.sleep(2)
    raise RuntimeError(f"the API server did not list {kind} in 10 tries")


def phases(namespace: str) -> list[str | None]:
    return [(r.get("status") or {}).get("phase") for r in _listed("tr", namespace)]


def pods(namespace: str) -> list[dict[str, Any]]:
    return _listed("pods", namespace)


def chaos(stack: Stack, namespace: str, runs: int, kills: int) -> dict[str, Any]:
    resources = [
        {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": f"r{i}"},
            "spec": {
                "experiment": "chaos",
                "image": "registry.invalid/bench:1",
                "scheduling": {"tolerations": TOLERATE_GPU},
            },
        }
        for i in range(runs)
    ]
    started = time.monotonic()
    h.apply(*resources, namespace=namespace)
    applied = time.monotonic() - started
    killed_at: list[dict[str, Any]] = []
    for kill in range(kills):
        # The first kill at the first pod; each next one as soon as the restarted operator
        # has visibly moved something on (a pod created or a run Running): mid-work again.
        if kill == 0:
            stack.wait_for("the first pod", lambda: len(pods(namespace)) >= 1, seconds=900)
        else:
            before = killed_at[-1]
            stack.wait_for(
                "the restarted operator to make progress",
                lambda b=before: (
                    len(pods(namespace)) > b["pods"]
                    or phases(namespace).count("Running") > b["running"]
                ),
                seconds=900,
            )
        running = phases(namespace).count("Running")
        stack.operator.kill()  # SIGKILL
        killed_at.append(
            {
                "seconds": round(time.monotonic() - started, 1),
                "running": running,
                "pods": len(pods(namespace)),
            }
        )
        stack.operator.start()
    stack.wait_for(
        f"{runs} runs Running",
        lambda: phases(namespace).count("Running") == runs,
        seconds=1800,
    )
    converged = time.monotonic() - started
    listed = pods(namespace)
    names = sorted(p["metadata"]["name"] for p in listed)
    expected = sorted(f"r{i}-a1-0" for i in range(runs))
    owners = {(p["metadata"].get("ownerReferences") or [{}])[0].get("name") for p in listed}
    api_runs = stack.get("/runs", project=namespace, limit=1000)["items"]
    return {
        "resources_applied_seconds": round(applied, 1),
        "converged_seconds": round(converged, 1),
        "kills": killed_at,
        "runs_running": phases(namespace).count("Running"),
        "pods": len(listed),
        "duplicate_pods": len(names) - len(set(names)),
        "unexpected_pods": sorted(set(names) - set(expected)),
        "missing_pods": sorted(set(expected) - set(names)),
        "orphaned_pods": sum(1 for p in listed if not p["metadata"].get("ownerReferences")),
        "owners_match": owners == {f"r{i}" for i in range(runs)},
        "api_runs": len(api_runs),
        "api_attempt_counts": sorted({r["attempt_count"] for r in api_runs}),
        "all_held": names == expected
        and owners == {f"r{i}" for i in range(runs)}
        and len(api_runs) == runs
        and {r["attempt_count"] for r in api_runs} == {1},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--kills", type=int, default=3)
    args = parser.parse_args()
    load_before = [round(x, 2) for x in os.getloadavg()]
    with bench_stack("chaos", nodes=4) as (stack, namespace):
        results = chaos(stack, namespace, args.runs, args.kills)
        results["load_average_before"] = load_before
        config = {
            "runs": args.runs,
            "kills": args.kills,
            "nodes": 4,
            "stack": "crucible server (Postgres) + crucible worker (Redis) + operator",
        }
        write("operator_chaos", config, results)
    if not results["all_held"]:
        sys.exit("the operator did not converge cleanly: see the results above")


if __name__ == "__main__":
    main()
