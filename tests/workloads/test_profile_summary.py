"""profile_summary: a profiler trace read into top kernels and a time split, by the rules of
its docstring; on small traces written here, then on one torch records on the CPU."""

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function

from crucible.schemas.profiles import PHASES, ProfileSummary
from crucible.training.profile_summary import (
    DATA_ANNOTATION,
    FORWARD_BACKWARD_ANNOTATION,
    OPTIMIZER_ANNOTATION,
    summarize_trace,
)

MAIN = 100  # the training loop's thread id in the hand-written traces


def cpu(
    name: str, ts: float, dur: float, *, cat: str = "cpu_op", tid: int = MAIN
) -> dict[str, Any]:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def annotation(name: str, ts: float, dur: float, *, tid: int = MAIN) -> dict[str, Any]:
    return cpu(name, ts, dur, cat="user_annotation", tid=tid)


def launch(ts: float, correlation: int, *, tid: int = MAIN) -> dict[str, Any]:
    event = cpu("cudaLaunchKernel", ts, 1, cat="cuda_runtime", tid=tid)
    return event | {"args": {"correlation": correlation}}


def kernel(
    name: str, ts: float, dur: float, *, correlation: int | None = None, stream: int = 7
) -> dict[str, Any]:
    args = {"device": 0, "stream": stream}
    if correlation is not None:
        args["correlation"] = correlation
    return {
        "ph": "X",
        "cat": "kernel",
        "name": name,
        "ts": ts,
        "dur": dur,
        "pid": 0,
        "tid": stream,
        "args": args,
    }


def split(summary: ProfileSummary) -> dict[str, float]:
    return {p.phase: p.total_us for p in summary.phases}


def top(summary: ProfileSummary) -> list[tuple[str, int, float, float]]:
    return [(o.name, o.calls, o.total_us, o.share) for o in summary.top_operators]


def test_cpu_operators_are_ranked_by_self_time_so_nothing_counts_twice() -> None:
    trace = {
        "traceEvents": [
            cpu("aten::linear", 0, 100),
            cpu("aten::addmm", 10, 80),  # inside aten::linear
            cpu("aten::linear", 200, 50),
            cpu("aten::addmm", 205, 40),
            annotation("not an operator", 300, 60),
            cpu("aten::relu", 305, 50),  # inside an annotation: all its own time
        ]
    }
    summary = summarize_trace(trace)
    assert summary.timeline == "cpu"
    assert top(summary) == [
        ("aten::addmm", 2, 120.0, 0.6),
        ("aten::relu", 1, 50.0, 0.25),
        ("aten::linear", 2, 30.0, 0.15),
    ]
    assert len(summarize_trace(trace, top=1).top_operators) == 1


def test_an_operator_dispatched_to_itself_is_one_call_as_torchs_table_counts_it() -> None:
    trace = {
        "traceEvents": [
            cpu("aten::div_", 0, 90),
            cpu("aten::div_", 10, 70),  # the only operator inside: a dispatch to itself
            cpu("aten::copy_", 20, 30),
            cpu("aten::add", 100, 40),
            cpu("aten::add", 105, 10),  # one of two inside: a call of its own
            cpu("aten::mul", 120, 10),
        ]
    }
    assert top(summarize_trace(trace)) == [
        ("aten::div_", 1, 60.0, 0.4615),
        ("aten::add", 2, 30.0, 0.2308),
        ("aten::copy_", 1, 30.0, 0.2308),
        ("aten::mul", 1, 10.0, 0.0769),
    ]


