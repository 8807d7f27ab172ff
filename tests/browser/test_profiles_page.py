"""A run's profiles in Debian's Chromium against a real `crucible server`: the run page's
profiles section (phase split, top operators) and the trace's timeline, for a profile that
the trainer's own StepProfiler recorded around a few steps of a small model in this process
and wrote where a local run's trainer writes it.

Needs what tests/browser/test_dashboard.py needs, and torch.
"""

import gzip
import json
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.core.run_profiles import profile_dir
from tests.browser.test_dashboard import (
    CHROMIUM,
    _call,
    _prepare,
    _run_e2e,
    _submit_training_run,
    _vite_preview,
)
from tests.servers import local_server

pytestmark = [pytest.mark.browser, pytest.mark.slow]

FIRST_STEP, STEPS = 3, 2
PROFILE = f"rank0-steps{FIRST_STEP}-{FIRST_STEP + STEPS - 1}"
SEARCH = "aten::addmm"


def _record_profile(directory: Path) -> None:
    """Four steps of a small model, the trainer's way: its phase annotations around data,
    forward and backward, and the optimizer, and StepProfiler recording steps 3 and 4 (after
    the first steps' one-off costs, as a real run's profile_from_step would be)."""
    import torch
    from torch.profiler import record_function

    from crucible.training.profile_summary import (
        DATA_ANNOTATION,
        FORWARD_BACKWARD_ANNOTATION,
        OPTIMIZER_ANNOTATION,
    )
    from crucible.training.profiling import StepProfiler

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.LayerNorm(64), torch.nn.Linear(64, 1)
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    profiler = StepProfiler(directory, from_step=FIRST_STEP, steps=STEPS, rank=0)
    for step in range(1, FIRST_STEP + STEPS):
        with profiler.around(step):
            with record_function(DATA_ANNOTATION):
                inputs, targets = torch.randn(16, 32), torch.randn(16, 1)
            with record_function(FORWARD_BACKWARD_ANNOTATION):
                torch.nn.functional.mse_loss(model(inputs), targets).backward()
            with record_function(OPTIMIZER_ANNOTATION):
                optimizer.step()
                optimizer.zero_grad()


def _seed(server_url: str, token: str, home: Path) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server_url, headers=headers, timeout=30) as client:
        profiled = _submit_training_run(client, "profiled", experiment="profiling")
        plain = _submit_training_run(client, "unprofiled", experiment="profiling")
        manifest = {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": "TrainingRun",
            "metadata": {"name": "on-k8s"},
            "spec": {"experiment": "profiling"},
        }
        body = {"project": "default", "manifest": manifest, "backend": "kubernetes"}
        kubernetes = _call(client, "POST", "/runs", json=body)["id"]
        _record_profile(profile_dir(home, profiled))
        listed = _call(client, "GET", f"/runs/{profiled}/profiles")
        elsewhere = _call(client, "GET", f"/runs/{kubernetes}/profiles")
    return {
        "profiled": profiled,
        "plain": plain,
        "kubernetes": kubernetes,
        "listed": listed,
        "k8s_message": elsewhere["message"],
    }


def _us(value: float) -> str:
    """A time as the dashboard writes it (lib/traceTimeline.ts formatMicros): JavaScript's
    `toPrecision(3)`, which rounds the double's exact value half up, unlike Python's format."""
    for scale, unit in ((1e6, "s"), (1e3, "ms"), (1, "µs"), (1e-3, "ns")):
        if abs(value) >= scale:
            exact = Decimal(value / scale)
            rounded = exact.quantize(Decimal(1).scaleb(exact.adjusted() - 2), ROUND_HALF_UP)
            return f"{float(rounded):g} {unit}"
    return "0 µs"


def _percent(share: float) -> str:
    """A share as format.ts `percent` writes it: JavaScript's `toFixed(1)`, half up."""
    return f"{Decimal(share * 100).quantize(Decimal('0.1'), ROUND_HALF_UP)}%"


