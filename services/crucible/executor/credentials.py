"""The token each local attempt runs with: minted for the attempt, scoped to the run's project
as an editor, and revoked when the attempt ends, so user code never holds the executor's own
global admin token (the same footing a pod has on Kubernetes)."""

import logging
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from crucible.client import ApiError, CrucibleClient
from crucible.domain.enums import Role
from crucible.schemas.runs import RunPublic
from crucible.schemas.tenancy import TokenCreate

log = logging.getLogger(__name__)

# How the executor recognizes its own tokens again after a restart (no column marks them).
_NAME = re.compile(r"^local executor: run (\d+) attempt (\d+)$")
# A backstop for a token no executor revokes (one killed and never restarted): revocation at
# the attempt's end, or at the next executor's start, is what normally ends it. Long enough
# for a long local training run, whose heartbeats would stop with its token.
DEFAULT_LIFETIME = timedelta(days=30)


def token_name(run_id: int, attempt: int) -> str:
    return f"local executor: run {run_id} attempt {attempt}"


@dataclass(frozen=True)
class RunToken:
    id: int
    secret: str


class RunCredentials:
    """Mints and revokes attempt tokens through the API, as the global admin `client`."""

    def __init__(
        self, client: CrucibleClient, *, api_url: str, lifetime: timedelta = DEFAULT_LIFETIME
    ) -> None:
        self._client = client
        self._api_url = api_url
        self._lifetime = lifetime

    def mint(self, run: RunPublic, attempt: int) -> RunToken:
        project = self._client.get_project(run.project_id).name
        token_in = TokenCreate(
            name=token_name(run.id, attempt),
            project=project,
            role=Role.editor,
            expires_at=datetime.now(UTC) + self._lifetime,
        )
        try:
            created = self._client.create_token(token_in)
        except ApiError as exc:
            if exc.status != 422 or "expires_at" not in str(exc.detail):
                raise
            # The server caps token lifetimes below ours: it gives the longest it allows.
            created = self._client.create_token(token_in.model_copy(update={"expires_at": None}))
        return RunToken(id=created.id, secret=created.token)

    def revoke(self, token: RunToken) -> None:
        """Revoke the attempt's token; one already dead (revoked, expired, or deleted with its
        project) is left alone. Asking the token itself first keeps a force-deleted project's
        token id, which SQLite may have given to a new token since, from revoking that one."""
        with CrucibleClient(self._api_url, token.secret, retries=2) as own:
            try:
                own.list_projects()
            except ApiError as exc:
                if exc.status == 401:
                    return
                raise
        try:
            self._client.revoke_token(token.id)
        except ApiError as exc:
            if exc.status != 404:
                raise

    def revoke_left_behind(self, *, keep: set[int]) -> list[int]:
        """Revoke the live attempt tokens of every run not in `keep` (the runs this executor
        is running): those an executor that crashed or was killed could not revoke. Answers
        the ids revoked."""
        now = datetime.now(UTC)
        revoked = []
        for token in self._client.list_tokens().items:
            match = _NAME.match(token.name)
            if match is None or token.revoked_at is not None or token.project_id is None:
                continue
            if token.expires_at is not None and token.expires_at <= now:
                continue
            if int(match.group(1)) in keep:
                continue
            try:
                self._client.revoke_token(token.id)
            except ApiError as exc:
                if exc.status != 404:  # deleted with its project meanwhile
                    raise
            revoked.append(token.id)
        if revoked:
            log.info("revoked %d run tokens left behind by a previous executor", len(revoked))
        return revoked
