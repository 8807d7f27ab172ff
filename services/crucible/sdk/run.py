"""`crucible.init()` and the `Run` a workload talks to: metrics, checkpoints, datasets, evals,
heartbeats and preemption, from any PyTorch script, under `python` or `torchrun`.

Under torchrun rank 0 reports (metrics, heartbeats, checkpoint registrations) and every rank
takes part in checkpoints. The API being down never stops training: metrics wait in memory,
heartbeats are retried; only the calls whose answer the loop needs (loading a checkpoint,
resolving a dataset) wait for it, through the client's own retries.
"""

import atexit
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

from crucible.artifacts import storage
from crucible.client import CrucibleClient
from crucible.domain import contract
from crucible.schemas.lineage import (
    ArtifactPublic,
    CheckpointPublic,
    DatasetVersionPublic,
    EvalResultCreate,
    EvalResultPublic,
)
from crucible.schemas.runs import RunPublic
from crucible.sdk import artifacts, datasets, distributed
from crucible.sdk.artifacts import InputArtifact
from crucible.sdk.checkpoint import CheckpointStore, RunCheckpointer
from crucible.sdk.config import RunEnvironment
from crucible.sdk.datasets import InputDataset
from crucible.sdk.environment import current_environment
from crucible.sdk.gpu_telemetry import GpuReading, GpuSampler, NvmlGpus, as_metrics
from crucible.sdk.heartbeat import Heartbeat
from crucible.sdk.metrics import MetricShipper
from crucible.sdk.preemption import PREEMPTED_EXIT_CODE, PreemptionFlag
from crucible.sdk.profile_requests import ProfileRequestMailbox
from crucible.sdk.step_control import RunStepControl
from crucible.settings import Settings, load_settings

log = logging.getLogger(__name__)

DEFAULT_MAX_BUFFERED_POINTS = 1_000_000