@pytest.mark.timeout(600)
def test_the_run_page_summarises_a_profile_and_its_trace_opens_as_a_timeline(
    tmp_path: Path,
) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        seeded = _seed(server.url, server.token, server.home)
        trace_file = profile_dir(server.home, seeded["profiled"]) / f"{PROFILE}.trace.json.gz"
        with gzip.open(trace_file, "rt") as packed:
            trace = json.load(packed)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "TOKEN": server.token,
                "RUN_ID": str(seeded["profiled"]),
                "PLAIN_RUN_ID": str(seeded["plain"]),
                "K8S_RUN_ID": str(seeded["kubernetes"]),
                "PROFILE": PROFILE,
                "SEARCH": SEARCH,
                "CHROMIUM": CHROMIUM,
                "SCREENSHOT_DIR": str(screenshots),
            }
            browser = _run_e2e("profiles.e2e.mjs", env)
    assert browser.returncode == 0, browser.stdout + browser.stderr
    seen = json.loads(browser.stdout.strip().splitlines()[-1])
    assert seen["problems"] == []

    # The API's summary of the trace StepProfiler wrote, which the section must show.
    (profile,) = seeded["listed"]["profiles"]
    summary = profile["summary"]
    assert profile["name"] == PROFILE and summary["timeline"] == "cpu" and summary["annotated"]
    assert len(summary["top_operators"]) > 10

    # The run page: one profile, titled by its rank and steps, linking to its trace.
    assert seen["profiles"] == [PROFILE]
    assert seen["title"].startswith(f"Rank 0 · steps {FIRST_STEP}\u2013{FIRST_STEP + STEPS - 1}")
    assert seen["traceHref"] == f"#/runs/{seeded['profiled']}/profiles/{PROFILE}"
    # The bar: a segment per phase with time, as wide as its share of the wall time.
    shares = {p["phase"]: p["share"] for p in summary["phases"]}
    bar = {segment["phase"]: segment["width"] for segment in seen["segments"]}
    assert set(bar) == {phase for phase, share in shares.items() if share > 0}
    assert {"compute", "optimizer", "data_loading"} <= set(bar)
    for phase, width in bar.items():
        assert width == pytest.approx(shares[phase] * seen["barWidth"], abs=1.5), phase
    # The table beside it: all five phases, their times and shares as the API gives them.
    assert seen["phaseRows"] == [
        [p["phase"], _us(p["total_us"]), _percent(p["share"])] for p in summary["phases"]
    ]
    # The top operators: ten, then all of them, with calls, time and share.
    operators = summary["top_operators"]
    assert seen["operatorRows"] == [
        [o["name"], f"{o['calls']:,}", _us(o["total_us"]), _percent(o["share"])]
        for o in operators[:10]
    ]
    assert seen["showAll"] == f"Show all {len(operators)}"
    assert seen["allOperators"] == [o["name"] for o in operators]
    # A run without profiles has no section; a Kubernetes run's says where its are.
    assert seen["plainProfilesHeadings"] == 0
    assert seen["k8sMessage"] == seeded["k8s_message"]
    assert "Kubernetes" in seen["k8sMessage"]

    # The timeline: a lane per thread, named by the trace's metadata; ink on the canvas.
    complete = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"].strip()
        for e in trace["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    assert seen["traceHash"] == seen["traceHref"] and seen["traceTitle"] == f"Trace of {PROFILE}"
    assert len(seen["lanes"]) == len({(e["pid"], e["tid"]) for e in complete})
    for name in threads.values():
        assert any(lane.endswith(f"· {name}") for lane in seen["lanes"]), (name, seen["lanes"])
    assert seen["eventsNote"].startswith(f"{len(complete):,} events")
    assert seen["ink"] > 2000, seen["ink"]
    # Hovering and clicking an event name it; the details are one of the trace's events.
    assert seen["hover"], "no tooltip over an inked pixel"
    details = seen["details"]
    assert details["name"] and details["name"] in seen["hover"]
    assert any(
        e["name"] == details["name"]
        and e.get("cat", "") == details["category"]
        and e["dur"] == pytest.approx(details["durationUs"])
        for e in complete
    ), details
    assert details["duration"] == _us(details["durationUs"])
    # Zoom: the buttons halve the window about its centre, a drag selects a range, and
    # "Show all" goes back to the whole trace.
    full = seen["windows"]["full"]
    wall = max(e["ts"] + e["dur"] for e in complete) - min(e["ts"] for e in complete)
    assert full[0] == 0 and full[1] == pytest.approx(wall)
    zoomed = seen["windows"]["zoomedIn"]
    assert zoomed[1] - zoomed[0] == pytest.approx((full[1] - full[0]) / 2)
    dragged = seen["windows"]["dragged"]
    assert dragged[0] > zoomed[0] and dragged[1] < zoomed[1]
    assert seen["windows"]["reset"] == full
    assert seen["axisChanged"], "the time axis kept its labels through a zoom"
    # Search: the count of events whose name holds the text, and the canvas redrawn.
    expected = sum(SEARCH.lower() in e["name"].lower() for e in complete)
    assert expected > 0
    assert seen["searchStatus"] == f"{expected} events match"
    assert seen["searchRedrew"]
    assert seen["noMatchStatus"] == "0 events match"
    for picture in ("run-profile.png", "trace.png"):
        assert (screenshots / picture).stat().st_size > 10_000, picture
