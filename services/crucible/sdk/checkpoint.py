"""Checkpoints with torch.distributed.checkpoint (DCP), written atomically and registered
only once complete.

Every rank writes its shards into one temporary directory (`.tmp-step-00000100`).
When all have finished, rank 0 fsyncs it, renames it to `step-00000100`, computes its digest
and size and registers it. A crash at any point before that leaves either a temporary
directory (never registered, replaced by the next save of that step) or an unregistered
final directory (re-registered if the next save of that step has the same content, refused
otherwise), so the control plane only ever points at complete checkpoints. On object
storage (no rename) the shards go straight to `step-00000100.a<attempt>`, and registering
it is the commit: files no record names are never resumed from.

Resuming reads the checkpoint record, recomputes the digest of the files and refuses to load
when it differs: a truncated or altered checkpoint is never used.
"""

import contextlib
import errno
import importlib
import logging
import os
import shutil
import threading
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from crucible.artifacts import remote, storage
from crucible.artifacts.digest import Content, content_of, content_of_remote
from crucible.client import CrucibleClient
from crucible.schemas.lineage import CheckpointCreate, CheckpointPublic
from crucible.sdk import distributed

if TYPE_CHECKING:
    from torch.distributed.checkpoint.filesystem import FileSystemWriter
    from torch.distributed.checkpoint.storage import StorageReader

log = logging.getLogger(__name__)

