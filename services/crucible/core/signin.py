"""One-time sign-in links for the embedded mode.

`crucible up` issues a code and prints a dashboard link carrying it; the dashboard trades the
code for a session token, so a local user never copies a token. Only the code's SHA-256 is
kept, in a mode-600 file under CRUCIBLE_HOME: the CLI that prints the link and the API that
redeems it share the machine, not necessarily the process. One code is live at a time, and
redeeming it removes the file, so a link works once.
"""

import hmac
import json
import os
import secrets
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy.orm import Session

from crucible.core.access import Principal
from crucible.core.tokens import create_token, hash_token
from crucible.domain.enums import Role
from crucible.domain.errors import Unauthenticated
from crucible.schemas.tenancy import TokenCreate, TokenCreated

CODE_FILE = "signin-code"
CODE_TTL = timedelta(hours=1)
SESSION_TTL = timedelta(hours=12)

# The caller is not authenticated: it learns nothing of the server (no path, no user).
_SPENT = (
    "this sign-in link was used already or has expired; restart `crucible up` for a new one, "
    "or sign in with the admin token `crucible up` saved in its home directory"
)


def code_file(home: Path) -> Path:
    return home / CODE_FILE


def issue_code(home: Path, *, now: datetime | None = None) -> str:
    """A fresh single-use code, replacing any earlier one."""
    code = secrets.token_urlsafe(32)
    expires = (now or datetime.now(UTC)) + CODE_TTL
    home.mkdir(parents=True, exist_ok=True)
    pending = home / f".{CODE_FILE}.{secrets.token_hex(4)}"
    descriptor = os.open(pending, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        json.dump({"sha256": hash_token(code), "expires_at": expires.isoformat()}, out)
    os.replace(pending, code_file(home))  # atomic: a reader sees the old code or the new one
    return code


def redeem_code(
    *, session: Session, home: Path, code: str, now: datetime | None = None
) -> TokenCreated:
    """Trade the live code for an admin session token (it expires in SESSION_TTL)."""
    path = code_file(home)
    spent = Unauthenticated(_SPENT)
    try:
        issued = json.loads(path.read_text())
    except FileNotFoundError:
        raise spent from None
    if not hmac.compare_digest(hash_token(code), str(issued.get("sha256", ""))):
        raise Unauthenticated(
            "that sign-in code is not the one `crucible up` printed; copy the whole link"
        )
    claimed = path.with_name(f".{CODE_FILE}.claimed.{secrets.token_hex(4)}")
    try:
        # Renaming is the claim: of two requests racing with the same code, one rename wins.
        os.rename(path, claimed)
    except FileNotFoundError:
        raise spent from None
    claimed.unlink()
    moment = now or datetime.now(UTC)
    if datetime.fromisoformat(issued["expires_at"]) <= moment:
        raise spent
    # The local user is the admin of their own embedded install, as the saved token is.
    local_admin = Principal(token_id=None, role=Role.admin, project_id=None)
    request = TokenCreate(
        name="dashboard sign-in", role=Role.admin, expires_at=moment + SESSION_TTL
    )
    return create_token(session=session, principal=local_admin, token_in=request)
