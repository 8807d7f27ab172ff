"""A low-precision run's Numerics section in Debian's Chromium against a real `crucible
server`: an emulated (mxfp8) run's per-layer saturated and underflow shares and amax, an fp8
run's amax and scales, a row- or block-scaled fp8 run's amax without scales, and every run's
GEMM error against bf16, as the workloads log them (docs/workloads.md, `precision`), summed up
in one section instead of a chart per layer.

Needs what tests/browser/test_dashboard.py needs.
"""

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from crucible.domain.metric_keys import NUMERICS_MATMUL_ERROR_MAX
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
# Each layer's forward GEMM error against bf16 at the last logged step (it halves from the
# first); blocks.1 is the worst. The same for the emulated and both fp8 runs.
MATMUL_ERROR = {
    "blocks.0.attn.qkv": 0.012,
    "blocks.1.mlp.c_fc": 0.047,
    "blocks.10.mlp.c_proj": 0.021,
}
# Emulated amax at the first and the last logged step; every other operand's stays at 1.
# blocks.1's input grows eightfold and blocks.10's gradient falls to a quarter, so the amax
# history draws these two first.
EMULATED_AMAX = {
    ("blocks.1.mlp.c_fc", "input"): (1.0, 8.0),
    ("blocks.10.mlp.c_proj", "grad_output"): (1.0, 0.25),
}
# Lines on the amax history chart (DRIFT_LINES in web/src/lib/numerics.ts).
DRIFT_LINES = 6
ERROR_COLUMN = "GEMM error vs bf16"


def _ramp(last: float, step: int) -> float:
    """Zero at step 0, `last` (exactly) at LAST_STEP."""
    return last if step == LAST_STEP else last * step / LAST_STEP


def _between(first: float, last: float, step: int) -> float:
    """`first` at the first logged step, `last` (exactly) at LAST_STEP."""
    if step == LAST_STEP:
        return last
    return first + (last - first) * (step - STATS_EVERY) / (LAST_STEP - STATS_EVERY)


def _errors(prefix: str, step: int) -> dict[str, float]:
    """Each layer's GEMM error under `prefix` and the run's worst, as precision.py logs them."""
    errors = {
        f"{prefix}{layer}/matmul_rel_error": _between(error * 2, error, step)
        for layer, error in MATMUL_ERROR.items()
    }
    return errors | {NUMERICS_MATMUL_ERROR_MAX: max(errors.values())}


def _emulated_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"step": step, "values": {"loss": 4.0 - step / 50}} for step in range(1, LAST_STEP + 1)
    ]
    for step in range(STATS_EVERY, LAST_STEP + 1, STATS_EVERY):
        values = _errors("numerics/", step)
        for layer in LAYERS:
            for operand in OPERANDS:
                saturated = _ramp(SATURATED.get((layer, operand), 0.0), step)
                values[f"numerics/{layer}/{operand}_saturated"] = saturated
                values[f"numerics/{layer}/{operand}_underflow"] = UNDERFLOW[operand]
                amax = _between(*EMULATED_AMAX.get((layer, operand), (1.0, 1.0)), step)
                values[f"numerics/{layer}/{operand}_amax"] = amax
        rows.append({"step": step, "values": values})
    return rows


def _fp8_rows() -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = [
        {"step": step, "values": {"loss": 3.0 - step / 100}} for step in range(1, LAST_STEP + 1)
    ]
    for step in range(STATS_EVERY, LAST_STEP + 1, STATS_EVERY):
        values = _errors("fp8/", step)
        for layer, (first, last) in FP8_INPUT_AMAX.items():
            amax = _between(first, last, step)
            values |= {
                f"fp8/{layer}/input_amax": amax,
                f"fp8/{layer}/input_scale": E4M3_MAX / amax,
                f"fp8/{layer}/weight_amax": 0.5,
                f"fp8/{layer}/weight_scale": E4M3_MAX / 0.5,
                f"fp8/{layer}/grad_amax": 0.25,
            }
        rows.append({"step": step, "values": values})
    return rows


def _fp8_block_rows() -> list[dict[str, Any]]:
    """An fp8 run with `fp8_scaling: block`: amax and GEMM error, no scale."""
    rows: list[dict[str, Any]] = [
        {"step": step, "values": {"loss": 3.0 - step / 100}} for step in range(1, LAST_STEP + 1)
    ]
    for step in range(STATS_EVERY, LAST_STEP + 1, STATS_EVERY):
        values = _errors("fp8/", step)
        for layer, (first, last) in FP8_INPUT_AMAX.items():
            values |= {
                f"fp8/{layer}/input_amax": _between(first, last, step),
                f"fp8/{layer}/weight_amax": 0.5,
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
            "fp8_block": _submit_training_run(client, "fp8-block-scaled", experiment="precision"),
            "plain": _submit_training_run(client, "bf16", experiment="precision"),
        }
        _call(client, "POST", f"/runs/{runs['emulated']}/metrics", json={"rows": _emulated_rows()})
        _call(client, "POST", f"/runs/{runs['fp8']}/metrics", json={"rows": _fp8_rows()})
        block = {"rows": _fp8_block_rows()}
        _call(client, "POST", f"/runs/{runs['fp8_block']}/metrics", json=block)
        plain = [{"step": s, "values": {"loss": 1 / s}} for s in range(1, 21)]
        _call(client, "POST", f"/runs/{runs['plain']}/metrics", json={"rows": plain})
    return runs