def test_the_trainers_annotations_split_the_wall_time_and_gaps_are_idle() -> None:
    trace = {
        "traceEvents": [
            annotation(DATA_ANNOTATION, 0, 10),
            cpu("aten::copy_", 2, 6),
            annotation(FORWARD_BACKWARD_ANNOTATION, 10, 50),
            cpu("aten::mm", 12, 40),
            # Named like an optimizer, but the annotation says where it ran.
            cpu("optimizer_looking_op", 55, 5),
            annotation(OPTIMIZER_ANNOTATION, 70, 20),
            annotation("Optimizer.step#AdamW.step", 71, 18),
            cpu("aten::_foreach_add_", 72, 10),
            cpu("aten::item", 95, 5),  # after the annotations: compute by default
            {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "ts": -50, "dur": 500},
            {"ph": "i", "name": "Record Window End", "ts": 400, "pid": "", "tid": ""},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": MAIN, "args": {"name": "main"}},
        ]
    }
    summary = summarize_trace(trace)
    assert summary.annotated
    # 60-70 and 90-95 run no event of the loop's thread. The profiler's own span, instant
    # and metadata events are no work and do not stretch the wall time.
    assert summary.wall_us == 100 and summary.busy_us == 85
    assert split(summary) == {
        "compute": 55.0,
        "communication": 0.0,
        "data_loading": 10.0,
        "optimizer": 20.0,
        "idle": 15.0,
    }
    assert [p.phase for p in summary.phases] == list(PHASES)
    assert [p.share for p in summary.phases] == [0.55, 0.0, 0.1, 0.2, 0.15]


def test_collectives_are_communication_wherever_they_run() -> None:
    trace = {
        "traceEvents": [
            annotation(FORWARD_BACKWARD_ANNOTATION, 0, 100),
            cpu("c10d::allreduce_", 10, 20),
            cpu("aten::copy_", 12, 4),  # inside the collective: communication too
            cpu("record_param_comms", 40, 10),
            cpu("aten::broadcast_tensors", 60, 10),  # no collective, whatever its name
            annotation(OPTIMIZER_ANNOTATION, 100, 20),
            cpu("gloo:all_gather", 105, 5),
        ]
    }
    assert split(summarize_trace(trace)) == {
        "compute": 70.0,
        "communication": 35.0,
        "data_loading": 0.0,
        "optimizer": 15.0,
        "idle": 0.0,
    }


