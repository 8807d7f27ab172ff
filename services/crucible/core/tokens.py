"""API tokens: minted once, stored only as SHA-256, compared in constant time."""

import hashlib
import hmac
import secrets
from datetime import UTC, datetime, timedelta

from sqlalchemy import select
from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.lookups import project_by_name
from crucible.db.tables import ApiToken
from crucible.domain.enums import Role
from crucible.domain.errors import Forbidden, InvalidInput, NotFound, Unauthenticated
from crucible.schemas.common import Page
from crucible.schemas.tenancy import TokenCreate, TokenCreated, TokenPublic

TOKEN_PREFIX = "cru_"  # noqa: S105 - a public marker, not a secret


def hash_token(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def mint() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def create_token(
    *,
    session: Session,
    principal: Principal,
    token_in: TokenCreate,
    max_lifetime: timedelta | None = None,
) -> TokenCreated:
    """A new token, shown once. It expires in the future, and within `max_lifetime` when the
    server sets one (then a token asked for without an expiry gets the longest allowed)."""
    now = datetime.now(UTC)
    expires_at = token_in.expires_at
    if expires_at is not None and expires_at <= now:
        raise InvalidInput(
            "expires_at", expires_at.isoformat(), "must be in the future", location="body"
        )
    if max_lifetime is not None:
        latest = now + max_lifetime
        if expires_at is None:
            expires_at = latest
        elif expires_at > latest:
            raise InvalidInput(
                "expires_at",
                expires_at.isoformat(),
                f"is past the longest lifetime this server allows ({max_lifetime.days} days, "
                "CRUCIBLE_TOKEN_MAX_LIFETIME_DAYS)",
                location="body",
            )
    project_id = None
    if token_in.project is None:
        principal.require_global_admin()
    else:
        project = project_by_name(session, token_in.project)
        principal.require(project.id, Role.admin, entity="project", key=token_in.project)
        project_id = project.id
    raw = mint()
    row = ApiToken(
        project_id=project_id,
        name=token_in.name,
        role=token_in.role.value,
        token_hash=hash_token(raw),
        prefix=raw[: len(TOKEN_PREFIX) + 4],
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return TokenCreated.model_validate(
        {**TokenPublic.model_validate(row).model_dump(), "token": raw}
    )


def list_tokens(*, session: Session, principal: Principal) -> Page[TokenPublic]:
    query = select(ApiToken).order_by(ApiToken.id)
    if principal.project_id is not None:
        principal.require(principal.project_id, Role.admin, entity="project", key="")
        query = query.where(ApiToken.project_id == principal.project_id)
    elif not principal.is_global_admin:
        raise Forbidden("only admins can list tokens")
    return Page(items=[TokenPublic.model_validate(t) for t in session.scalars(query)])


def revoke_token(*, session: Session, principal: Principal, token_id: int) -> TokenPublic:
    row = session.get(ApiToken, token_id)
    if row is None:
        raise NotFound("token", token_id)
    if row.project_id is None:
        principal.require_global_admin()
    else:
        principal.require(row.project_id, Role.admin, entity="token", key=token_id)
    row.revoked_at = row.revoked_at or datetime.now(UTC)
    session.flush()
    return TokenPublic.model_validate(row)


def authenticate(*, session: Session, raw: str, admin_token: str | None) -> Principal:
    """Resolve a bearer token to a Principal, or raise Unauthenticated."""
    if admin_token and hmac.compare_digest(raw.encode(), admin_token.encode()):
        return Principal(token_id=None, role=Role.admin, project_id=None)
    # The lookup is by hash, so timing reveals nothing about the secret itself.
    row = session.scalar(select(ApiToken).where(ApiToken.token_hash == hash_token(raw)))
    if row is None or row.revoked_at is not None:
        raise Unauthenticated("invalid or revoked token")
    if row.expires_at is not None and row.expires_at <= datetime.now(UTC):
        raise Unauthenticated("token expired")
    return Principal(token_id=row.id, role=Role(row.role), project_id=row.project_id)


def bootstrap_admin_token(*, session: Session, name: str) -> str | None:
    """Mint the first global admin token, unless a global token already exists."""
    exists = session.scalar(select(ApiToken.id).where(ApiToken.project_id.is_(None)).limit(1))
    if exists is not None:
        return None
    return _insert_global_admin(session, name)


def rotate_service_token(*, session: Session, name: str) -> str:
    """A fresh global admin token for an in-process service (the embedded executor); the
    previous token of that name is revoked, so restarts leave no live tokens behind."""
    now = datetime.now(UTC)
    for row in session.scalars(
        select(ApiToken).where(
            ApiToken.project_id.is_(None), ApiToken.name == name, ApiToken.revoked_at.is_(None)
        )
    ):
        row.revoked_at = now
    return _insert_global_admin(session, name)


def _insert_global_admin(session: Session, name: str) -> str:
    raw = mint()
    session.add(
        ApiToken(
            project_id=None,
            name=name,
            role=Role.admin.value,
            token_hash=hash_token(raw),
            prefix=raw[: len(TOKEN_PREFIX) + 4],
        )
    )
    session.flush()
    return raw
