"""docs/status.md's benchmark tables are what benchmarks/readme_tables.py renders from the
results files, so a figure there cannot drift from its file; and every figure of README.md's
headline table is one of docs/status.md's."""

import json
import re
import shutil
from pathlib import Path

import pytest
from benchmarks import readme_tables

ROOT = Path(__file__).resolve().parents[2]


def test_readme_tables_are_the_rendering_of_the_results_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert readme_tables.main(["--check"]) == 0, (
        "docs/status.md's benchmark tables differ from benchmarks/results: run "
        "`.venv/bin/python -m benchmarks.readme_tables`\n" + capsys.readouterr().out
    )


@pytest.fixture
def copies(tmp_path: Path) -> tuple[Path, Path]:
    """A results directory holding copies of the files the tables read, and a copy of the
    page that holds the tables."""
    results = tmp_path / "results"
    for name in readme_tables.files_read():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(readme_tables.RESULTS / name, results / name)
    page = tmp_path / "status.md"
    shutil.copy(readme_tables.STATUS, page)
    return results, page


def _operator_row(readme: Path) -> str:
    (row,) = [line for line in readme.read_text().splitlines() if line.startswith("| operator:")]
    return row


def test_a_changed_result_changes_its_row_and_only_it(
    copies: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, readme = copies
    before = readme.read_text()
    assert "**missed" in _operator_row(readme)
    scale = results / "operator_scale.json"
    data = json.loads(scale.read_text())
    data["results"]["runs_per_second"] = 61.0
    data["results"]["apply_to_pod_created"]["p99_s"] = 1.5
    scale.write_text(json.dumps(data))
    args = ["--results", str(results), "--page", str(readme)]

    assert readme_tables.main(["--check", *args]) == 1
    assert "+| operator: 500 TrainingRuns" in capsys.readouterr().out
    assert readme.read_text() == before, "--check must not write"

    assert readme_tables.main(args) == 0
    assert _operator_row(readme).endswith(
        "| 61.0 runs/s, p99 1.50 s (the API server alone took 177 s to create the 500) | met |"
    )
    changed = set(readme.read_text().splitlines()) ^ set(before.splitlines())
    assert len(changed) == 2, changed  # the old operator row and the new one
    assert readme_tables.main(["--check", *args]) == 0


def test_a_missing_results_file_is_named(
    copies: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    results, readme = copies
    (results / "lineage.json").unlink()
    assert readme_tables.main(["--check", "--results", str(results), "--page", str(readme)]) == 2
    assert "lineage.json does not exist" in capsys.readouterr().err


def test_a_readme_without_a_tables_block_is_refused(copies: tuple[Path, Path]) -> None:
    results, readme = copies
    text = readme.read_text()
    start = text.index("<!-- benchmarks:gpu begin")
    end = text.index("<!-- benchmarks:gpu end -->") + len("<!-- benchmarks:gpu end -->")
    with pytest.raises(readme_tables.ResultsError, match="0 `benchmarks:gpu` blocks"):
        readme_tables.render(text[:start] + text[end:], results)


def test_paths_filter_lists_and_glob_keys() -> None:
    doc = {
        "runs": [{"jobs": 100, "s": 1.0}, {"jobs": 500, "s": 2.0}, {"jobs": 100, "s": 3.0}],
        "throughput_mb16": {"x": 1},
        "throughput_mb32": {"x": 2},
        "curve": {"x": 3},
    }
    assert readme_tables.resolve(doc, "runs[1].s") == 2.0
    assert readme_tables.resolve(doc, "runs[jobs=100].s") == [1.0, 3.0]
    assert readme_tables.resolve(doc, "runs[*].jobs") == [100, 500, 100]
    assert readme_tables.resolve(doc, "throughput_*.x") == [1, 2]
    with pytest.raises(readme_tables.ResultsError, match="no key 'missing'"):
        readme_tables.resolve(doc, "curve.missing")
    with pytest.raises(readme_tables.ResultsError, match="matched nothing"):
        readme_tables.resolve(doc, "runs[jobs=1000].s")


def _headline_rows() -> list[list[str]]:
    """The cells of README.md's headline table: the table after its `<!-- headline` line."""
    text = (ROOT / "README.md").read_text()
    table = text[text.index("<!-- headline") :].split("\n\n", 1)[0].splitlines()[3:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table]


# A figure: digits with thousands separators and decimals, and the times or percent sign after.
FIGURE = re.compile(r"\d[\d,]*(?:\.\d+)?[×%]?")  # noqa: RUF001


def test_the_readme_headline_has_five_rows_each_linking_to_its_measurement() -> None:
    rows = _headline_rows()
    assert len(rows) == 5, rows
    for what, _measured, _on, how in rows:
        assert re.fullmatch(r"\[.+\]\(benchmarks/[\w/.-]+\.md#[\w-]+\)", how), (what, how)


@pytest.mark.parametrize("row", range(5))
def test_each_readme_headline_figure_is_one_of_docs_status(row: int) -> None:
    """A figure copied into README.md by hand is checked against the generated page, so it
    cannot stay behind when a benchmark is rerun."""
    status = readme_tables.STATUS.read_text()
    what, measured, _on, _how = _headline_rows()[row]
    for figure in FIGURE.findall(measured):
        found = re.search(rf"(?<![\d.,]){re.escape(figure)}(?![\d×%]|[.,]\d)", status)  # noqa: RUF001
        assert found, f"README.md's headline {what!r} says {figure}, which docs/status.md does not"
