"""Crucible API tokens as the served model's keys: a token that may read its project's
deployments in the control plane may call the model, as project-scoped as the API itself.

Each answer is kept for a while (`ttl` for a yes, `refusal_ttl` for a no), keyed by the
token's hash, so a stream of requests costs the control plane one check; a revoked token
stops working within `ttl`. A control plane that cannot answer refuses nobody it already
accepted, and anyone else gets a 503 (not a 401: the token may be good)."""

import hashlib
import time

import httpx

from crucible.engine.openai_errors import ApiError

MAX_REMEMBERED = 10_000


class ControlPlaneTokens:
    def __init__(
        self,
        api_url: str,
        project: str,
        *,
        ttl: float = 60.0,
        refusal_ttl: float = 5.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self.url = f"{api_url.rstrip('/')}/api/v1/deployments"
        self.project = project
        self.ttl, self.refusal_ttl = ttl, refusal_ttl
        self.http = http or httpx.AsyncClient(timeout=10.0)
        self._answers: dict[str, tuple[bool, float]] = {}  # token hash -> (allowed, until)

    async def allows(self, token: str) -> bool:
        key = hashlib.sha256(token.encode()).hexdigest()
        now = time.monotonic()
        remembered = self._answers.get(key)
        if remembered is not None and remembered[1] > now:
            return remembered[0]
        try:
            answer = await self.http.get(
                self.url,
                params={"project": self.project, "limit": 1},
                headers={"Authorization": f"Bearer {token}"},
            )
        except httpx.HTTPError as exc:
            if remembered is not None and remembered[0]:
                return True  # accepted before; the control plane is away, not the token
            raise ApiError(
                503, f"the control plane cannot check the token now: {exc}", type="server_error"
            ) from None
        if answer.status_code == 200:
            allowed = True
        elif answer.status_code in (401, 403, 404):
            allowed = False  # unknown, revoked, or of a project that cannot see this one
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
