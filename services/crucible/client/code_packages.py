"""The code package a run reads (spec.codePackage), as the control plane registered it: what
the local executor and `python -m crucible.fetch_code` look up before they fetch it."""

from crucible.artifacts.code_package import PackageError
from crucible.client.http import ApiError, CrucibleClient
from crucible.domain.enums import ArtifactKind
from crucible.schemas.lineage import ArtifactPublic


def find_code_package(client: CrucibleClient, artifact_id: int) -> ArtifactPublic:
    """The artifact of `artifact_id`, once it is a code package (PackageError otherwise, or
    when there is none)."""
    try:
        artifact = client.get_artifact(artifact_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        raise PackageError(f"code package artifact {artifact_id} does not exist") from None
    if artifact.kind is not ArtifactKind.code:
        raise PackageError(
            f"artifact {artifact.id} ({artifact.name}) is a {artifact.kind.value} artifact, not "
            "a code package"
        )
    return artifact


def describe_code_package(artifact: ArtifactPublic) -> str:
    return f"code package artifact {artifact.id} ({artifact.name})"
