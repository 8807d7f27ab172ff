"""Where the profiled steps' time went, read from the trace the torch profiler exports.

A trace (`export_chrome_trace`: `{"traceEvents": [{"ph", "cat", "name", "ts", "dur", "pid",
"tid", "args"}, ...]}`, times in microseconds) holds thousands of events that nobody reads
whole. People open it for two answers, which this module gives: which kernels took the
time, and how the steps' wall time split into compute, communication, data loading,
optimizer and idle. Plain Python over the JSON, so that neither the API nor the CLI needs
torch.

The rules:

- Events. Only complete events (`ph` "X") count, and not the profiler's own span (cat
  "Trace") nor the GPU's copies of annotations (cat "gpu_user_annotation"), which mark
  time without doing work. Device work is cat "kernel", "gpu_memcpy" and "gpu_memset"; every
  other event is on a CPU thread (operators "cpu_op", `record_function` ranges
  "user_annotation", CUDA calls "cuda_runtime" and "cuda_driver", ...).
- Wall time: from the earliest start to the latest end among those events: the profiled
  steps and whatever ran between them.
- Timeline. With device work in the trace, busy means a kernel, copy or set running on any
  of the device's streams. Without (a CPU run), busy means the training loop's thread is
  inside any event; that thread is the one holding the `crucible/` annotations, else the one
  with the most operator time. Idle is the wall time that is not busy: on a GPU the device
  waiting for the host, on the CPU Python running outside any operator.
- Top operators: with device work, kernels (and copies, sets) by name, their durations
  summed; on the CPU, operators by self time (their duration less that of the operators
  directly inside them), so that `aten::linear` and the `aten::addmm` inside it are not
  counted twice, and an operator that is the only one inside one of its own name (a
  dispatch to itself, `aten::div_` in `aten::div_`) counted as one call with it, as torch's
  own table does. A share is of the summed time of every row, not only of the top ones.
- Phases. Each piece of busy time belongs to one phase, so that the five add up to the wall
  time. For a CPU event's own time (its duration less its children's), the event and the
  events open around it decide; for a kernel, its name and the CUDA call that launched it
  (matched by `args.correlation`) with the events open around that call. In order:
  1. communication, if any of those names is a collective's: it holds nccl, gloo, c10d::,
     record_param_comms, or all_reduce, all_gather, reduce_scatter or all_to_all (with or
     without the underscores). Not "broadcast" alone: `aten::broadcast_tensors` is no
     collective, and NCCL's and c10d's broadcasts carry their library's name;
  2. else the phase of the trainer's innermost `crucible/` annotation open at that moment
     (`crucible/data` -> data loading, `crucible/optimizer` -> optimizer, any other, such
     as `crucible/forward_backward`, -> compute). A kernel's moment is its launch, not its
     run: kernels run behind the host, and one the backward launched is still compute when
     it runs while the host is in the optimizer. A kernel with no launch record goes by
     the moment it started;
  3. else, for time outside the annotations (or a trace without them), by the names open
     around it: optimizer for torch's `Optimizer.step#...` / `Optimizer.zero_grad#...` or a
     name holding "optimizer", data loading for `enumerate(DataLoader)#...` or a name
     holding "dataloader";
  4. else compute.
  Where device streams overlap, an instant counts once, for the first busy phase of compute,
  optimizer, data loading, communication: communication counts only where nothing else
  runs, i.e. the part that compute does not hide.
"""

import bisect
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from crucible.schemas.profiles import PHASES, OperatorTime, Phase, PhaseTime, ProfileSummary

DATA_ANNOTATION = "crucible/data"
FORWARD_BACKWARD_ANNOTATION = "crucible/forward_backward"
OPTIMIZER_ANNOTATION = "crucible/optimizer"
"""The trainer's `record_function` names for the parts of a step (training/train.py)."""
ANNOTATION_PREFIX = "crucible/"

TOP_OPERATORS = 20

DEVICE_CATEGORIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
_NOT_WORK = frozenset({"Trace", "gpu_user_annotation"})

_COMMUNICATION = re.compile(
    r"nccl|gloo|c10d::|record_param_comms|all_?reduce|all_?gather|reduce_?scatter|all_?to_?all",
    re.IGNORECASE,
)
_OPTIMIZER = re.compile(r"optimizer", re.IGNORECASE)  # Optimizer.step#AdamW.step too
_DATA_LOADING = re.compile(r"dataloader", re.IGNORECASE)
_ANNOTATED_PHASES: dict[str, Phase] = {
    DATA_ANNOTATION: "data_loading",
    OPTIMIZER_ANNOTATION: "optimizer",
}
# The precedence where device streams overlap: the first busy phase takes the instant.
_PRECEDENCE: tuple[Phase, ...] = ("compute", "optimizer", "data_loading", "communication")


