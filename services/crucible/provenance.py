"""The state of the code a run comes from, as `crucible submit` records it and a
reproduction checks it (`reproduction.py`, in the CLI and in the server): the git commit of
its directory's work tree, and a digest of whatever in that directory differs from the
commit (tracked changes and untracked files git does not ignore). Changes elsewhere in the
work tree are not the run's code and do not count.

Only git's plumbing is used, through a throwaway index, so recording never touches the
user's index, stash or work tree.
"""

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import crucible
from crucible.domain.errors import CrucibleError
from crucible.schemas.provenance import CodeSource, GitState

# Options that keep the diff the same bytes whatever the user's git config says.
_STABLE_DIFF = (
    "diff",
    "--cached",
    "--binary",
    "--full-index",
    "--no-color",
    "--no-ext-diff",
    "--no-textconv",
    "--no-renames",
    "HEAD",
    "--",
)


def reference_code_directory() -> Path:
    """Where the reference workloads' code is: the installed crucible package."""
    return Path(crucible.__file__).resolve().parent


def capture(directory: Path) -> CodeSource:
    directory = directory.resolve()
    packages = installed_packages()
    top = _git(directory, "rev-parse", "--show-toplevel")
    commit = _git(directory, "rev-parse", "--verify", "HEAD") if top is not None else None
    if top is None or commit is None:  # not a work tree, no git, or no commit yet
        return CodeSource(directory=str(directory), packages=packages)
    diff = _difference_from_head(Path(top.decode()), directory)
    return CodeSource(
        directory=str(directory),
        packages=packages,
        git=GitState(
            commit=commit.decode(),
            dirty=bool(diff),
            diff_digest=f"sha256:{hashlib.sha256(diff).hexdigest()}" if diff else None,
            top=top.decode(),
        ),
    )


def installed_packages() -> dict[str, str]:
    """The versions a run's code record keeps of what is installed here."""
    return {"crucible": crucible.__version__}


def differences(recorded: CodeSource, current: CodeSource) -> list[str]:
    """What keeps `current` from being the code `recorded` describes, one sentence each;
    empty when it is the same code."""
    found = [
        f"{name} {version} was recorded, {current.packages.get(name, 'nothing')} is installed"
        for name, version in sorted(recorded.packages.items())
        if current.packages.get(name) != version
    ]
    was, now = recorded.git, current.git
    if was is None:
        return found
    if now is None:
        return [*found, f"{current.directory} is not in a git work tree (commit {was.commit})"]
    if now.commit != was.commit:
        found.append(f"{now.top} is at commit {now.commit[:12]}, the run's code was {was.commit}")
    if now.diff_digest != was.diff_digest:
        if was.diff_digest is None:
            found.append(f"{now.top} has uncommitted changes; the run's tree was clean")
        elif now.diff_digest is None:
            found.append(
                f"{now.top} is clean; the run's tree had uncommitted changes ({was.diff_digest})"
            )
        else:
            found.append(
                f"the uncommitted changes in {now.top} ({now.diff_digest}) are not the run's "
                f"({was.diff_digest})"
            )
    return found


def _difference_from_head(top: Path, directory: Path) -> bytes:
    with tempfile.TemporaryDirectory(prefix="crucible-index-") as scratch:
        index = Path(scratch) / "index"
        real_index = _git(top, "rev-parse", "--git-path", "index")
        if real_index is not None and (top / real_index.decode()).is_file():
            # A copy keeps git's stat cache: only changed files are read again.
            shutil.copyfile(top / real_index.decode(), index)
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        _git_checked(top, env, "add", "--all", "--", str(directory))
        return _git_checked(top, env, *_STABLE_DIFF, str(directory))


def _git(directory: Path, *args: str) -> bytes | None:
    """A git command's output without its last newline, or None when it fails."""
    try:
        done = subprocess.run(  # noqa: S603 - fixed git arguments
            ["git", "-C", str(directory), *args],  # noqa: S607 - git from PATH, as the user's
            capture_output=True,
            check=False,
        )
    except FileNotFoundError:
        return None
    return done.stdout.rstrip(b"\n") if done.returncode == 0 else None


def _git_checked(top: Path, env: dict[str, str], *args: str) -> bytes:
    done = subprocess.run(  # noqa: S603 - fixed git arguments
        ["git", "-C", str(top), *args],  # noqa: S607 - git from PATH, as the user's
        capture_output=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise CrucibleError(
            f"git {args[0]} in {top} failed: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout
