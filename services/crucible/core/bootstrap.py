"""First start of the embedded mode: a default project and an admin token for the local user."""

import os
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from crucible.core.tokens import bootstrap_admin_token
from crucible.db.engine import transaction
from crucible.db.tables import Project
from crucible.settings import DEFAULT_PROJECT, Settings


@dataclass(frozen=True)
class LocalBootstrap:
    new_token: str | None  # set only when minted now; it is shown once and never again


def bootstrap_local(settings: Settings, factory: sessionmaker[Session]) -> LocalBootstrap:
    with transaction(factory) as session:
        if session.scalar(select(Project.id).where(Project.name == DEFAULT_PROJECT)) is None:
            session.add(
                Project(
                    name=DEFAULT_PROJECT,
                    namespace=DEFAULT_PROJECT,
                    description="Created by the embedded mode on first start.",
                )
            )
        new_token = None
        if settings.admin_token is None:
            new_token = bootstrap_admin_token(session=session, name="local admin")
    if new_token is not None:
        save_local_token(settings, new_token)
    return LocalBootstrap(new_token=new_token)


def save_local_token(settings: Settings, token: str) -> None:
    """Write the token readable by its owner only, created with those permissions (no window
    in which another user could read it)."""
    settings.home.mkdir(parents=True, exist_ok=True)
    path = settings.local_token_file
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    os.chmod(path, 0o600)
