"""The local executor: starts attempts of local runs as process groups and reports them.

It talks to the control plane only through the REST client, like the operator does, so the
two backends share one state machine and one record of phases, attempts and events.
"""

import contextlib
import errno
import logging
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import IO, Any

from crucible.artifacts import code_package
from crucible.client import ApiError, CrucibleClient
from crucible.client.code_packages import describe_code_package, find_code_package
from crucible.client.http import TRANSIENT_STATUSES
from crucible.domain import contract, reasons
from crucible.domain.enums import Backend, Phase
from crucible.domain.origins import is_from_mlflow
from crucible.executor.cluster_report import ProcessGroup, Reporter
from crucible.executor.credentials import DEFAULT_LIFETIME, RunCredentials, RunToken
from crucible.executor.gpus import GpuPool
from crucible.executor.isolation import (
    Confinement,
    IsolationConfig,
    choose,
    launcher_command,
    launcher_env,
)
from crucible.executor.launch import build_command, build_env, read_termination_message, working_dir
from crucible.schemas.runs import AttemptEnd, AttemptStart, PhaseReport, RunPublic

log = logging.getLogger(__name__)


@dataclass
class ActiveAttempt:
    run_id: int
    run_created_at: datetime  # with the id, which run this is: SQLite reuses a deleted run's id
    number: int
    process: subprocess.Popen[bytes]
    gpus: list[int]
    log_file: IO[bytes]
    token: RunToken
    preempted: bool = False
    vanished: bool = False  # the run was deleted (its project force-deleted) while it ran
    stop_deadline: float | None = None
    seen_event_id: int = 0  # events before this one were already looked at
    started: float = field(default_factory=time.monotonic)