class Run:
    """One attempt of one run, as seen from inside the workload. Build it with `init()`."""

    def __init__(
        self,
        *,
        settings: Settings,
        run_id: int,
        attempt: int | None,
        checkpoint_uri: str,
        outputs_dir: Path,
        outputs_uri: str | None,
        resume_from: str | None,
        max_buffered_points: int,
        flush_interval: float,
        heartbeat_interval: float,
        catch_sigterm: bool,
        max_backoff: float,
        system_metrics_interval: float,
    ) -> None:
        self.id = run_id
        self.attempt = attempt
        self.rank = distributed.rank()
        self.checkpoint_uri = checkpoint_uri
        self._outputs_dir = outputs_dir
        self._outputs_uri = outputs_uri
        self._resume_from = resume_from
        self._settings = settings
        self._client = CrucibleClient.from_settings(settings)
        self._project: str | None = None
        self._run_record: RunPublic | None = None
        self._finished = False
        self._checkpoint_store = CheckpointStore(
            self._client, run_id=run_id, attempt=attempt, base_uri=checkpoint_uri
        )
        self._metrics: MetricShipper | None = None
        self._heartbeat: Heartbeat | None = None
        self._profile_requests: ProfileRequestMailbox | None = None
        self._gpu_sampler: GpuSampler | None = None
        self._last_step = 0
        if self.is_reporter:
            # Background threads get clients of their own: no retry loop of the client's
            # (the shipper keeps its batches and retries them itself), no shared connections.
            self._metrics = MetricShipper(
                CrucibleClient.from_settings(settings, retries=0),
                run_id,
                max_buffered_points=max_buffered_points,
                flush_interval=flush_interval,
                max_backoff=max_backoff,
            )
            if attempt is not None and heartbeat_interval > 0:
                self._profile_requests = ProfileRequestMailbox()
                self._heartbeat = Heartbeat(
                    CrucibleClient.from_settings(settings, retries=0),
                    run_id,
                    attempt,
                    heartbeat_interval,
                    environment=current_environment(),
                    profile_requests=self._profile_requests,
                )
            if system_metrics_interval > 0:
                self._gpu_sampler = self._start_gpu_telemetry(system_metrics_interval)
        self._preemption = PreemptionFlag()
        if catch_sigterm:
            self._preemption.install()
        atexit.register(self._finish_at_exit)

    @property
    def is_reporter(self) -> bool:
        """True on the one process (rank 0) that sends metrics and registers checkpoints."""
        return self.rank == 0

    # -- metrics -----------------------------------------------------------------------------

    def log(self, values: Mapping[str, float], *, step: int) -> None:
        """Queue metric values for `step`; returns at once. A no-op on ranks other than 0.

        Non-finite values are skipped (with one warning): the API would refuse them.
        """
        if self._metrics is not None:
            self._last_step = max(self._last_step, step)
            self._metrics.add(values, step)

    def _start_gpu_telemetry(self, interval: float) -> GpuSampler | None:
        """System metrics of the GPUs this process may use, read every `interval` seconds
        and logged at the latest step the run logged: a metric point is stored once per
        (key, step), so there is at most one reading per training step, and the charts line
        it up with the loss. None, said once, where there is no GPU to read."""
        gpus = NvmlGpus.open(os.environ.get("CUDA_VISIBLE_DEVICES"))
        if isinstance(gpus, str):
            log.info("no GPU telemetry: %s", gpus)
            return None
        metrics = self._metrics
        assert metrics is not None

        def record(readings: list[GpuReading]) -> None:
            metrics.add(as_metrics(readings), self._last_step)

        log.info("GPU telemetry of GPUs %s every %.0f s", gpus.indices, interval)
        return GpuSampler(gpus, interval, record)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every queued metric point has been stored; False on timeout."""
        return self._metrics.flush(timeout) if self._metrics is not None else True

    @property
    def dropped_points(self) -> int:
        """Points dropped because the buffer bound was exceeded (or the API refused them)."""
        return self._metrics.dropped_points if self._metrics is not None else 0

    @property
    def pending_points(self) -> int:
        """Points logged but not yet stored by the API."""
        return self._metrics.pending_points if self._metrics is not None else 0

    # -- checkpoints -------------------------------------------------------------------------

    def save_checkpoint(
        self,
        step: int,
        state: Mapping[str, Any],
        *,
        async_save: bool = False,
        meta: dict[str, Any] | None = None,
    ) -> CheckpointPublic | None:
        """Save `state` (tensors and Stateful objects, e.g. `TrainState`) as the step's
        checkpoint, on every rank; it is registered once complete.

        Returns the registered checkpoint (on every rank). With `async_save`, returns None
        as soon as the state is copied to host memory, so training may change it; the
        write, rename and registration finish in the background and `wait_for_checkpoint()`
        (or the next save, or `finish()`) waits for them. A checkpoint still being written
        is never registered, so a crash meanwhile loses that checkpoint, not the last one.
        """
        return self._checkpoint_store.save(step, state, async_save=async_save, meta=meta)

    def wait_for_checkpoint(self) -> CheckpointPublic | None:
        """Wait for an async save; its checkpoint on rank 0 (None on others or if none)."""
        return self._checkpoint_store.wait()

    def load_checkpoint(
        self, state: Mapping[str, Any], *, checkpoint_id: int | None = None
    ) -> int | None:
        """Load into `state` the checkpoint CRUCIBLE_RESUME_FROM names (an id, or the URI of
        one of this run's checkpoints), else this run's latest; on every rank.

        With `checkpoint_id`, load that checkpoint instead, of any run (weights to start
        from, a model to evaluate or sample from); it must exist. `state` may hold only part
        of what the checkpoint has (e.g. the model's weights without the optimizer).

        The files are checked against the registered digest first; a mismatch raises
        `CheckpointCorrupt`. Returns the step loaded, or None when there is nothing to
        resume from.
        """
        return self._checkpoint_store.load(state, self._resume_from, checkpoint_id=checkpoint_id)

    def checkpointer(
        self, *, meta: dict[str, Any] | None = None, async_save: bool = False
    ) -> RunCheckpointer:
        """A training loop's checkpointer on this run (what `crucible.training.train.Trainer`
        takes): `save_checkpoint` with `meta` and `async_save` fixed, `load_checkpoint` and
        `wait_for_checkpoint`, as an object."""
        return RunCheckpointer(
            self._checkpoint_store, resume_from=self._resume_from, meta=meta, async_save=async_save
        )

    def latest_checkpoint(self) -> CheckpointPublic | None:
        """This run's newest live checkpoint (None before its first)."""
        return self._client.latest_checkpoint(self.id)

    def checkpoints(self) -> list[CheckpointPublic]:
        """This run's live checkpoints (those retention has not deleted), every page."""
        found: list[CheckpointPublic] = []
        cursor = None
        while True:
            page = self._client.list_checkpoints(self.id, cursor=cursor)
            found += page.items
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointPublic:
        """A registered checkpoint's record (step, URI, digest, `meta`), of any run."""
        return self._client.get_checkpoint(checkpoint_id)

    def should_checkpoint(self) -> bool:
        """True once this process got SIGTERM: save now, then `finish(preempted=True)`.

        Under torchrun this is a collective (every rank must call it at the same step): it
        is true on all ranks when any got the signal, so they all enter the save together.
        """
        return distributed.any_rank(self._preemption.is_set)

    @property
    def preempted(self) -> bool:
        """This process got SIGTERM (no collective)."""
        return self._preemption.is_set

    def step_control(self) -> RunStepControl:
        """A training loop's `StepControl` on this run (what `crucible.training.train.Trainer`
        takes): before every step, `should_checkpoint()` and the run's live profile request
        (`crucible runs profile`) in one collective; the request's progress goes back with
        the heartbeats, so it needs them (an attempt, and a heartbeat interval above 0)."""
        heartbeat = self._heartbeat
        return RunStepControl(
            preempted=lambda: self._preemption.is_set,
            profile_requests=self._profile_requests,
            report_now=heartbeat.beat_now if heartbeat is not None else lambda: None,
        )

    # -- datasets and evals ------------------------------------------------------------------

    def input_dataset(self, ref: str) -> InputDataset:
        """Resolve `name@version` or `name@latest` to verified local files and record it as
        one of this run's inputs. Raises `DatasetCorrupt` when the files differ from the
        registered digest."""
        return datasets.resolve_input(
            self._client,
            project=self.project,
            run_id=self.id,
            ref=ref,
            cache_dir=self._settings.home / "datasets",
        )

    def publish_dataset(
        self,
        name: str,
        path: str | Path,
        record_count: int | None = None,
        schema: dict[str, Any] | None = None,
    ) -> DatasetVersionPublic:
        """Register the file or directory at `path` as a new version of dataset `name`
        produced by this run (the same content again returns the existing version). With
        CRUCIBLE_OUTPUTS_URI set (object storage), the files are copied under it and the
        copy is registered."""
        return datasets.publish(
            self._client,
            project=self.project,
            run_id=self.id,
            name=name,
            path=Path(path).absolute(),
            record_count=record_count,
            schema=schema,
            outputs_uri=self._outputs_uri,
        )

    def input_artifact(self, ref: str) -> InputArtifact:
        """Resolve an artifact (its id, or its name: the newest of that name) to verified
        local files and record it as one of this run's inputs. Raises `ArtifactCorrupt` when
        the files differ from the registered digest."""
        return artifacts.resolve_input(
            self._client,
            project=self.project,
            run_id=self.id,
            ref=ref,
            cache_dir=self._settings.home / "artifacts",
        )

    def publish_artifact(
        self,
        kind: str,
        name: str,
        path: str | Path,
        *,
        sources: Sequence[Mapping[str, Any]] = (),
        meta: Mapping[str, Any] | None = None,
    ) -> ArtifactPublic:
        """Register the file or directory at `path` as artifact `name` ("model" or
        "tokenizer") made by this run from `sources` (`{"type": "dataset_version" |
        "checkpoint", "id": ...}`: lineage edges). With CRUCIBLE_OUTPUTS_URI set (object
        storage), the files are copied under it and the copy is registered."""
        return artifacts.publish(
            self._client,
            project=self.project,
            run_id=self.id,
            kind=kind,
            name=name,
            path=Path(path).absolute(),
            sources=sources,
            meta=meta or {},
            outputs_uri=self._outputs_uri,
        )

    def record_eval(
        self, checkpoint_id: int, suite: str, scores: Mapping[str, float]
    ) -> EvalResultPublic:
        """Record a suite's scores for a checkpoint, produced by this (eval) run."""
        return self._client.record_eval(
            EvalResultCreate(
                checkpoint_id=checkpoint_id, suite=suite, scores=dict(scores), eval_run_id=self.id
            )
        )

    @property
    def outputs_dir(self) -> Path:
        """Where the run writes the files it publishes, created: CRUCIBLE_OUTPUTS_DIR (on
        Kubernetes, storage every pod reaches), else `$CRUCIBLE_HOME/runs/<run>/outputs`."""
        self._outputs_dir.mkdir(parents=True, exist_ok=True)
        return self._outputs_dir

    @property
    def project(self) -> str:
        """The name of the run's project (asked of the API once)."""
        if self._project is None:
            self._project = self._client.get_project(self._record().project_id).name
        return self._project

    @property
    def name(self) -> str:
        """The run's name (asked of the API once)."""
        return self._record().name

    def _record(self) -> RunPublic:
        if self._run_record is None:
            self._run_record = self._client.get_run(self.id)
        return self._run_record

    # -- the end -----------------------------------------------------------------------------

    def finish(self, *, preempted: bool = False, timeout: float | None = 60.0) -> None:
        """Wait for an async checkpoint, send every queued metric (up to `timeout` seconds)
        and stop the background threads.

        With `preempted=True` it then exits the process with code 143 (128 + SIGTERM), the
        code of a process stopped by SIGTERM, so the executor or Kubernetes records an
        interruption to recover from rather than a success or a failure.
        """
        if not self._finished:
            self._finished = True
            atexit.unregister(self._finish_at_exit)
            try:
                self._checkpoint_store.wait()
            finally:
                if self._gpu_sampler is not None:
                    self._gpu_sampler.stop()
                if self._metrics is not None:
                    self._metrics.close(timeout)
                if self._heartbeat is not None:
                    self._heartbeat.stop()
                self._preemption.uninstall()
                self._client.close()
        if preempted:
            raise SystemExit(PREEMPTED_EXIT_CODE)

    def _finish_at_exit(self) -> None:
        if not self._finished:
            self.finish(timeout=10.0)

    def __enter__(self) -> "Run":
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.finish()


def init(
    *,
    run_id: int | None = None,
    attempt: int | None = None,
    api_url: str | None = None,
    token: str | None = None,
    checkpoint_uri: str | None = None,
    resume_from: str | None = None,
    max_buffered_points: int = DEFAULT_MAX_BUFFERED_POINTS,
    flush_interval: float = 2.0,
    heartbeat_interval: float | None = None,
    catch_sigterm: bool = True,
    max_backoff: float = 10.0,
    system_metrics_interval: float | None = None,
) -> Run:
    """Join the run this process was started for.

    Every argument defaults to the environment the operator or the local executor sets:
    CRUCIBLE_RUN_ID, CRUCIBLE_ATTEMPT, CRUCIBLE_API_URL, CRUCIBLE_TOKEN,
    CRUCIBLE_CHECKPOINT_URI (default file://$CRUCIBLE_HOME/runs/<run>/checkpoints) and
    CRUCIBLE_RESUME_FROM. Nothing here calls the API, so it works while the API is down.

    heartbeat_interval: seconds between heartbeats, CRUCIBLE_HEARTBEAT_INTERVAL or 15; 0
    sends none (and so hears of no live profile request).
    system_metrics_interval: seconds between readings of the GPUs (`gpu_telemetry.py`),
    CRUCIBLE_SYSTEM_METRICS_INTERVAL or 10; 0 turns the telemetry off.
    """
    environment = RunEnvironment()
    overrides: dict[str, Any] = {}
    if api_url is not None:
        overrides["api_url"] = api_url
    if token is not None:
        overrides["token"] = token
    settings = load_settings(**overrides)
    run_id = run_id if run_id is not None else environment.run_id
    if run_id is None:
        raise ValueError(
            "no run to join: set CRUCIBLE_RUN_ID (the local executor and the operator do) or "
            "pass run_id= to crucible.init()"
        )
    default_uri = storage.file_uri(settings.home / "runs" / str(run_id) / "checkpoints")
    return Run(
        settings=settings,
        run_id=run_id,
        attempt=attempt if attempt is not None else environment.attempt,
        checkpoint_uri=checkpoint_uri or environment.checkpoint_uri or default_uri,
        outputs_dir=environment.outputs_dir or contract.default_outputs_dir(settings.home, run_id),
        outputs_uri=environment.outputs_uri,
        resume_from=resume_from if resume_from is not None else environment.resume_from,
        max_buffered_points=max_buffered_points,
        flush_interval=flush_interval,
        heartbeat_interval=(
            heartbeat_interval if heartbeat_interval is not None else environment.heartbeat_interval
        ),
        catch_sigterm=catch_sigterm,
        max_backoff=max_backoff,
        system_metrics_interval=(
            system_metrics_interval
            if system_metrics_interval is not None
            else environment.system_metrics_interval
        ),
    )
