"""A low-precision run's Numerics section in Debian's Chromium against a real `crucible
server`: an emulated (mxfp8) run's per-layer saturated and underflow shares and an fp8 run's
amax and scales, as the workloads log them (docs/workloads.md, `precision`), summed up in one
section instead of a chart per layer.

Needs what tests/browser/test_dashboard.py needs.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

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

LAST_STEP = 100
STATS_EVERY = 10
# Module order is blocks.0, blocks.1, blocks.10; the table orders by saturation instead.
LAYERS = ["blocks.0.attn.qkv", "blocks.1.mlp.c_fc", "blocks.10.mlp.c_proj"]
OPERANDS = ["input", "weight", "grad_output"]
# Latest saturated shares; every other operand saturates nothing. blocks.1's grad_output is
# past the dashboard's 1% threshold (SATURATION_WARNING in web/src/lib/numerics.ts).
SATURATED = {
    ("blocks.1.mlp.c_fc", "grad_output"): 0.032,
    ("blocks.10.mlp.c_proj", "input"): 0.004,
    ("blocks.0.attn.qkv", "weight"): 0.0005,
}
UNDERFLOW = {"input": 0.1, "weight": 0.02, "grad_output": 0.25}
# fp8: each layer's input amax at the first and the last logged step. blocks.1's inputs grow
# fourfold (its scale falls to a quarter), blocks.10's halve (its scale doubles).
FP8_INPUT_AMAX = {
    "blocks.0.attn.qkv": (2.0, 2.0),
    "blocks.1.mlp.c_fc": (1.0, 4.0),
    "blocks.10.mlp.c_proj": (4.0, 2.0),
}
E4M3_MAX = 448.0


def _ramp(last: float, step: int) -> float:
    """Zero at step 0, `last` (exactly) at LAST_STEP."""
    return last if step == LAST_STEP else last * step / LAST_STEP


def _emulated_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"step": step, "values": {"loss": 4.0 - step / 50}} for step in range(1, LAST_STEP + 1)
    ]
    for step in range(STATS_EVERY, LAST_STEP + 1, STATS_EVERY):
        values = {}
        for layer in LAYERS:
            for operand in OPERANDS:
                saturated = _ramp(SATURATED.get((layer, operand), 0.0), step)
                values[f"numerics/{layer}/{operand}_saturated"] = saturated
                values[f"numerics/{layer}/{operand}_underflow"] = UNDERFLOW[operand]
        rows.append({"step": step, "values": values})
    return rows


def _fp8_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"step": step, "values": {"loss": 3.0 - step / 100}} for step in range(1, LAST_STEP + 1)
    ]
    for step in range(STATS_EVERY, LAST_STEP + 1, STATS_EVERY):
        values = {}
        for layer, (first, last) in FP8_INPUT_AMAX.items():
            amax = first + (last - first) * (step - STATS_EVERY) / (LAST_STEP - STATS_EVERY)
            values |= {
                f"fp8/{layer}/input_amax": amax,
                f"fp8/{layer}/input_scale": E4M3_MAX / amax,
                f"fp8/{layer}/weight_amax": 0.5,
                f"fp8/{layer}/weight_scale": E4M3_MAX / 0.5,
                f"fp8/{layer}/grad_amax": 0.25,
            }
        rows.append({"step": step, "values": values})
    return rows


def _seed(server_url: str, token: str) -> dict[str, int]:
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=server_url, headers=headers, timeout=30) as client:
        runs = {
            "emulated": _submit_training_run(client, "mxfp8-numerics", experiment="precision"),
            "fp8": _submit_training_run(client, "fp8-scales", experiment="precision"),
            "plain": _submit_training_run(client, "bf16", experiment="precision"),
        }
        _call(client, "POST", f"/runs/{runs['emulated']}/metrics", json={"rows": _emulated_rows()})
        _call(client, "POST", f"/runs/{runs['fp8']}/metrics", json={"rows": _fp8_rows()})
        plain = [{"step": s, "values": {"loss": 1 / s}} for s in range(1, 21)]
        _call(client, "POST", f"/runs/{runs['plain']}/metrics", json={"rows": plain})
    return runs


def _share(share: float) -> str:
    """A share as lib/numerics.ts `sharePercent` writes it: two significant digits."""
    return "0%" if share == 0 else f"{float(f'{share * 100:.2g}'):g}%"


def _number(value: float) -> str:
    """A value as format.ts `score` writes it: four significant digits."""
    return f"{float(f'{value:.4g}'):g}"


@pytest.mark.timeout(600)
def test_a_low_precision_run_shows_its_numerics_in_one_section(tmp_path: Path) -> None:
    dist, screenshots = _prepare(tmp_path)
    with local_server(tmp_path / "server") as server:
        runs = _seed(server.url, server.token)
        with _vite_preview(dist, server.url, tmp_path / "vite.log") as base_url:
            env = {
                "BASE_URL": base_url,
                "TOKEN": server.token,
                "EMULATED_RUN_ID": str(runs["emulated"]),
                "FP8_RUN_ID": str(runs["fp8"]),
                "PLAIN_RUN_ID": str(runs["plain"]),
                "CHROMIUM": CHROMIUM,
                "SCREENSHOT_DIR": str(screenshots),
            }
            browser = _run_e2e("numerics.e2e.mjs", env)
    assert browser.returncode == 0, browser.stdout + browser.stderr
    seen = json.loads(browser.stdout.strip().splitlines()[-1])
    assert seen["problems"] == []

    # The emulated run: the one operand past 1% named at the top, and only it.
    assert seen["warnings"] == ["layer blocks.1.mlp.c_fc saturates 3.2% of its grad_output"]
    assert seen["warningHeading"].startswith("An operand saturates past 1%")
    # The table: a column pair per operand, the worst saturation first.
    assert seen["header"][0] == ["Layer", *OPERANDS]
    assert seen["header"][1] == ["sat.", "under."] * len(OPERANDS)
    by_saturation = ["blocks.1.mlp.c_fc", "blocks.10.mlp.c_proj", "blocks.0.attn.qkv"]
    assert seen["shareRows"] == [
        [
            layer,
            *[
                share
                for operand in OPERANDS
                for share in (
                    _share(SATURATED.get((layer, operand), 0.0)),
                    _share(UNDERFLOW[operand]),
                )
            ],
        ]
        for layer in by_saturation
    ]
    assert seen["overCells"] == ["3.2%"]
    # The worst shares and the loss are drawn, the worst named by its layer and operand.
    assert all(pixels > 300 for pixels in seen["emulatedInk"].values()), seen["emulatedInk"]
    assert "latest 3.2% in blocks.1.mlp.c_fc grad_output" in seen["worstCaption"]
    # Right after the metrics; no chart per layer among them, and their request named only
    # the ordinary keys.
    order = seen["sectionOrder"]
    assert order[order.index("Metrics") + 1] == "Numerics"
    assert seen["emulatedPerLayerCharts"] == 0
    assert seen["emulatedChartRequests"] and set(seen["emulatedChartRequests"]) == {"loss"}
    assert seen["tabbedToTable"], "Tab never reached the shares table"

    # The fp8 run: amax and scale per operand (the gradient has no scale), in module order.
    assert seen["fp8Header"][0] == ["Layer", "input", "weight", "grad"]
    assert seen["fp8Header"][1] == ["amax", "scale", "amax", "scale", "amax"]
    assert seen["fp8Rows"] == [
        [
            layer,
            _number(last),
            _number(E4M3_MAX / last),
            _number(0.5),
            _number(E4M3_MAX / 0.5),
            _number(0.25),
        ]
        for layer, (_, last) in FP8_INPUT_AMAX.items()
    ]
    # The drift chart's lines, the layer that moved farthest first (4x, then 2x, then none).
    assert seen["driftInk"] > 300
    farthest_first = ["blocks.1.mlp.c_fc", "blocks.10.mlp.c_proj", "blocks.0.attn.qkv"]
    assert seen["driftLegend"][1:] == farthest_first
    assert seen["fp8PerLayerCharts"] == 0 and seen["fp8Warnings"] == 0
    assert set(seen["fp8ChartRequests"]) == {"loss"}

    assert seen["plainSections"] == 0, "a run without numerics shows no Numerics section"
    for picture in ("numerics.png", "numerics-dark.png", "numerics-fp8.png"):
        assert (screenshots / picture).stat().st_size > 10_000, picture