class LocalExecutor:
    def __init__(
        self,
        client: CrucibleClient,
        *,
        api_url: str,
        home: Path,
        gpus: GpuPool,
        grace_seconds: float = 120.0,
        run_token_lifetime: timedelta = DEFAULT_LIFETIME,
        isolation: IsolationConfig | None = None,
    ) -> None:
        """`client` holds the executor's own token, a global admin's: it never reaches a run,
        which gets a token of its own (RunCredentials), nor, where runs are isolated
        (`isolation`, by default as CRUCIBLE_RUN_ISOLATION's default), the home's files that
        hold it. Raises IsolationUnavailable where isolation is required and cannot be had."""
        isolation = isolation or IsolationConfig()
        self.isolated = choose(isolation)
        self._hidden_files = isolation.hidden_files
        self._client = client
        self._api_url = api_url
        self._credentials = RunCredentials(client, api_url=api_url, lifetime=run_token_lifetime)
        self._home = home
        self._gpus = gpus
        # Between SIGTERM and SIGKILL: time to checkpoint. An online RL run finishes the
        # round in progress first, which on a loaded laptop can take a minute.
        self._grace = grace_seconds
        self._active: dict[int, ActiveAttempt] = {}
        self._unrevoked: list[RunToken] = []  # of ended attempts, while the API did not answer
        self._lock = threading.Lock()
        self._reporter = Reporter(client)

    # -- the loop ----------------------------------------------------------------------------

    def run(self, stop: threading.Event, poll_seconds: float = 0.5) -> None:
        adopted = False
        while not stop.is_set():
            try:
                if not adopted:  # once the API answers
                    self.adopt_orphans()
                    adopted = True
                self.tick()
            except ApiError as exc:  # the API restarting must not kill the executor
                log.warning("executor tick failed: %s", exc)
            except Exception:  # nor may anything else: a dead executor strands every run
                log.exception("executor tick failed")
            stop.wait(poll_seconds)
        self.shutdown()

    def tick(self) -> None:
        with self._lock:
            self._retry_revocations()
            self._reap()
            self._watch_active()
            self._start_waiting()
            self._reporter.maybe_report(
                self._gpus.total,
                [
                    ProcessGroup(
                        run_id=a.run_id,
                        attempt=a.number,
                        pid=a.process.pid,
                        gpus=tuple(a.gpus),
                        stopping=a.stop_deadline is not None,
                    )
                    for a in self._active.values()
                ],
            )

    def adopt_orphans(self) -> None:
        """Runs left Running by an executor that died lost their processes: end those
        attempts as node-lost, so recovery (or the user) can start the next one, and revoke
        the tokens it could not."""
        with self._lock:
            self._credentials.revoke_left_behind(keep=set(self._active))
        for run in self._local_runs(Phase.Running):
            if run.id in self._active:
                continue
            attempts = self._client.list_attempts(run.id)
            if attempts and attempts[-1].ended_at is None:
                self._end_attempt(
                    run.id,
                    attempts[-1].number,
                    reasons.REASON_NODE_LOST,
                    None,
                    "the executor restarted",
                )
            self._report(
                run.id,
                Phase.Interrupted,
                reasons.REASON_NODE_LOST,
                "its processes were lost when the executor restarted",
            )

    # -- user actions ------------------------------------------------------------------------

    def preempt(self, run_id: int) -> bool:
        """SIGTERM the run's processes, like a node drain; the workload checkpoints and exits."""
        with self._lock:
            active = self._active.get(run_id)
            if active is None:
                return False
            self._preempt(active)
            return True

    def shutdown(self) -> None:
        with self._lock:
            for active in self._active.values():
                self._signal(active, signal.SIGTERM)
            deadline = time.monotonic() + self._grace
            for active in self._active.values():
                remaining = max(deadline - time.monotonic(), 0.1)
                try:
                    active.process.wait(remaining)
                except subprocess.TimeoutExpired:
                    self._signal(active, signal.SIGKILL)
            self._reap()

    def log_path(self, run_id: int, attempt: int) -> Path:
        return self._home / "runs" / str(run_id) / f"attempt-{attempt}.log"

    # -- steps of a tick ---------------------------------------------------------------------

    def _start_waiting(self) -> None:
        for phase in (Phase.Pending, Phase.WaitingForInputs, Phase.Scheduling):
            for run in self._local_runs(phase):
                if run.id not in self._active:
                    with self._alone(run.id):
                        self._start(run)

    def _start(self, run: RunPublic) -> None:
        inputs = run.resolved_inputs
        if inputs is None:
            resolution = self._client.resolve_inputs(run.id)
            if not resolution.ready:
                return  # waiting (the API moved it to WaitingForInputs) or failed
            inputs = {
                "datasets": resolution.datasets,
                "checkpoint": resolution.checkpoint,
                "artifacts": resolution.artifacts,
            }
        self._try_start(run, inputs)

    def _try_start(self, run: RunPublic, inputs: dict[str, Any]) -> None:
        gpus = self._gpus.take(run.gpus)
        if gpus is None:
            if run.gpus > self._gpus.total:
                self._report(
                    run.id,
                    Phase.Failed,
                    reasons.REASON_UNSCHEDULABLE,
                    f"needs {run.gpus} GPUs; this machine has {self._gpus.total}",
                )
            elif run.phase != Phase.Scheduling:
                self._report(
                    run.id,
                    Phase.Scheduling,
                    reasons.REASON_UNSCHEDULABLE,
                    f"waiting for {run.gpus} free GPUs",
                )
            return
        command = build_command(run)
        if run.phase != Phase.Scheduling:
            self._report(run.id, Phase.Scheduling, "", "")
        start = run.next_attempt_start()
        token: RunToken | None = None
        try:
            attempt = self._client.start_attempt(run.id, start)
            # Minted for this attempt alone: it dies with the attempt (_reap), so what user
            # code leaks (printed to a log any project viewer reads) stops working then.
            token = self._credentials.mint(run, attempt.number)
            self._launch(run, inputs, command, attempt.number, start, gpus, token)
        finally:
            if run.id not in self._active:  # it never started: nothing holds the GPUs or token
                self._gpus.give_back(gpus)
                if token is not None:
                    self._revoke(token)

    def _launch(
        self,
        run: RunPublic,
        inputs: dict[str, Any],
        command: list[str],
        number: int,
        start: AttemptStart,
        gpus: list[int],
        token: RunToken,
    ) -> None:
        """Start attempt `number`'s processes; one that cannot start is ended here."""
        # Asked first: an API that does not answer leaves no log file open.
        project_runs = self._project_run_ids(run.project_id) if self.isolated else []
        path = self.log_path(run.id, number)
        path.parent.mkdir(parents=True, exist_ok=True)
        log_file = path.open("ab")
        try:
            code_dir = self._code_dir(run, inputs)
        except (code_package.PackageError, OSError) as exc:
            log_file.write(f"crucible: {exc}\n".encode())
            log_file.close()
            message = f"attempt {number} failed before it started: {exc}"
            self._end_attempt(run.id, number, reasons.REASON_ERROR_EXIT, None, message)
            self._report(run.id, Phase.Interrupted, reasons.REASON_ERROR_EXIT, message)
            return
        env = build_env(
            run,
            attempt=number,
            api_url=self._api_url,
            token=token.secret,
            home=self._home,
            gpus=gpus,
            resume_from=start.resumed_from_checkpoint_id,
            inputs=inputs,
            code_dir=code_dir,
        )
        cwd = working_dir(run) or str(self._home)
        try:
            if self.isolated:
                process = self._spawn_isolated(
                    run, project_runs, command, env, cwd, code_dir, log_file
                )
            else:
                process = subprocess.Popen(  # noqa: S603 - the command is the user's own spec
                    command,
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    # Its own process group, so signals reach torchrun's children too.
                    start_new_session=True,
                    cwd=cwd,
                )
        except OSError as exc:
            log_file.close()
            self._end_attempt(
                run.id, number, reasons.REASON_ERROR_EXIT, None, f"could not start: {exc}"
            )
            self._report(
                run.id,
                Phase.Failed,
                reasons.REASON_ERROR_EXIT,
                f"could not start the workload: {exc}",
            )
            return
        self._active[run.id] = ActiveAttempt(
            run.id, run.created_at, number, process, gpus, log_file, token
        )
        self._report(run.id, Phase.Running, "", f"attempt {number}, pid {process.pid}")

    def _spawn_isolated(
        self,
        run: RunPublic,
        project_runs: list[int],
        command: list[str],
        env: dict[str, str],
        cwd: str,
        code_dir: Path | None,
        log_file: IO[bytes],
    ) -> subprocess.Popen[bytes]:
        """Start the attempt in its namespaces (isolation.py): the launcher is the process
        the executor watches and signals, its group the run's, as without isolation."""
        # Checked here, where a missing program or folder fails the start as Popen would,
        # rather than as an exit code of the launcher's.
        cwd = os.path.abspath(cwd)
        if not os.path.isdir(cwd):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), cwd)
        # A program named by a path is looked for from the working directory, as Popen does.
        program = os.path.join(cwd, command[0]) if os.sep in command[0] else command[0]
        if shutil.which(program, path=env.get("PATH")) is None:
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), command[0])
        confinement = Confinement.for_run(
            home=self._home,
            run_id=run.id,
            project_id=run.project_id,
            project_runs=project_runs,
            code_dir=code_dir,
            hidden_files=self._hidden_files,
        )
        process = subprocess.Popen(  # noqa: S603 - our own interpreter and launcher
            launcher_command(),
            env=launcher_env(),
            stdin=subprocess.PIPE,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            cwd="/",
        )
        assert process.stdin is not None
        # A launcher that failed before reading ends with a code and a line in the log.
        with contextlib.suppress(BrokenPipeError), process.stdin:
            process.stdin.write(confinement.request(command, env, cwd=cwd))
        return process

    def _project_run_ids(self, project_id: int) -> list[int]:
        """The ids of the project's runs, whose folders the attempt may read."""
        name = self._client.get_project(project_id).name
        ids: list[int] = []
        cursor: str | None = None
        while True:
            page = self._client.list_runs(project=name, limit=1000, cursor=cursor)
            ids += [r.id for r in page.items if r.project_id == project_id]
            cursor = page.next_cursor
            if cursor is None:
                return ids

    def _code_dir(self, run: RunPublic, inputs: dict[str, Any]) -> Path | None:
        """The run's code package, checked and unpacked under CRUCIBLE_HOME/code (once per
        archive, checked again each attempt); None for a run without one."""
        spec = run.manifest.get("spec", {})
        artifact_id = contract.code_package_id(spec, inputs)
        if artifact_id is None:
            if spec.get("codePackage"):
                raise code_package.PackageError(
                    f"codePackage {spec['codePackage']} was not pinned to an artifact"
                )
            return None
        artifact = find_code_package(self._client, artifact_id)
        return code_package.fetch_cached(
            artifact.uri, artifact.digest, self._home / "code", what=describe_code_package(artifact)
        )

    def _watch_active(self) -> None:
        """Act on what users asked through the API: cancel stops, preempt drains, deleting
        the run (with its project) kills it."""
        for active in list(self._active.values()):
            with self._alone(active.run_id):
                self._watch(active)

    def _watch(self, active: ActiveAttempt) -> None:
        if active.stop_deadline is not None:
            if time.monotonic() > active.stop_deadline:
                self._signal(active, signal.SIGKILL)
            return
        run = self._run_unless_deleted(active)
        if run is None:
            return
        phase = run.phase
        if phase == Phase.Cancelled:
            self._signal(active, signal.SIGTERM)
            active.stop_deadline = time.monotonic() + self._grace
            return
        if phase != Phase.Running:
            # Judged from outside (the heartbeat watchdog found it hung): stop it now.
            self._signal(active, signal.SIGKILL)
            active.stop_deadline = time.monotonic()
            return
        try:
            events = self._client.list_events(active.run_id, after_id=active.seen_event_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self._forget(active)
            return
        if events:
            active.seen_event_id = events[-1].id
        if any(
            e.type == reasons.EVENT_PREEMPT_REQUESTED and e.data.get("attempt") == active.number
            for e in events
        ):
            self._preempt(active)

    def _reap(self) -> None:
        for run_id, active in list(self._active.items()):
            code = active.process.poll()
            if code is None:
                continue
            # Reported first: if the API is busy the attempt stays here and is reported again
            # next tick (both reports are idempotent), rather than being forgotten as Running.
            with self._alone(run_id):
                if not active.vanished:
                    self._finish(active, code)
                del self._active[run_id]
                active.log_file.close()
                self._gpus.give_back(active.gpus)
                self._revoke(active.token)

    def _finish(self, active: ActiveAttempt, code: int) -> None:
        """Record how the attempt ended. A bad end moves the run to Interrupted; the recovery
        worker then decides between another attempt and Failed, by the run's budgets."""
        run = self._run_unless_deleted(active)
        if run is None:
            return
        if run.phase == Phase.Cancelled:
            self._end(active, reasons.REASON_CANCELLED_BY_USER, code, "stopped on cancel")
        elif run.phase != Phase.Running:
            # Moved on without us (the attempt was already judged lost): record, don't judge.
            self._end(active, reasons.REASON_NODE_LOST, code, f"exited while {run.phase}")
        elif active.preempted:
            self._end(active, reasons.REASON_PREEMPTED, code, "preempted (SIGTERM)")
            self._report(
                run.id,
                Phase.Interrupted,
                reasons.REASON_PREEMPTED,
                f"attempt {active.number} preempted",
            )
        elif code == 0:
            self._end(active, reasons.REASON_COMPLETED, code, "")
            self._report(run.id, Phase.Succeeded, reasons.REASON_COMPLETED, "")
        else:
            why = f"exit code {code}" if code > 0 else f"killed by signal {-code}"
            said = read_termination_message(self._home, run.id, active.number)
            message = (
                f"attempt {active.number} failed: {why}"
                + (f": {said}" if said else "")
                + f"; see {self.log_path(run.id, active.number)}"
            )
            self._end(active, reasons.REASON_ERROR_EXIT, code, message)
            self._report(run.id, Phase.Interrupted, reasons.REASON_ERROR_EXIT, message)

    # -- plumbing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _alone(self, run_id: int) -> Iterator[None]:
        """One run the API refuses to move (a 4xx it will answer again: a conflict, a spec it
        rejects) must not stop the executor for every other run; an API that is down or busy
        ends the tick, as nothing would get through."""
        try:
            yield
        except ApiError as exc:
            if exc.status < 400 or exc.status in TRANSIENT_STATUSES:
                raise
            log.warning("run %s: %s", run_id, exc)

    def _run_unless_deleted(self, active: ActiveAttempt) -> RunPublic | None:
        """The attempt's run; None once it is deleted (its id missing, or another run's
        since), after stopping its processes."""
        try:
            run = self._client.get_run(active.run_id)
        except ApiError as exc:
            if exc.status != 404:
                raise
        else:
            if run.created_at == active.run_created_at:
                return run
        self._forget(active)
        return None

    def _forget(self, active: ActiveAttempt) -> None:
        """The run is gone (a project force-deleted under it): nothing is left to report to
        or to checkpoint for, so its processes are killed now and reaped without a report;
        every other run carries on."""
        log.warning(
            "run %s was deleted while attempt %s ran: stopping it", active.run_id, active.number
        )
        active.vanished = True
        active.stop_deadline = time.monotonic()
        if active.process.returncode is None:  # not reaped yet, so its group is still its own
            self._signal(active, signal.SIGKILL)

    def _revoke(self, token: RunToken) -> None:
        try:
            self._credentials.revoke(token)
        except ApiError as exc:
            log.warning("could not revoke run token %s yet: %s", token.id, exc)
            self._unrevoked.append(token)

    def _retry_revocations(self) -> None:
        pending, self._unrevoked = self._unrevoked, []
        for token in pending:
            self._revoke(token)

    def _local_runs(self, phase: Phase) -> list[RunPublic]:
        page = self._client.list_runs(phase=phase.value, descending=False, limit=1000)
        # An MLflow client's run has no process to start or adopt: the client reports its end.
        return [
            r for r in page.items if r.backend == Backend.local and not is_from_mlflow(r.manifest)
        ]

    def _end(self, active: ActiveAttempt, reason: str, code: int | None, message: str) -> None:
        self._end_attempt(active.run_id, active.number, reason, code, message)

    def _end_attempt(
        self, run_id: int, number: int, reason: str, code: int | None, message: str
    ) -> None:
        try:
            self._client.end_attempt(
                run_id, number, AttemptEnd(end_reason=reason, exit_code=code, message=message)
            )
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Someone else (the heartbeat watchdog, another executor) ended it first.
            log.info("attempt %s of run %s was already ended: %s", number, run_id, exc)

    def _report(self, run_id: int, phase: Phase, reason: str, message: str) -> None:
        self._client.report_phase(run_id, PhaseReport(phase=phase, reason=reason, message=message))

    def _preempt(self, active: ActiveAttempt) -> None:
        active.preempted = True
        self._signal(active, signal.SIGTERM)
        active.stop_deadline = time.monotonic() + self._grace

    @staticmethod
    def _signal(active: ActiveAttempt, signum: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(active.process.pid, signum)
