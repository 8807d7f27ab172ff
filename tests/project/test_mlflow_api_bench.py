"""benchmarks/mlflow_api_vs_mlflow.py parses its sizes and summarizes its samples as its
README section says; the benchmark itself is not run here (it needs minutes and MLflow)."""

import pytest
from benchmarks import mlflow_api_vs_mlflow as bench

URL = "postgresql+psycopg://u:p@127.0.0.1:5432/db"


def test_defaults_are_the_issues_sizes() -> None:
    config = bench.parse_args(["--database-url", URL])
    assert (config.clients, config.repeats, config.history_points) == (8, 3, 100_000)
    assert config.points % 1_000 == 0
    assert config.output == bench.RESULTS / "mlflow_api_vs_mlflow.json"


@pytest.mark.parametrize(
    "argv",
    [
        ["--points", "1500"],  # not whole 1,000-metric batches
        ["--keys", "7"],  # does not divide a batch
        ["--clients", "0"],
        ["--database-url", "sqlite:///x.db"],
    ],
)
def test_sizes_it_cannot_run_are_refused(argv: list[str]) -> None:
    with pytest.raises(SystemExit):
        bench.parse_args(["--database-url", URL, *argv])


def _raw(ingest: list[float], history_ms: list[float]) -> dict[str, dict[str, list[float]]]:
    loads = [[1.0, 2.0]] * len(ingest)
    return {
        "ingest": {"samples": ingest, "load_avg_1m": loads},
        "history": {"samples": history_ms, "load_avg_1m": loads},
    }


def test_report_gives_medians_spread_ratios_and_goals() -> None:
    raw = {
        "MLflow": _raw([10_000.0, 9_000.0, 11_000.0], [5_000.0, 6_000.0, 4_000.0]),
        "Crucible": _raw([120_000.0, 90_000.0, 100_000.0], [900.0, 1_000.0, 1_100.0]),
    }
    document = bench.report(raw, history_points=100_000)

    crucible, mlflow = document["results"], document["baseline"]
    assert crucible["ingest"]["median"] == 100_000
    assert (crucible["ingest"]["min"], crucible["ingest"]["max"]) == (90_000, 120_000)
    assert crucible["ingest"]["each"] == [120_000.0, 90_000.0, 100_000.0]
    assert mlflow["history"]["median"] == 5_000.0
    assert crucible["history"]["points_per_s"] == 100_000
    assert mlflow["history"]["points_per_s"] == 20_000
    assert document["ratio"] == {"ingest": 10.0, "history": 5.0}
    assert document["goals"]["ingest"] == {"goal": 10, "met": True}
    assert document["goals"]["history"] == {"goal": 10, "met": False}

    config = {"clients": 8, "history_points": 100_000}
    printed = bench.table(document | {"config": config})
    assert "goal 10x: met" in printed
    assert "goal 10x: MISSED" in printed