@dataclass(eq=False)
class _Event:
    name: str
    category: str
    start: float
    end: float
    thread: tuple[Any, Any]
    correlation: int | None
    parent: "_Event | None" = None
    children: list["_Event"] = field(default_factory=list)
    self_us: float = 0.0
    """Operator self time: the duration less that of the nearest operators inside it."""

    operator_parent: "_Event | None" = None
    """The nearest operator this operator runs inside."""

    operators_inside: int = 0
    """Operators whose nearest enclosing operator is this one."""

    def is_dispatch_copy(self) -> bool:
        """An operator that is the only one inside an operator of its own name: a dispatch
        of the operator to itself, which torch's own table (`key_averages`) counts as one
        call with its parent."""
        parent = self.operator_parent
        return parent is not None and parent.name == self.name and parent.operators_inside == 1

    def lineage(self) -> Iterator["_Event"]:
        """This event and every event open around it on its thread, innermost first."""
        event: _Event | None = self
        while event is not None:
            yield event
            event = event.parent


def summarize_trace(trace: Mapping[str, Any], *, top: int = TOP_OPERATORS) -> ProfileSummary:
    """The summary of one exported Chrome trace (the dict `export_chrome_trace` writes)."""
    host: list[_Event] = []
    device: list[_Event] = []
    for raw in trace.get("traceEvents", []):
        event = _complete_event(raw)
        if event is not None:
            (device if event.category in DEVICE_CATEGORIES else host).append(event)
    # Before nesting, which may cut an event short: the wall time is the events' own.
    wall_start = min((e.start for e in (*host, *device)), default=0.0)
    wall_end = max((e.end for e in (*host, *device)), default=0.0)
    threads = _nest_by_thread(host)
    phases = _PhaseAnnotations(
        e for e in host if e.category == "user_annotation" and e.name.startswith(ANNOTATION_PREFIX)
    )

    if device:
        # A kernel and the CUDA call that launched it share a correlation id.
        launches = {e.correlation: e for e in host if e.correlation is not None}
        busy = [(e.start, e.end, _kernel_phase(e, _launch_of(e, launches), phases)) for e in device]
        operators = [(e.name, e.end - e.start, True) for e in device]
    else:
        main = _main_thread(threads, phases)
        busy = [
            (start, end, _host_phase(event, (start + end) / 2, phases))
            for event in _walk(threads[main] if main is not None else [])
            for start, end in _own_time(event)
        ]
        operators = [
            (e.name, e.self_us, not e.is_dispatch_copy()) for e in host if e.category == "cpu_op"
        ]

    wall = wall_end - wall_start
    by_phase = _split(busy)
    busy_us = sum(by_phase.values())
    by_phase["idle"] = max(0.0, wall - busy_us)
    return ProfileSummary(
        timeline="gpu" if device else "cpu",
        wall_us=_us(wall),
        busy_us=_us(busy_us),
        annotated=bool(phases),
        phases=[
            PhaseTime(phase=p, total_us=_us(by_phase[p]), share=_share(by_phase[p], wall))
            for p in PHASES
        ],
        top_operators=_top_operators(operators, top),
    )


def _complete_event(raw: Any) -> _Event | None:
    if not isinstance(raw, Mapping) or raw.get("ph") != "X":
        return None
    category = str(raw.get("cat", ""))
    start, duration = raw.get("ts"), raw.get("dur")
    if category in _NOT_WORK or not _is_number(start) or not _is_number(duration):
        return None
    args = raw.get("args")
    correlation = args.get("correlation") if isinstance(args, Mapping) else None
    return _Event(
        name=str(raw.get("name", "")),
        category=category,
        start=float(start),
        end=float(start) + max(0.0, float(duration)),
        thread=(raw.get("pid"), raw.get("tid")),
        correlation=correlation if isinstance(correlation, int) else None,
    )


