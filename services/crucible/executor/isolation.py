"""What of CRUCIBLE_HOME a local run may reach, and the namespaces that enforce it.

The embedded executor runs every attempt as its own OS user, so without isolation a run's
code could read the home's admin token, open the SQLite database, read other projects' run
folders and the executor's memory: a project editor would be a global admin. Isolated
(Linux user, mount and PID namespaces, `isolation_child`), an attempt sees the home as an
empty tmpfs holding only its own run folder (read-write), its project's other runs' folders
(read-only: a run reads what an earlier run of its project produced), its project's storage
prefix `projects/<id>/` (read-write), the shared `packages/` and its code package
(read-only); the database and token files kept outside the home are covered, and /proc shows
only the run's own processes. The network, the GPUs and the rest of the file system stay
the host's. docs/local-mode.md, "What a local run can see".
"""

import enum
import functools
import json
import logging
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.engine import make_url

from crucible.domain.errors import CrucibleError
from crucible.domain.storage_uris import HOME_SHARED_DIRS, PROJECTS_DIR, RUNS_DIR
from crucible.executor.launch import inherited_env
from crucible.settings import Settings

log = logging.getLogger(__name__)

_BOOTSTRAP = (
    "import json, sys\n"
    "request = json.loads(sys.stdin.buffer.read())\n"
    "sys.path[:] = request['sys_path']\n"
    "from crucible.executor.isolation_child import main\n"
    "main(request)\n"
)
"""The launcher's first lines. `-I` keeps the run's PYTHON* variables and the user's site
out of a process that runs before isolation, with the executor's privileges; the run's own
environment reaches only the workload's exec."""

PROBE_SECONDS = 20.0


class RunIsolation(enum.StrEnum):
    AUTO = "auto"
    """Isolate where the probe at the executor's start shows it works, else warn and don't."""

    NAMESPACES = "namespaces"
    """Isolate, or refuse to start."""

    NONE = "none"
    """Runs see everything their OS user sees (a single-tenant machine)."""


class IsolationUnavailable(CrucibleError):
    """CRUCIBLE_RUN_ISOLATION=namespaces on a machine where the namespaces cannot be made."""


@dataclass(frozen=True)
class IsolationConfig:
    mode: RunIsolation = RunIsolation.AUTO
    hidden_files: tuple[Path, ...] = ()
    """Secrets kept outside the home (a SQLite database elsewhere, its journal files) to
    cover in each run, where they exist when it starts."""


def config_from(settings: Settings) -> IsolationConfig:
    """The mode asked for, and the secret files outside the home that a run must not open."""
    home = Path(os.path.abspath(settings.home))
    secrets = [settings.local_token_file]
    database_name = make_url(settings.resolved_database_url).database
    if settings.is_sqlite and database_name and database_name != ":memory:":
        database = Path(database_name)
        # The journal files hold the database's pages too.
        secrets += [database.with_name(database.name + s) for s in ("", "-wal", "-shm", "-journal")]
    outside = tuple(
        path
        for path in (Path(os.path.abspath(p)) for p in secrets)
        if not path.is_relative_to(home)
    )
    return IsolationConfig(RunIsolation(settings.run_isolation), outside)


def choose(config: IsolationConfig) -> bool:
    """Whether runs are isolated, per the mode and the probe; says so in the log."""
    if config.mode is RunIsolation.NONE:
        log.warning(
            "run isolation: none (CRUCIBLE_RUN_ISOLATION=none): runs can read the home's "
            "secrets (admin token, database); this executor is single-tenant"
        )
        return False
    problem = probe()
    if problem is None:
        log.info("run isolation: namespaces (each run sees only its project's files)")
        return True
    if config.mode is RunIsolation.NAMESPACES:
        raise IsolationUnavailable(
            f"CRUCIBLE_RUN_ISOLATION=namespaces, but this machine cannot isolate runs: {problem}"
        )
    log.warning(
        "run isolation: none (auto: %s): runs can read the home's secrets (admin token, "
        "database) and other projects' files; this executor is single-tenant",
        problem,
    )
    return False