def _share(share: float) -> str:
    """A share as lib/numerics.ts `sharePercent` writes it: two significant digits."""
    return "0%" if share == 0 else f"{float(f'{share * 100:.2g}'):g}%"


def _requested(requests: list[str]) -> set[str]:
    """Every key the ordinary charts' requests named."""
    return {key for request in requests for key in request.split(",")}


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
                "FP8_BLOCK_RUN_ID": str(runs["fp8_block"]),
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
    # The table: a column pair per operand, the worst saturation first, then each layer's
    # latest GEMM error.
    assert seen["header"][0] == ["Layer", *OPERANDS, ERROR_COLUMN]
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
            _share(MATMUL_ERROR[layer]),
        ]
        for layer in by_saturation
    ]
    assert seen["overCells"] == ["3.2%"]
    # The worst shares and the loss are drawn, the worst named by its layer and operand.
    assert all(pixels > 300 for pixels in seen["emulatedInk"].values()), seen["emulatedInk"]
    assert "latest 3.2% in blocks.1.mlp.c_fc grad_output" in seen["worstCaption"]
    # The worst GEMM error over steps, the worst layer named; the amax history draws the two
    # operands whose amax moved, farthest first, and no more lines than it allows.
    assert seen["errorCaption"].startswith(f"{ERROR_COLUMN} (worst layer)")
    assert "latest 4.7% in blocks.1.mlp.c_fc" in seen["errorCaption"]
    moved = ["blocks.1.mlp.c_fc input", "blocks.10.mlp.c_proj grad_output"]
    assert seen["amaxLegend"][1:3] == moved
    assert len(seen["amaxLegend"][1:]) == DRIFT_LINES
    # Right after the metrics; no chart per layer among them, and their request named only
    # the ordinary keys.
    order = seen["sectionOrder"]
    assert order[order.index("Metrics") + 1] == "Numerics"
    assert seen["emulatedPerLayerCharts"] == 0
    # The run-level worst GEMM error is an ordinary series too; the per-layer ones are not.
    ordinary = {"loss", NUMERICS_MATMUL_ERROR_MAX}
    assert seen["emulatedChartRequests"] and _requested(seen["emulatedChartRequests"]) == ordinary
    assert seen["tabbedToTable"], "Tab never reached the shares table"

    # The fp8 run: amax and scale per operand (the gradient has no scale), in module order.
    assert seen["fp8Header"][0] == ["Layer", "input", "weight", "grad", ERROR_COLUMN]
    assert seen["fp8Header"][1] == ["amax", "scale", "amax", "scale", "amax"]
    assert seen["fp8Rows"] == [
        [
            layer,
            _number(last),
            _number(E4M3_MAX / last),
            _number(0.5),
            _number(E4M3_MAX / 0.5),
            _number(0.25),
            _share(MATMUL_ERROR[layer]),
        ]
        for layer, (_, last) in FP8_INPUT_AMAX.items()
    ]
    assert seen["fp8ErrorInk"] > 300
    assert seen["fp8LossInk"] > 300, "the fp8 run's loss is drawn beside its GEMM error"
    # The drift chart's lines, the layer that moved farthest first (4x, then 2x, then none).
    assert seen["driftInk"] > 300
    farthest_first = ["blocks.1.mlp.c_fc", "blocks.10.mlp.c_proj", "blocks.0.attn.qkv"]
    assert seen["driftLegend"][1:] == farthest_first
    assert seen["fp8PerLayerCharts"] == 0 and seen["fp8Warnings"] == 0
    assert _requested(seen["fp8ChartRequests"]) == ordinary

    # The block-scaled fp8 run: amax and GEMM error, and nothing about scales.
    assert seen["blockHeading"] == "Latest fp8 amax by layer"
    assert seen["blockHeader"][0] == ["Layer", "input", "weight", "grad", ERROR_COLUMN]
    assert seen["blockHeader"][1] == ["amax", "amax", "amax"]
    assert seen["blockRows"] == [
        [layer, _number(last), _number(0.5), _number(0.25), _share(MATMUL_ERROR[layer])]
        for layer, (_, last) in FP8_INPUT_AMAX.items()
    ]
    assert seen["blockScaleCharts"] == 0
    assert seen["blockErrorInk"] > 300
    assert seen["blockLossInk"] > 300
    assert "latest 4.7% in blocks.1.mlp.c_fc" in seen["blockErrorCaption"]

    assert seen["plainSections"] == 0, "a run without numerics shows no Numerics section"
    pictures = ("numerics.png", "numerics-dark.png", "numerics-fp8.png", "numerics-fp8-block.png")
    for picture in pictures:
        assert (screenshots / picture).stat().st_size > 10_000, picture
