"""Where a run's code came from: the git state of the directory its code was submitted
from, the image each of its pods ran, and the packages its workload imported."""

from typing import Annotated

from pydantic import Field

from crucible.schemas.common import PLAIN_NAME, ApiModel, Id

# SHA-1 or SHA-256 object names, as git prints them.
COMMIT = r"^[0-9a-f]{40}([0-9a-f]{24})?$"
SHA256 = r"^sha256:[0-9a-f]{64}$"
MAX_PACKAGES = 64

Path = Annotated[str, Field(min_length=1, max_length=1024, pattern=PLAIN_NAME)]
PackageName = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")]
PackageVersion = Annotated[str, Field(min_length=1, max_length=128, pattern=PLAIN_NAME)]


class GitState(ApiModel):
    commit: str = Field(pattern=COMMIT, description="The work tree's HEAD commit.")
    dirty: bool = Field(description="Whether the code's directory differed from that commit.")
    diff_digest: str | None = Field(
        default=None,
        pattern=SHA256,
        description="sha256 of the directory's differences from the commit (tracked and "
        "untracked files git does not ignore, as `git diff --binary` prints them); null when "
        "clean. Only the digest is kept: the diff itself may hold what must not leave the "
        "machine.",
    )
    top: Path = Field(description="The work tree's top directory on the submitting machine.")


class CodePackage(ApiModel):
    """The code package a run reads (spec.codePackage), as `crucible submit --package` made it."""

    artifact_id: Id = Field(description="Its `code` artifact.")
    digest: str = Field(
        pattern=SHA256,
        description="sha256 of its archive, which every start of the run checks before it "
        "unpacks it.",
    )


class CodeSource(ApiModel):
    """Recorded at submission by `crucible submit` (or any client that sets it)."""

    directory: Path = Field(description="The directory the run's code came from.")
    packages: dict[PackageName, PackageVersion] = Field(
        default_factory=dict,
        max_length=MAX_PACKAGES,
        description="Versions installed where it was submitted (crucible's, at least).",
    )
    git: GitState | None = Field(
        default=None, description="Its git state; null when it is not in a git work tree."
    )
    package: CodePackage | None = Field(
        default=None,
        description="The code package the run reads, packed from that directory or beside "
        "the reference workloads' code; null without one.",
    )


class AttemptEnvironment(ApiModel):
    """What the workload of an attempt runs on, as it reports it when it starts."""

    packages: dict[PackageName, PackageVersion] = Field(
        max_length=MAX_PACKAGES,
        description="Versions of the packages it imported that matter for its results "
        "(python, crucible, torch, its own package, ...).",
    )