def test_without_annotations_torchs_own_names_decide() -> None:
    trace = {
        "traceEvents": [
            annotation("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 10),
            cpu("aten::stack", 1, 8),
            cpu("aten::mm", 10, 30),
            annotation("Optimizer.step#SGD.step", 40, 10),
            cpu("aten::add_", 41, 8),
            annotation("Optimizer.zero_grad#SGD.zero_grad", 50, 5),
        ]
    }
    summary = summarize_trace(trace)
    assert not summary.annotated
    assert split(summary) == {
        "compute": 30.0,
        "communication": 0.0,
        "data_loading": 10.0,
        "optimizer": 15.0,
        "idle": 0.0,
    }


def test_on_the_cpu_only_the_training_loops_thread_is_the_timeline() -> None:
    worker = 200
    trace = {
        "traceEvents": [
            annotation(FORWARD_BACKWARD_ANNOTATION, 0, 10),
            cpu("aten::mm", 1, 8),
            annotation(FORWARD_BACKWARD_ANNOTATION, 50, 10),
            cpu("aten::mm", 51, 8),
            # Another thread's operators (more of them than the loop's) fill the gap in
            # time, not the loop's timeline; they still rank among the operators.
            cpu("aten::copy_", 10, 40, tid=worker),
            cpu("aten::copy_", 60, 40, tid=worker),
        ]
    }
    summary = summarize_trace(trace)
    assert summary.wall_us == 100 and summary.busy_us == 20
    assert split(summary)["idle"] == 80
    assert top(summary)[0] == ("aten::copy_", 2, 80.0, 0.8333)

    # Without the annotations, the thread with the most operator time is taken instead.
    unannotated = [e for e in trace["traceEvents"] if e["cat"] != "user_annotation"]
    assert summarize_trace({"traceEvents": unannotated}).busy_us == 80


def test_events_that_overlap_without_nesting_are_cut_at_their_parents_end() -> None:
    trace = {"traceEvents": [cpu("aten::linear", 0, 10), cpu("aten::addmm", 5, 10)]}
    summary = summarize_trace(trace)
    assert summary.wall_us == 15 and summary.busy_us == 10
    assert top(summary) == [("aten::addmm", 1, 5.0, 0.5), ("aten::linear", 1, 5.0, 0.5)]


def test_gpu_kernels_take_the_phase_of_their_launch_and_comm_counts_where_exposed() -> None:
    trace = {
        "traceEvents": [
            annotation(FORWARD_BACKWARD_ANNOTATION, 0, 20),
            cpu("aten::mm", 1, 4),
            launch(2, correlation=1),
            cpu("aten::mm", 6, 4),
            launch(7, correlation=2),
            cpu("c10d::allreduce_", 11, 4),
            launch(12, correlation=3),
            annotation(OPTIMIZER_ANNOTATION, 20, 35),
            launch(21, correlation=4),
            # Launched in the forward-backward, running while the host is in the optimizer:
            # compute, as its launch says.
            kernel("ampere_sgemm_128x64_tn", 10, 20, correlation=1),
            kernel("ampere_sgemm_128x64_tn", 30, 10, correlation=2),
            # On its own stream, half hidden behind the second sgemm.
            kernel("ncclDevKernel_AllReduce_Sum_f32", 35, 10, correlation=3, stream=20),
            kernel("multi_tensor_apply_kernel", 45, 5, correlation=4),
            # No launch record: goes by when it ran, inside the optimizer's annotation.
            kernel("vectorized_elementwise_kernel", 50, 2, stream=21),
            {
                "ph": "X",
                "cat": "gpu_user_annotation",
                "name": OPTIMIZER_ANNOTATION,
                "ts": 45,
                "dur": 5,
                "pid": 0,
                "tid": 7,
            },
        ]
    }
    summary = summarize_trace(trace)
    assert summary.timeline == "gpu" and summary.annotated
    assert summary.wall_us == 55 and summary.busy_us == 42
    assert split(summary) == {
        "compute": 30.0,
        "communication": 5.0,
        "data_loading": 0.0,
        "optimizer": 7.0,
        "idle": 13.0,
    }
    assert top(summary) == [
        ("ampere_sgemm_128x64_tn", 2, 30.0, 0.6383),
        ("ncclDevKernel_AllReduce_Sum_f32", 1, 10.0, 0.2128),
        ("multi_tensor_apply_kernel", 1, 5.0, 0.1064),
        ("vectorized_elementwise_kernel", 1, 2.0, 0.0426),
    ]


@pytest.mark.parametrize("trace", [{}, {"traceEvents": []}, {"traceEvents": [None, 3, {}]}])
def test_an_empty_trace_is_all_zero(trace: dict[str, Any]) -> None:
    summary = summarize_trace(trace)
    assert summary.wall_us == 0 and summary.top_operators == []
    assert all(p.total_us == 0 and p.share == 0 for p in summary.phases)


def test_a_trace_torch_records_on_the_cpu(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1))
    optimizer = torch.optim.AdamW(model.parameters())
    dataset = torch.utils.data.TensorDataset(torch.randn(64, 32), torch.randn(64, 1))
    batches = iter(torch.utils.data.DataLoader(dataset, batch_size=16))
    recorded = profile(activities=[ProfilerActivity.CPU])
    recorded.start()
    for _ in range(3):
        with record_function(DATA_ANNOTATION):
            inputs, targets = next(batches)
        with record_function(FORWARD_BACKWARD_ANNOTATION):
            nn.functional.mse_loss(model(inputs), targets).backward()
        with record_function(OPTIMIZER_ANNOTATION):
            optimizer.step()
            optimizer.zero_grad()
    recorded.stop()
    path = tmp_path / "trace.json"
    recorded.export_chrome_trace(str(path))

    summary = summarize_trace(json.loads(path.read_text()))
    assert summary.timeline == "cpu" and summary.annotated
    phases = split(summary)
    assert phases["compute"] > 0 and phases["data_loading"] > 0 and phases["optimizer"] > 0
    assert phases["communication"] == 0
    assert sum(phases.values()) == pytest.approx(summary.wall_us, abs=0.01)
    assert summary.busy_us <= summary.wall_us
    # Self times as torch's own table counts them, call for call.
    own = {e.key: e for e in recorded.key_averages()}
    for row in summary.top_operators[:5]:
        assert row.calls == own[row.name].count, row.name
        assert row.total_us == pytest.approx(own[row.name].self_cpu_time_total, rel=0.01, abs=1)
    assert "aten::addmm" in {row.name for row in summary.top_operators}
    assert 0 < sum(row.share for row in summary.top_operators) <= 1.0001