# torch.distributed.checkpoint takes seconds to import (it pulls in DTensor and sympy), so
# it is imported on first use: a process that never saves or loads a checkpoint (a data
# generation job, a script that only logs metrics) starts that much faster. The names stay
# module attributes (PEP 562), so tests can still replace them.
_LAZY: dict[str, tuple[str, str]] = {
    "FileSystemReader": ("torch.distributed.checkpoint.filesystem", "FileSystemReader"),
    "FileSystemWriter": ("torch.distributed.checkpoint.filesystem", "FileSystemWriter"),
    "get_state_dict": ("torch.distributed.checkpoint.state_dict", "get_state_dict"),
    "set_state_dict": ("torch.distributed.checkpoint.state_dict", "set_state_dict"),
    "dcp_load": ("torch.distributed.checkpoint.state_dict_loader", "load"),
    "dcp_save": ("torch.distributed.checkpoint.state_dict_saver", "save"),
    "dcp_async_save": ("torch.distributed.checkpoint.state_dict_saver", "async_save"),
    "DCPStateful": ("torch.distributed.checkpoint.stateful", "Stateful"),
    # Private helpers of DCP's own staging (BlockingAsyncStager builds and fills its cache
    # with them); the async path uses them to keep that cache valid, see `_async_writer`.
    "create_cpu_state_dict": ("torch.distributed._state_dict_utils", "_create_cpu_state_dict"),
    "same_layout": ("torch.distributed._state_dict_utils", "_check_state_dict_similarity"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attribute = _LAZY[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def _dcp(name: str) -> Callable[..., Any]:
    """The DCP function or class `name`: a replacement set on the module, else the real one."""
    value = globals().get(name)
    return value if value is not None else __getattr__(name)  # type: ignore[no-any-return]


class CheckpointError(Exception):
    """A checkpoint cannot be written, found or trusted."""


class CheckpointCorrupt(CheckpointError):
    """The files of a checkpoint do not match the digest it was registered with."""


class CheckpointStorageFull(CheckpointError):
    """The checkpoint storage ran out of space (or quota) while a checkpoint was written. The
    partial files are removed; the checkpoints before it are untouched and still resumable."""


# What a full volume or an exhausted quota raises.
_FULL = (errno.ENOSPC, errno.EDQUOT)
# How the same shows when it is not an OSError: torch.save's zip writer reports a short
# write as "unexpected pos", and some layers keep only the text of the OSError.
_FULL_TEXTS = ("No space left on device", "Disk quota exceeded", "unexpected pos")


def _storage_full(exc: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT error behind `exc`, if any. DCP wraps a writer's error in its own
    CheckpointException (with the failures of each rank in `failures`), and a background
    write may chain it, so the causes are searched, not just the error itself."""
    seen: set[int] = set()
    pending: list[BaseException] = [exc]
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in _FULL:
            return current
        if any(text in str(current) for text in _FULL_TEXTS):
            return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        pending.extend(e for e in (current.__cause__, current.__context__) if e is not None)
        failures = getattr(current, "failures", None)
        if isinstance(failures, Mapping):
            pending.extend(f for f in failures.values() if isinstance(f, BaseException))
    return None


def checkpoint_name(step: int) -> str:
    return f"step-{step:08d}"


@dataclass(frozen=True)
class _Outcome:
    """What rank 0 tells every rank after a save or before a load."""

    checkpoint: CheckpointPublic | None
    error: str | None = None
    corrupt: bool = False

    def unwrap(self) -> CheckpointPublic | None:
        if self.error is not None:
            raise (CheckpointCorrupt if self.corrupt else CheckpointError)(self.error)
        return self.checkpoint


class CheckpointStore:
    """Saves and loads one run's checkpoints under `base_uri`; every rank must call both."""

    def __init__(
        self,
        client: CrucibleClient,
        *,
        run_id: int,
        attempt: int | None,
        base_uri: str,
    ) -> None:
        self._client = client
        self._run_id = run_id
        self._attempt = attempt
        self._base_uri = base_uri.rstrip("/")
        self._pending: Future[CheckpointPublic | None] | None = None
        self._async_group: Any = None
        self._async_writer_cached: FileSystemWriter | None = None
        """The writer every async save reuses, with its staged copy of the state cached."""

    # -- saving ------------------------------------------------------------------------------

    def save(
        self, step: int, state: Mapping[str, Any], *, async_save: bool = False, meta: Any = None
    ) -> CheckpointPublic | None:
        self.wait()  # one save at a time: the next may reuse the staging buffers
        temp_uri, final_uri = self._uris(step)
        with self._storage_errors(step):
            self._prepare(temp_uri)
        state_dict = dict(state)
        if not async_save:
            with self._storage_errors(step):
                writer = self._writer(temp_uri)
            try:
                _dcp("dcp_save")(
                    state_dict, storage_writer=writer, no_dist=not distributed.is_distributed()
                )
            except BaseException as exc:  # DCP's CheckpointException is a BaseException
                error = self._save_error(exc, step, temp_uri)
                if error is exc:
                    raise
                raise error from exc
            outcome = self._commit_on_rank0(step, temp_uri, final_uri, meta)
            return distributed.broadcast_from_rank0(outcome).unwrap()

        if distributed.is_distributed() and self._async_group is None:
            # The writes finish in a background thread; their collectives get a group of their
            # own so they never interleave with the training loop's.
            self._async_group = dist.new_group(backend="gloo")
        # The Stateful objects give their state dicts here rather than inside async_save, so
        # that the writer's cached buffers can be checked against them first.
        stateful: Any = _dcp("DCPStateful")
        state_dict = {
            key: value.state_dict() if isinstance(value, stateful) else value
            for key, value in state_dict.items()
        }
        with self._storage_errors(step):
            writer = self._async_writer(temp_uri, state_dict)
        # When async_save returns, the copy of every tensor is complete and only the write is
        # left: no `async_stager` is given and the writer is a FileSystemWriter (FsspecWriter
        # derives from it), which is itself a BlockingAsyncStager, so async_save stages through
        # `writer.stage()`. That copies each tensor into the cached host buffers with a
        # blocking `copy_` and returns the staged dict itself, not a Future; async_save then
        # hands only that dict to the background thread that writes the files
        # (torch/distributed/checkpoint/state_dict_saver.py of the pinned torch 2.15, and of
        # the torch the GPU benchmark of async saves ran). So the caller may change the
        # weights (an optimizer step) as soon as `save` returns.
        written = _dcp("dcp_async_save")(
            state_dict,
            storage_writer=writer,
            process_group=self._async_group,
            no_dist=not distributed.is_distributed(),
        )
        assert isinstance(written, Future)
        pending: Future[CheckpointPublic | None] = Future()
        is_rank0 = distributed.rank() == 0

        def finish() -> None:
            try:
                written.result()
                if is_rank0:
                    pending.set_result(self._commit(step, temp_uri, final_uri, meta))
                else:
                    pending.set_result(None)
            except BaseException as exc:
                pending.set_exception(self._save_error(exc, step, temp_uri))

        threading.Thread(target=finish, name="crucible-checkpoint", daemon=True).start()
        self._pending = pending
        return None

    @contextlib.contextmanager
    def _storage_errors(self, step: int) -> Iterator[None]:
        """What the storage raises before any shard is written (a store that refuses or does
        not answer, a volume not mounted) becomes a CheckpointError that names the step and
        the storage, as DCP's own errors do once the writes began."""
        try:
            yield
        except Exception as exc:
            raise CheckpointError(
                f"checkpoint at step {step} could not be written to {self._base_uri}: "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _uris(self, step: int) -> tuple[str, str]:
        """Where a save of `step` writes, and the name it is registered under.

        On a volume: a temporary directory, renamed when complete. Object stores have no
        rename (a copy of every object would double the bytes written), so there the files
        go straight to their final prefix and the registration is what makes them a
        checkpoint: nothing resumes from files no record names. The prefix carries the
        attempt, so a later attempt never overwrites files an earlier one registered."""
        name = checkpoint_name(step)
        if storage.local_path(self._base_uri) is None:
            if self._attempt is not None:
                name += f".a{self._attempt}"
            final_uri = storage.join(self._base_uri, name)
            return final_uri, final_uri
        return storage.join(self._base_uri, storage.TEMP_PREFIX + name), storage.join(
            self._base_uri, name
        )

    def wait(self) -> CheckpointPublic | None:
        """Wait for the async save in flight; its record on rank 0, None elsewhere or if none."""
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else None

    def _save_error(self, exc: BaseException, step: int, temp_uri: str) -> BaseException:
        """What a failed save raises. A full storage becomes CheckpointStorageFull, after
        removing what was written of this checkpoint (it would only take the space a later
        save needs). DCP's own CheckpointException derives from BaseException, so
        `except Exception` would miss it: it becomes a CheckpointError naming the step.
        Anything else (a KeyboardInterrupt, a bug) is returned as it is."""
        full = _storage_full(exc)
        if full is None:
            if type(exc).__name__ == "CheckpointException":
                return CheckpointError(
                    f"checkpoint at step {step} could not be written to {self._base_uri}: {exc}"
                )
            return exc
        path = storage.local_path(temp_uri)
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
        else:
            remote.remove(temp_uri)
        return CheckpointStorageFull(
            f"checkpoint at step {step} could not be written: the storage under "
            f"{self._base_uri} is full ({full.strerror or 'no space left'}); its partial files "
            "were removed and the earlier checkpoints are intact. Free space or raise the "
            "volume's size, then resume."
        )

    def _prepare(self, temp_uri: str) -> None:
        """Rank 0 clears what a crashed earlier save of this step left; then everyone writes."""
        if distributed.rank() == 0:
            path = storage.local_path(temp_uri)
            if path is not None:
                path.parent.mkdir(parents=True, exist_ok=True)
                if path.exists():
                    shutil.rmtree(path)
            else:
                remote.remove(temp_uri)
        distributed.barrier()

    def _writer(self, uri: str, *, cache_staged_state_dict: bool = False) -> "FileSystemWriter":
        """A new writer; for a remote URI an FsspecWriter, itself a FileSystemWriter."""
        target = self._writer_target(uri)
        writer: FileSystemWriter
        if isinstance(target, Path):
            writer = _dcp("FileSystemWriter")(
                target, sync_files=True, cache_staged_state_dict=cache_staged_state_dict
            )
        else:
            writer = _fsspec_storage().FsspecWriter(
                target, sync_files=True, cache_staged_state_dict=cache_staged_state_dict
            )
        return writer

    @staticmethod
    def _writer_target(uri: str) -> Path | str:
        """What a writer is pointed at: the local path of a file URI, else the URI (fsspec)."""
        path = storage.local_path(uri)
        return path if path is not None else uri

    def _async_writer(self, uri: str, state_dict: dict[str, Any]) -> "FileSystemWriter":
        """The writer every async save reuses, pointed at `uri`.

        It is made with `cache_staged_state_dict=True`: the first async save allocates host
        buffers for the whole state (pinned when an accelerator can pin them) and every later
        one copies into the same buffers, which is what makes a later save cheap (the first
        save's allocation dominates its blocking time; benchmarks/gpu/README.md). The
        buffers stay allocated for the run. Reusing them is safe because `save` waits for the
        previous write first. They fit only a state of the same layout (keys, tensor shapes
        and dtypes): a state laid out otherwise gets a new writer, whose first save allocates
        afresh.

        Remote URIs cache the same way: DCP's FsspecWriter is a FileSystemWriter, so it stages
        identically, and its `reset(uri)` re-resolves the filesystem from the URI, as its
        constructor did (`_writer` passes no storage options that a reset would lose).
        """
        writer = self._async_writer_cached
        if writer is not None and (
            writer.state_dict_cache is None
            or _dcp("same_layout")(state_dict, writer.state_dict_cache)
        ):
            writer.reset(self._writer_target(uri))
            return writer
        writer = self._writer(uri, cache_staged_state_dict=True)
        if not _can_pin_memory():
            # BlockingAsyncStager allocates its cache pinned, which fails without an
            # accelerator (a CPU-only host); give it the same buffers unpinned instead.
            writer.state_dict_cache = _dcp("create_cpu_state_dict")(state_dict)
        self._async_writer_cached = writer
        return writer

    def _commit_on_rank0(self, step: int, temp_uri: str, final_uri: str, meta: Any) -> _Outcome:
        if distributed.rank() != 0:
            return _Outcome(None)
        try:
            return _Outcome(self._commit(step, temp_uri, final_uri, meta))
        except Exception as exc:
            log.exception("crucible: checkpoint at step %d was not committed", step)
            return _Outcome(None, f"checkpoint at step {step} was not committed: {exc}")

    def _commit(self, step: int, temp_uri: str, final_uri: str, meta: Any) -> CheckpointPublic:
        temp, final = storage.local_path(temp_uri), storage.local_path(final_uri)
        if temp is not None and final is not None:
            content = self._commit_local(step, temp, final)
        else:
            content = self._commit_remote(temp_uri, final_uri)
        record = self._client.register_checkpoint(
            self._run_id,
            CheckpointCreate(
                step=step,
                uri=final_uri,
                digest=content.digest,
                size_bytes=content.size_bytes,
                attempt=self._attempt,
                meta=meta or {},
            ),
        )
        log.info("crucible: checkpoint %d at step %d registered (%s)", record.id, step, final_uri)
        return record

    def _commit_local(self, step: int, temp: Path, final: Path) -> Content:
        if final.exists():
            # A previous attempt renamed it but died before registering it (or registered it).
            new, old = content_of(temp), content_of(final)
            if new.digest != old.digest:
                raise CheckpointError(
                    f"{final} already holds a different checkpoint for step {step} "
                    f"({old.digest}, this one {new.digest}); remove it or save under another step"
                )
            shutil.rmtree(temp)
            return old
        storage.commit_dir(temp, final)
        return content_of(final)

    def _commit_remote(self, temp_uri: str, final_uri: str) -> Content:
        # Written in place (see `_uris`): the digest of what is there is what is registered.
        assert temp_uri == final_uri
        fs, root = _filesystem(final_uri)
        fs.invalidate_cache(root)
        return content_of_remote(fs, root)

    # -- loading -----------------------------------------------------------------------------

    def load(
        self,
        state: Mapping[str, Any],
        resume_from: str | None,
        *,
        checkpoint_id: int | None = None,
    ) -> int | None:
        """Load into `state` the checkpoint `checkpoint_id` (of any run), else the one
        `resume_from` names, else the run's latest.

        Returns its step, or None when there is nothing to resume from (a fresh start; never
        with `checkpoint_id`, which must exist).
        """
        outcome = _Outcome(None)
        # Rank 0 checks and the others hear its answer; a process outside any group (one of
        # several independent replicas) checks for itself.
        if not distributed.is_distributed() or distributed.rank() == 0:
            try:
                if checkpoint_id is not None:
                    checkpoint: CheckpointPublic | None = self._client.get_checkpoint(checkpoint_id)
                else:
                    checkpoint = self._find(resume_from)
                if checkpoint is not None:
                    self._verify(checkpoint)
                outcome = _Outcome(checkpoint)
            except CheckpointCorrupt as exc:
                outcome = _Outcome(None, str(exc), corrupt=True)
            except Exception as exc:
                what = "resume" if checkpoint_id is None else f"load checkpoint {checkpoint_id}"
                outcome = _Outcome(None, f"cannot {what}: {exc}")
        checkpoint = distributed.broadcast_from_rank0(outcome).unwrap()
        if checkpoint is None:
            return None
        path = storage.local_path(checkpoint.uri)
        reader: StorageReader = (
            _dcp("FileSystemReader")(path)
            if path is not None
            else _fsspec_storage().FsspecReader(checkpoint.uri)
        )
        _dcp("dcp_load")(
            dict(state), storage_reader=reader, no_dist=not distributed.is_distributed()
        )
        log.info(
            "crucible: loaded checkpoint %d (run %d, step %d)",
            checkpoint.id,
            checkpoint.run_id,
            checkpoint.step,
        )
        return checkpoint.step

    def _find(self, resume_from: str | None) -> CheckpointPublic | None:
        if resume_from is None:
            return self._client.latest_checkpoint(self._run_id)
        if resume_from.isascii() and resume_from.isdigit():
            return self._client.get_checkpoint(int(resume_from))
        uri = resume_from.rstrip("/")
        cursor = None
        while True:
            page = self._client.list_checkpoints(self._run_id, cursor=cursor)
            for checkpoint in page.items:
                if checkpoint.uri.rstrip("/") == uri:
                    return checkpoint
            if page.next_cursor is None:
                raise CheckpointError(
                    f"CRUCIBLE_RESUME_FROM={resume_from!r} is not a checkpoint registered for "
                    f"run {self._run_id}, so its digest cannot be checked; pass the checkpoint id"
                )
            cursor = page.next_cursor

    def _verify(self, checkpoint: CheckpointPublic) -> None:
        path = storage.local_path(checkpoint.uri)
        if path is not None:
            if not path.is_dir():
                raise CheckpointCorrupt(
                    f"checkpoint {checkpoint.id} (step {checkpoint.step}) is missing: no "
                    f"directory at {path}"
                )
            actual = content_of(path)
        else:
            _filesystem(checkpoint.uri)  # a missing driver is a CheckpointError, not corrupt
            found = remote.content(checkpoint.uri)
            if found is None:
                raise CheckpointCorrupt(
                    f"checkpoint {checkpoint.id} (step {checkpoint.step}) is missing: nothing "
                    f"at {checkpoint.uri}"
                )
            actual = found
        if actual.digest != checkpoint.digest:
            raise CheckpointCorrupt(
                f"checkpoint {checkpoint.id} (step {checkpoint.step}, {checkpoint.uri}) does not "
                f"match its registered digest: expected {checkpoint.digest}, found "
                f"{actual.digest} ({actual.size_bytes} of {checkpoint.size_bytes} bytes); it is "
                "truncated or altered, so it is not loaded"
            )


class RunCheckpointer:
    """A training loop's checkpointer on a run's `CheckpointStore` (`Run.checkpointer()`),
    the `save` / `wait` / `load` that `crucible.training.checkpoint.Checkpointer` asks for:
    every save registered with `meta`, resuming from CRUCIBLE_RESUME_FROM or the run's latest.

    With `async_save`, `save` returns once the state is copied to host memory; the store
    writes and registers the checkpoint in the background and `wait()` (or the next save,
    or `run.finish()`) blocks until it is registered.
    """

    def __init__(
        self,
        store: CheckpointStore,
        *,
        resume_from: str | None,
        meta: Mapping[str, Any] | None = None,
        async_save: bool = False,
    ) -> None:
        self.store = store
        self.resume_from = resume_from
        self.meta = dict(meta or {})
        self.async_save = async_save

    def save(self, step: int, state: Mapping[str, Any]) -> None:
        self.store.save(step, state, async_save=self.async_save, meta=self.meta)

    def wait(self) -> None:
        self.store.wait()

    def load(self, state: Mapping[str, Any]) -> int | None:
        return self.store.load(state, self.resume_from)


def _can_pin_memory() -> bool:
    """Whether host memory can be pinned here: only with an accelerator to pin it for."""
    accelerator = getattr(torch, "accelerator", None)  # torch >= 2.6
    if accelerator is not None:
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def _fsspec_storage() -> Any:
    """DCP's fsspec reader and writer; only non-file URIs need them."""
    remote.configure_defaults()
    try:
        return importlib.import_module("torch.distributed.checkpoint.fsspec_filesystem")
    except ImportError:  # older torch ships them under a private name
        return importlib.import_module("torch.distributed.checkpoint._fsspec_filesystem")


def _filesystem(uri: str) -> tuple[Any, str]:
    try:
        return remote.filesystem(uri)
    except remote.StorageUnavailable as exc:
        raise CheckpointError(str(exc)) from exc


class TrainState:
    """A model and its optimizer under fixed keys, as DCP wants them (a DCP `Stateful`).

    Goes through `torch.distributed.checkpoint.state_dict`, which keys optimizer state by
    parameter name instead of index, so it loads into a rebuilt (or resharded) model.
    """

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model_state, optimizer_state = _dcp("get_state_dict")(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _dcp("set_state_dict")(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
        )
