"""`python -m crucible.fetch_code --into DIR`: a run's code package (the artifact whose id is in
CRUCIBLE_CODE_PACKAGE, as the control plane pinned it), checked against its registered digest
and unpacked read-only into DIR. The operator runs it in an init container of every pod, whose
workload then finds DIR first on its PYTHONPATH; the local executor does the same itself
(`crucible.artifacts.code_package`) before it starts an attempt's processes.

Exit codes as the jobs': 0 unpacked; 2 CRUCIBLE_CODE_PACKAGE unset or not an id; 1 the package
cannot be had (not a code package, unreadable, or not the archive registered), with one line
on stderr and in the termination log, which the operator copies into the attempt's end.
"""

import argparse
import os
import sys
from pathlib import Path
from typing import NoReturn

from crucible.artifacts import code_package
from crucible.client import ApiError, CrucibleClient
from crucible.client.code_packages import describe_code_package, find_code_package
from crucible.domain import contract
from crucible.settings import load_settings


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m crucible.fetch_code", description=__doc__)
    parser.add_argument("--into", type=Path, required=True, help="Empty directory to unpack into.")
    into: Path = parser.parse_args(argv).into
    given = os.environ.get(contract.CODE_PACKAGE_ENV, "")
    if not (given.isascii() and given.isdigit()):
        _stop(
            2,
            f"{contract.CODE_PACKAGE_ENV} must be the id of the run's code package artifact, "
            f"not {given!r}",
        )
    with CrucibleClient.from_settings(load_settings()) as client:
        try:
            artifact = find_code_package(client, int(given))
            what = describe_code_package(artifact)
            code_package.fetch(artifact.uri, artifact.digest, into, what=what)
        except (code_package.PackageError, ApiError) as exc:
            _stop(1, str(exc))
    print(f"unpacked {what} ({artifact.digest}) into {into}", flush=True)


def _stop(code: int, message: str) -> NoReturn:
    print(f"crucible.fetch_code: {message}", file=sys.stderr, flush=True)
    path = os.environ.get(contract.TERMINATION_LOG_ENV)
    if path:
        try:
            Path(path).write_text(contract.termination_message(message))
        except OSError as exc:  # a read-only or missing place must not hide the real error
            print(f"crucible.fetch_code: cannot write {path}: {exc}", file=sys.stderr)
    raise SystemExit(code)


if __name__ == "__main__":
    main()
