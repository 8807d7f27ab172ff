"""benchmarks/gpu/summarize_numerics.py: the precision study's table, as docs quote it, from
the recorded GPU results."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks/results/gpu/raw/numerics/research_numerics_h100.json"


def _summarize() -> ModuleType:
    path = REPO / "benchmarks/gpu/summarize_numerics.py"
    spec = importlib.util.spec_from_file_location("summarize_numerics", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_table_puts_bf16_first_and_each_precisions_gap_and_speed_against_it() -> None:
    runs = json.loads(RESULTS.read_text())["numerics"]["runs"]
    rows = _summarize().table(runs).splitlines()
    assert rows[2] == "| bf16 | 2.6736 | +0.00% | 377,733 | 1.00x |"
    assert rows[3] == "| fp8-block | 5.7869 | +116.45% | 274,196 | 0.73x |"


def test_the_table_knows_the_emulated_precisions_the_train_job_does() -> None:
    """The script keeps its own list so that it runs where torch is not installed; this
    keeps the two lists the same."""
    from crucible.training.precision.apply import EMULATED

    assert _summarize().EMULATED == EMULATED


def test_an_emulated_precision_gets_no_speed_and_a_study_without_bf16_is_refused() -> None:
    summarize = _summarize()
    runs = {
        "bf16": {"final_loss": 2.0, "tokens_per_s": 100.0},
        "nvfp4": {"final_loss": 2.02, "tokens_per_s": 5.0},
    }
    assert summarize.table(runs).splitlines()[-1] == "| nvfp4 | 2.0200 | +1.00% | emulated | - |"
    with pytest.raises(SystemExit, match="no bf16 run"):
        summarize.table({"nvfp4": runs["nvfp4"]})


def test_a_study_of_several_models_gives_each_its_runs_and_older_results_read_as_the_gpts() -> None:
    summarize = _summarize()
    older = json.loads(RESULTS.read_text())["numerics"]
    assert list(summarize.models(older)) == ["gpt"]
    assert summarize.models(older)["gpt"] == older["runs"]
    runs = {"bf16": {"final_loss": 2.0, "tokens_per_s": 100.0}}
    study = {"steps": 10, "models": {"gpt": {"runs": runs}, "llama-150M": {"runs": runs}}}
    assert summarize.models(study) == {"gpt": runs, "llama-150M": runs}


def test_a_run_that_did_not_finish_is_a_row_saying_why_and_not_a_loss() -> None:
    runs = {
        "bf16": {"final_loss": 2.0, "tokens_per_s": 100.0},
        "mxfp8": {"final_loss": None, "steps_logged": 12, "error": "run 4 did not end"},
    }
    rows = _summarize().table(runs).splitlines()
    assert rows[-1] == "| mxfp8 | did not finish: 12 steps, run 4 did not end | | | |"


def test_docs_numerics_tables_are_what_the_documented_command_prints_from_their_files() -> None:
    # Each table in docs/numerics.md follows a comment naming its results files; the command
    # the page shows, run as written (python3 being this interpreter), prints the same rows.
    doc = (REPO / "docs/numerics.md").read_text()
    tables = re.findall(r"<!-- ([^>]+\.json) -->\n(.*?)\n<!-- end -->", doc, re.S)
    assert tables, "docs/numerics.md quotes no study table"
    for names, quoted in tables:
        results = " ".join(f"benchmarks/results/gpu/raw/numerics/{n}" for n in names.split())
        command = f"python3 benchmarks/gpu/summarize_numerics.py {results}"
        assert command in doc, f"docs/numerics.md does not show the command for {names}"
        printed = subprocess.run(
            [sys.executable, *command.split()[1:]],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert quoted in printed, f"the table for {names} is not what the script prints"


def test_a_second_file_adds_its_runs_and_names_a_precision_run_twice_by_how_it_ran() -> None:
    summarize = _summarize()
    compiled = {"steps": 30, "models": {"gpt": {"runs": {"bf16": {}, "nvfp4": {}}}}}
    eager = {"steps": 30, "compiled": False, "models": {"gpt": {"runs": {"nvfp4": {}}}}}
    assert list(summarize.merged([compiled, eager])["gpt"]) == ["bf16", "nvfp4", "nvfp4 (eager)"]
    with pytest.raises(SystemExit, match="different numbers of steps"):
        summarize.merged([compiled, eager | {"steps": 40}])


def test_files_of_another_seed_are_summarized_alone_and_older_files_read_as_seed_0() -> None:
    summarize = _summarize()
    runs = {"models": {"gpt": {"runs": {"bf16": {}}}}}
    older = {"steps": 30} | runs
    assert list(summarize.merged([older, {"steps": 30, "seed": 0} | runs])["gpt"]) == [
        "bf16",
        "bf16 (compiled)",
    ]
    with pytest.raises(SystemExit, match="different seeds"):
        summarize.merged([older, {"steps": 30, "seed": 1} | runs])


def test_an_unfinished_run_is_compared_with_bf16_over_the_last_steps_it_logged() -> None:
    bf16_loss = {str(s): 2.0 for s in range(1, 101)}
    runs = {
        "bf16": {"final_loss": 2.0, "tokens_per_s": 100.0, "loss": bf16_loss},
        "nvfp4": {
            "final_loss": None,
            "steps_logged": 40,
            "tokens_per_s": 1.0,
            "loss": {str(s): 2.0 if s <= 20 else 2.04 for s in range(1, 41)},
        },
    }
    row = _summarize().table(runs).splitlines()[-1]
    assert row == "| nvfp4 | 2.0400 at steps 21-40 (stopped at 40) | +2.00% | emulated | - |"


def test_compiled_roundings_are_named_so_and_a_later_run_made_the_same_way_replaces_it() -> None:
    summarize = _summarize()
    whole_step = {"steps": 30, "models": {"gpt": {"runs": {"bf16": {}, "nvfp4": {"run": 1}}}}}
    roundings = {"steps": 30, "emulated_compile": "roundings"}
    first = roundings | {"models": {"gpt": {"runs": {"nvfp4": {"run": 2}, "bf16": {"run": 3}}}}}
    again = roundings | {"models": {"gpt": {"runs": {"nvfp4": {"run": 4}}}}}
    found = summarize.merged([whole_step, first, again])["gpt"]
    assert list(found) == ["bf16", "nvfp4", "nvfp4 (compiled roundings)", "bf16 (compiled)"]
    assert found["nvfp4 (compiled roundings)"] == {"run": 4}


def test_the_rerun_commands_in_the_docs_name_only_precisions_and_models_the_script_knows() -> None:
    # The GPU is not in CI; what can break here is a name in a command. research_bench.py
    # refuses an unknown one as it parses its arguments, before it starts anything.
    doc = (REPO / "docs/numerics.md").read_text().replace("\\\n", " ")
    commands = [
        line.split("research_bench.py", 1)[1].split()
        for line in doc.splitlines()
        if line.startswith("python3 research_bench.py")
    ]
    assert len(commands) >= 2, "docs/numerics.md shows no study command"
    for argv in [*commands, ["--precisions", "bf16,fp9"]]:
        parsed = subprocess.run(
            [sys.executable, "-c", PARSE, *argv],
            cwd=REPO / "benchmarks/gpu",
            capture_output=True,
            text=True,
        )
        if "fp9" in argv[-1]:
            assert parsed.returncode == 2 and "--precisions: unknown fp9" in parsed.stderr
        else:
            assert parsed.returncode == 0, (argv, parsed.stderr)


PARSE = "import sys, research_bench; research_bench.parse_args(sys.argv[1:])"
