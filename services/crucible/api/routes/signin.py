"""The embedded mode's one-time sign-in link: a code from `crucible up` for a session token."""

from fastapi import APIRouter, Response
from pydantic import Field

from crucible.api.deps import NO_STORE, CredentialCheckDep, SettingsDep, Uow
from crucible.core import signin
from crucible.domain.errors import NotFound, Unauthenticated
from crucible.schemas.common import ApiModel
from crucible.schemas.tenancy import TokenCreated

router = APIRouter(prefix="/api/v1", tags=["auth"])


class SignInCode(ApiModel):
    code: str = Field(min_length=1, max_length=200, description="The code from the printed link.")


@router.post("/auth/sign-in-code", operation_id="redeemSignInCode")
def redeem_sign_in_code(
    uow: Uow,
    settings: SettingsDep,
    credential_check: CredentialCheckDep,
    response: Response,
    body: SignInCode | None = None,
) -> TokenCreated:
    """Trade the single-use code `crucible up` printed for an admin token that expires in 12
    hours. Works once per code, and only in the embedded (SQLite) mode."""
    # The code is this route's credential: without one the caller is unauthenticated, as on
    # every other route without a token.
    if body is None:
        raise Unauthenticated("no sign-in code: open the link `crucible up` printed")
    if not settings.is_sqlite:
        raise NotFound("sign-in code", "(only the embedded mode issues them)")
    response.headers["Cache-Control"] = NO_STORE  # the body is an admin token
    with credential_check(body.code), uow() as session:
        return signin.redeem_code(session=session, home=settings.home, code=body.code)