@functools.cache
def probe() -> str | None:
    """Why runs cannot be isolated here, or None: one isolated no-op run, once a process."""
    if not sys.platform.startswith("linux"):
        return f"Linux namespaces are not available on {sys.platform}"
    with tempfile.TemporaryDirectory(prefix="crucible-isolation-probe-") as scratch:
        home = Path(scratch)
        (home / "kept").mkdir()
        (home / "hidden").touch()
        confinement = Confinement(home=home, binds=(Bind(home / "kept", writable=True),))
        check = "import os; os.listdir('kept'); assert not os.path.exists('hidden')"
        try:
            done = subprocess.run(  # noqa: S603 - our own interpreter and launcher
                launcher_command(),
                input=confinement.request([sys.executable, "-I", "-c", check], {}, cwd=home),
                capture_output=True,
                env=launcher_env(),
                timeout=PROBE_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            return f"the isolation probe did not run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode(errors="replace").strip().splitlines()
        return said[-1] if said else f"the isolation probe exited with {done.returncode}"
    return None


@dataclass(frozen=True)
class Bind:
    path: Path
    writable: bool


@dataclass(frozen=True)
class Confinement:
    """One attempt's view of the home: `binds` under `home`, the rest an empty tmpfs."""

    home: Path
    binds: tuple[Bind, ...]
    hidden_files: tuple[Path, ...] = ()

    @classmethod
    def for_run(
        cls,
        *,
        home: Path,
        run_id: int,
        project_id: int,
        project_runs: Iterable[int],
        code_dir: Path | None,
        hidden_files: Sequence[Path] = (),
    ) -> "Confinement":
        """What run `run_id` of project `project_id` may use: its own folder and its
        project's prefix (made here if missing, to be mounted), its project's other runs'
        folders that exist, the shared folders and its code package, read-only."""
        home = Path(os.path.abspath(home))
        own = home / RUNS_DIR / str(run_id)
        project = home / PROJECTS_DIR / str(project_id)
        own.mkdir(parents=True, exist_ok=True)
        project.mkdir(parents=True, exist_ok=True)
        binds = [Bind(own, writable=True), Bind(project, writable=True)]
        siblings = [home / RUNS_DIR / str(i) for i in sorted(set(project_runs)) if i != run_id]
        shared = [home / name for name in HOME_SHARED_DIRS]
        for path in [*siblings, *shared]:
            if path.is_dir():
                binds.append(Bind(path, writable=False))
        if code_dir is not None:
            binds.append(Bind(Path(os.path.abspath(code_dir)), writable=False))
        # Looked for at each start: SQLite makes and removes its journal files as it goes.
        return cls(home, tuple(binds), tuple(p for p in hidden_files if p.exists()))

    def request(self, command: Sequence[str], env: dict[str, str], *, cwd: Path | str) -> bytes:
        """The launcher's stdin: what to mount, then what to run, where, with which env."""
        home = str(self.home)
        inside = [b for b in self.binds if b.path.is_relative_to(self.home)]
        return json.dumps(
            {
                "home": home,
                "binds": [
                    {"source": str(b.path), "target": str(b.path), "writable": b.writable}
                    for b in inside
                ],
                "hidden_files": [str(p) for p in self.hidden_files],
                "command": list(command),
                "env": env,
                "cwd": str(cwd),
                "sys_path": _crucible_path(),
            }
        ).encode()


def launcher_command() -> list[str]:
    return [sys.executable, "-I", "-B", "-c", _BOOTSTRAP]


def launcher_env() -> dict[str, str]:
    """The executor's environment less its secrets: the launcher needs nothing of the run's
    (an LD_PRELOAD in a spec's env would run in it before isolation)."""
    return inherited_env(os.environ)


def _crucible_path() -> list[str]:
    """The import path that finds this crucible package, and the standard library."""
    return [os.path.abspath(p) for p in sys.path if p]


def describe(isolated: bool) -> str:
    """For the startup line."""
    return "namespaces" if isolated else "none (single-tenant: runs can read the home)"
