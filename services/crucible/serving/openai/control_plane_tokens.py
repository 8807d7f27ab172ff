"""Crucible API tokens as the served model's keys: a token that may read its project's
deployments in the control plane may call the model, as project-scoped as the API itself.

Each answer is kept for a few seconds (`ttl` for a yes, `refusal_ttl` for a no), keyed by
the token's hash, so a stream of requests costs the control plane one check per token per
`ttl`; concurrent requests with the same token share one check. The control plane tells a
token nothing about its own expiry, so `ttl` is the whole bound: a token revoked, or past
its `expires_at`, stops working here within `ttl` of that moment. A control plane that
cannot answer refuses nobody it accepted within `outage_grace`, and anyone else gets a 503
(not a 401: the token may be good).
"""

import asyncio
import hashlib
import time

import httpx

from crucible.serving.openai.errors import ApiError

MAX_REMEMBERED = 10_000

APPROVAL_TTL_SECONDS = 2.0
"""How long a yes is believed: short, because it is how long a revoked or expired token
keeps working; one small control-plane GET per token every two seconds is cheap."""


class ControlPlaneTokens:
    def __init__(
        self,
        api_url: str,
        project: str,
        *,
        ttl: float = APPROVAL_TTL_SECONDS,
        refusal_ttl: float = 5.0,
        outage_grace: float = 60.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = f"{api_url.rstrip('/')}/api/v1/deployments"
        self.project = project
        self.ttl, self.refusal_ttl, self.outage_grace = ttl, refusal_ttl, outage_grace
        self.http = http or httpx.AsyncClient(timeout=10.0)
        self._answers: dict[str, tuple[bool, float]] = {}  # token hash -> (allowed, until)
        self._asking: dict[str, asyncio.Future[bool]] = {}  # token hash -> the check under way

    async def allows(self, token: str) -> bool:
        key = hashlib.sha256(token.encode()).hexdigest()
        remembered = self._answers.get(key)
        if remembered is not None and remembered[1] > time.monotonic():
            return remembered[0]
        asking = self._asking.get(key)
        if asking is None:
            asking = asyncio.ensure_future(self._ask(key, token, remembered))
            self._asking[key] = asking
            asking.add_done_callback(lambda _done: self._asking.pop(key, None))
        # Shielded: a client that goes away must not cancel the check others wait on.
        return await asyncio.shield(asking)

    async def _ask(self, key: str, token: str, remembered: tuple[bool, float] | None) -> bool:
        now = time.monotonic()
        try:
            answer = await self.http.get(
                self.url,
                params={"project": self.project, "limit": 1},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.HTTPError as exc:
            if remembered is not None and remembered[0] and now - remembered[1] < self.outage_grace:
                return True  # accepted lately; the control plane is away, not the token
            raise ApiError(
                503,
                f"the control plane cannot check the token now ({type(exc).__name__})",
                type="server_error",
            ) from None
        if answer.status_code == 200:
            allowed = True
        elif answer.status_code in (401, 403, 404):
            allowed = False  # unknown, revoked, expired, or of a project that cannot see this one
        else:
            raise ApiError(
                503,
                f"the control plane cannot check the token now (HTTP {answer.status_code})",
                type="server_error",
            )
        self._remember(key, allowed, now)
        return allowed

    def _remember(self, key: str, allowed: bool, now: float) -> None:
        if len(self._answers) >= MAX_REMEMBERED:
            self._answers = {k: v for k, v in self._answers.items() if v[1] > now}
            if len(self._answers) >= MAX_REMEMBERED:
                self._answers.clear()
        self._answers[key] = (allowed, now + (self.ttl if allowed else self.refusal_ttl))

    async def aclose(self) -> None:
        await self.http.aclose()
