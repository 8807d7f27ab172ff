"""Typed dependencies: the unit of work and the authenticated caller."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session, sessionmaker

from crucible.api.auth_throttle import FailedAuthThrottle
from crucible.core.access import Principal
from crucible.core.tokens import authenticate
from crucible.db.engine import transaction
from crucible.domain.errors import Unauthenticated
from crucible.settings import Settings

# On every response whose body is a credential (a new token): no cache, proxy or browser
# history keeps a copy.
NO_STORE = "no-store"

_bearer = HTTPBearer(auto_error=False, description="An API token: `Authorization: Bearer cru_...`")


def get_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_session_factory(request: Request) -> sessionmaker[Session]:
    factory: sessionmaker[Session] = request.app.state.session_factory
    return factory


class UnitOfWork:
    """Routes open the transaction themselves, so the commit happens before the response
    is sent: a client never gets a 2xx for a write that could still fail to commit."""

    def __init__(self, factory: sessionmaker[Session]) -> None:
        self._factory = factory

    @contextmanager
    def __call__(self) -> Iterator[Session]:
        with transaction(self._factory) as session:
            yield session


def get_uow(factory: Annotated[sessionmaker[Session], Depends(get_session_factory)]) -> UnitOfWork:
    return UnitOfWork(factory)


class CredentialCheck:
    """Checks a credential the caller presented, counting failures against its address. A
    valid credential always works: behind one proxy or NAT many users share an address, and
    a guesser there must not lock them out. A wrong one past the limit gets 429."""

    def __init__(self, throttle: FailedAuthThrottle, client: str) -> None:
        self._throttle = throttle
        self._client = client

    @contextmanager
    def __call__(self, credential: str) -> Iterator[None]:
        try:
            yield
        except Unauthenticated:
            self._throttle.check(self._client)
            self._throttle.record_failure(self._client, credential)
            raise


def get_credential_check(request: Request) -> CredentialCheck:
    throttle: FailedAuthThrottle = request.app.state.auth_throttle
    return CredentialCheck(throttle, request.client.host if request.client else "unknown")


def get_principal(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    uow: Annotated[UnitOfWork, Depends(get_uow)],
    settings: Annotated[Settings, Depends(get_settings)],
    credential_check: Annotated[CredentialCheck, Depends(get_credential_check)],
) -> Principal:
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("missing `Authorization: Bearer <token>` header")
    admin = settings.admin_token.get_secret_value() if settings.admin_token else None
    with credential_check(credentials.credentials), uow() as session:
        return authenticate(session=session, raw=credentials.credentials, admin_token=admin)


Uow = Annotated[UnitOfWork, Depends(get_uow)]
CurrentPrincipal = Annotated[Principal, Depends(get_principal)]
SettingsDep = Annotated[Settings, Depends(get_settings)]
CredentialCheckDep = Annotated[CredentialCheck, Depends(get_credential_check)]