def _is_number(value: object) -> TypeGuard[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _nest_by_thread(events: Iterable[_Event]) -> dict[tuple[Any, Any], list[_Event]]:
    """Each thread's events as a forest: the top-level events of each thread, in time
    order, each with its children. Events on one thread nest; one that starts inside another
    but ends after it (clock jitter) is cut at its parent's end."""
    by_thread: dict[tuple[Any, Any], list[_Event]] = defaultdict(list)
    for event in events:
        by_thread[event.thread].append(event)
    roots: dict[tuple[Any, Any], list[_Event]] = {}
    for thread, events_of_thread in by_thread.items():
        events_of_thread.sort(key=lambda e: (e.start, -(e.end - e.start)))
        top: list[_Event] = []
        open_events: list[_Event] = []
        for event in events_of_thread:
            while open_events and open_events[-1].end <= event.start:
                open_events.pop()
            if open_events:
                event.parent = open_events[-1]
                event.end = min(event.end, event.parent.end)
                event.parent.children.append(event)
            else:
                top.append(event)
            event.self_us = event.end - event.start
            if event.category == "cpu_op":
                enclosing_operator = next(
                    (e for e in open_events[::-1] if e.category == "cpu_op"), None
                )
                if enclosing_operator is not None:
                    enclosing_operator.self_us -= event.end - event.start
                    enclosing_operator.operators_inside += 1
                    event.operator_parent = enclosing_operator
            open_events.append(event)
        roots[thread] = top
    return roots


def _walk(events: Sequence[_Event]) -> Iterator[_Event]:
    for event in events:
        yield event
        yield from _walk(event.children)


def _own_time(event: _Event) -> Iterator[tuple[float, float]]:
    """The intervals of `event` that none of its children covers."""
    cursor = event.start
    for child in event.children:
        if child.start > cursor:
            yield cursor, child.start
        cursor = max(cursor, child.end)
    if cursor < event.end:
        yield cursor, event.end


def _main_thread(
    threads: Mapping[tuple[Any, Any], list[_Event]], phases: "_PhaseAnnotations"
) -> tuple[Any, Any] | None:
    if phases.thread is not None:
        return phases.thread

    def operator_time(thread: tuple[Any, Any]) -> float:
        return sum(e.self_us for e in _walk(threads[thread]) if e.category == "cpu_op")

    return max(threads, key=operator_time, default=None)


class _PhaseAnnotations:
    """The trainer's `crucible/` ranges, to ask which one was open at a moment."""

    def __init__(self, annotations: Iterable[_Event]) -> None:
        self._ranges = sorted(annotations, key=lambda e: e.start)
        self._starts = [e.start for e in self._ranges]
        counts: dict[tuple[Any, Any], int] = defaultdict(int)
        for annotation in self._ranges:
            counts[annotation.thread] += 1
        self.thread = max(counts, key=lambda t: counts[t], default=None)
        """The thread that holds most of them: the training loop's."""

    def __bool__(self) -> bool:
        return bool(self._ranges)

    def at(self, moment: float) -> Phase | None:
        """The phase of the innermost annotation open at `moment`; None outside them all."""
        innermost: _Event | None = None
        for annotation in self._ranges[: bisect.bisect_right(self._starts, moment)]:
            if annotation.end > moment and (
                innermost is None
                or annotation.end - annotation.start < innermost.end - innermost.start
            ):
                innermost = annotation
        if innermost is None:
            return None
        return _ANNOTATED_PHASES.get(innermost.name, "compute")


def _launch_of(kernel: _Event, launches: Mapping[int, _Event]) -> _Event | None:
    return launches.get(kernel.correlation) if kernel.correlation is not None else None


def _kernel_phase(kernel: _Event, launch: _Event | None, phases: _PhaseAnnotations) -> Phase:
    if _COMMUNICATION.search(kernel.name):
        return "communication"
    if launch is None:
        return phases.at(kernel.start) or "compute"
    return _host_phase(launch, (launch.start + launch.end) / 2, phases)


def _host_phase(event: _Event, moment: float, phases: _PhaseAnnotations) -> Phase:
    names = [e.name for e in event.lineage()]
    if any(_COMMUNICATION.search(name) for name in names):
        return "communication"
    annotated = phases.at(moment)
    if annotated is not None:
        return annotated
    if any(_OPTIMIZER.search(name) for name in names):
        return "optimizer"
    if any(_DATA_LOADING.search(name) for name in names):
        return "data_loading"
    return "compute"


def _split(busy: Sequence[tuple[float, float, Phase]]) -> dict[Phase, float]:
    """Busy time per phase, each instant counted once, for the first busy phase of
    `_PRECEDENCE` (intervals on several streams may overlap)."""
    edges: list[tuple[float, int, Phase]] = []
    for start, end, phase in busy:
        if end > start:
            edges += [(start, 1, phase), (end, -1, phase)]
    edges.sort(key=lambda edge: edge[0])
    open_count: dict[Phase, int] = defaultdict(int)
    totals: dict[Phase, float] = dict.fromkeys(PHASES, 0.0)
    previous: float | None = None
    for moment, change, phase in edges:
        if previous is not None and moment > previous:
            running = next((p for p in _PRECEDENCE if open_count[p] > 0), None)
            if running is not None:
                totals[running] += moment - previous
        open_count[phase] += change
        previous = moment
    return totals


def _top_operators(durations: Iterable[tuple[str, float, bool]], top: int) -> list[OperatorTime]:
    """`durations`: (name, time, whether it is a call of its own). A dispatch copy's time
    goes to its name with its parent's call, as torch's table merges the two."""
    calls: dict[str, int] = defaultdict(int)
    totals: dict[str, float] = defaultdict(float)
    for name, duration, is_call in durations:
        calls[name] += int(is_call)
        totals[name] += duration
    everything = sum(totals.values())
    ranked = sorted(totals, key=lambda name: (-totals[name], name))[:top]
    return [
        OperatorTime(
            name=name,
            calls=calls[name],
            total_us=_us(totals[name]),
            share=_share(totals[name], everything),
        )
        for name in ranked
    ]


def _us(value: float) -> float:
    return round(value, 3)  # the trace's own resolution: nanoseconds


def _share(part: float, whole: float) -> float:
    return round(part / whole, 4) if whole > 0 else 0.0
