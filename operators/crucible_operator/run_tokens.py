"""The API token a run's pods use: minted for the run, an editor of its project, in a Secret of
the run's own that its custom resource owns, and revoked when the run ends (the local
executor's footing, executor/credentials.py). A token taken from one run's pod is then worth
that project only while the run lasts, not every later run of the namespace.

A fresh token at each attempt's start, the run's earlier ones revoked then: no pod of the run
is running between two attempts, and a run that outlives one token's lifetime gets another.

The operator may create Secrets but not read them (the chart's RBAC), so what a loop knows of
its run's tokens is what it minted itself. A loop that started on a run already past its
first Scheduling (the operator restarted) may be missing tokens a predecessor minted: it
revokes them by their name (`naming.run_token_name`), listing the tokens, at the next
attempt's start and at the end. Tokens of runs that ended while no operator ran are revoked
at start-up (`revoke_left_behind`); the expiry is the backstop of everything else.
"""

import asyncio
import base64
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import kopf
from lightkube import ApiError as KubeError
from lightkube import codecs
from lightkube.resources.core_v1 import Secret

from crucible.client import ApiError, calls
from crucible.domain.enums import Phase, Role
from crucible.schemas.tenancy import TokenCreate, TokenCreated
from crucible_operator import naming
from crucible_operator.context import OperatorContext
from crucible_operator.status import aware

log = logging.getLogger(__name__)

# Long enough for a long attempt, whose heartbeats would stop with its token; revocation at
# the run's end is what normally ends one.
LIFETIME = timedelta(days=30)
SWEEP_RETRY_SECONDS = 10.0


@dataclass
class RunTokens:
    """What one reconcile loop knows of its run's tokens."""

    ids: list[int] = field(default_factory=list)  # minted by this loop, not revoked yet
    complete: bool = False  # `ids` are all the run's live tokens; else look them up by name
    retired: bool = False  # revoked at the run's end, its Secret deleted


def minted_before(phase: Phase, attempt_count: int) -> bool:
    """Whether a run seen in this state may hold tokens already: one is minted only after
    the run was reported Scheduling, and a run never goes back to Pending or
    WaitingForInputs from there."""
    return attempt_count > 0 or phase not in (Phase.Pending, Phase.WaitingForInputs)


async def issue(
    ctx: OperatorContext,
    *,
    owner: kopf.Body,
    run_id: int,
    project: str,
    known: RunTokens,
    maybe_minted: bool,
) -> None:
    """Before an attempt's pods: the run's earlier tokens revoked and a new one in its Secret.
    `maybe_minted`: the run may hold tokens this loop did not mint (`minted_before`)."""
    await _revoke_known(ctx, run_id, known, lookup=maybe_minted)
    known.complete = False  # until the answer comes: one lost is found by its name later
    token = await _mint(ctx, run_id, project)
    known.ids.append(token.id)
    known.complete = True
    await _put_secret(ctx, owner, run_id, token.token)


async def retire(ctx: OperatorContext, *, namespace: str, run_id: int, known: RunTokens) -> None:
    """At the run's end: its tokens revoked and its Secret deleted (which the custom
    resource's deletion would do too, through the owner reference)."""
    if known.retired:
        return
    await _revoke_known(ctx, run_id, known, lookup=True)
    try:
        await ctx.kube.delete(Secret, naming.run_token_secret(run_id), namespace=namespace)
    except KubeError as exc:
        if exc.status.code != 404:
            raise
    known.retired = True


async def revoke_named(ctx: OperatorContext, run_id: int) -> list[int]:
    """Revoke every live token named for the run. Answers the ids revoked."""
    revoked = []
    for owner, token_id in await _live_tokens(ctx):
        if owner == run_id:
            await _revoke(ctx, token_id)
            revoked.append(token_id)
    return revoked


async def revoke_left_behind(ctx: OperatorContext) -> None:
    """At start-up: revoke the live tokens of runs that have ended or are gone, which an
    operator stopped at the wrong moment left. Retried until the control plane answers."""
    while True:
        try:
            revoked = 0
            ended: dict[int, bool] = {}
            for run_id, token_id in await _live_tokens(ctx):
                if run_id not in ended:
                    ended[run_id] = await _ended(ctx, run_id)
                if ended[run_id]:
                    await _revoke(ctx, token_id)
                    revoked += 1
            if revoked:
                log.info("revoked %d tokens of ended runs left behind", revoked)
            return
        except (ApiError, OSError) as exc:
            log.warning("revoking ended runs' tokens failed, retrying: %s", exc)
            await asyncio.sleep(SWEEP_RETRY_SECONDS)


async def _live_tokens(ctx: OperatorContext) -> list[tuple[int, int]]:
    """(run id, token id) of every token named for a run, neither revoked nor expired."""
    now = datetime.now(UTC)
    out = []
    for token in (await ctx.call(calls.list_tokens())).items:
        match = naming.RUN_TOKEN_NAME.match(token.name)
        if match is None or token.revoked_at is not None or token.project_id is None:
            continue
        if token.expires_at is not None and aware(token.expires_at) <= now:
            continue
        out.append((int(match.group(1)), token.id))
    return out


async def _ended(ctx: OperatorContext, run_id: int) -> bool:
    try:
        run = await ctx.call(calls.get_run(run_id))
    except ApiError as exc:
        if exc.status != 404:
            raise
        return True  # deleted, with its project or alone
    return run.phase.is_terminal


async def _revoke_known(ctx: OperatorContext, run_id: int, known: RunTokens, lookup: bool) -> None:
    if lookup and not known.complete:
        await revoke_named(ctx, run_id)
    else:
        for token_id in known.ids:
            await _revoke(ctx, token_id)
    known.ids.clear()
    known.complete = True


async def _revoke(ctx: OperatorContext, token_id: int) -> None:
    try:
        await ctx.call(calls.revoke_token(token_id))
    except ApiError as exc:
        if exc.status != 404:  # deleted with its project meanwhile
            raise


async def _mint(ctx: OperatorContext, run_id: int, project: str) -> TokenCreated:
    token_in = TokenCreate(
        name=naming.run_token_name(run_id),
        project=project,
        role=Role.editor,
        expires_at=datetime.now(UTC) + LIFETIME,
    )
    try:
        return await ctx.call(calls.create_token(token_in))
    except ApiError as exc:
        if exc.status != 422 or "expires_at" not in str(exc.detail):
            raise
        # The server caps token lifetimes below ours: it gives the longest it allows.
        return await ctx.call(calls.create_token(token_in.model_copy(update={"expires_at": None})))


async def _put_secret(ctx: OperatorContext, owner: kopf.Body, run_id: int, token: str) -> None:
    """Create the run's Secret, or replace one an earlier attempt (or operator) made: it is
    deleted and made again, as the operator may create and delete its Secrets but not
    change them (the chart's admission policy)."""
    secret: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": naming.run_token_secret(run_id),
            "labels": {naming.LABEL_MANAGED_BY: naming.MANAGED_BY},
        },
        "type": "Opaque",
        "data": {naming.RUN_TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }
    kopf.adopt(secret, owner=owner)  # its namespace, and deleted with the resource
    try:
        await ctx.kube.create(codecs.from_dict(secret))
        return
    except KubeError as exc:
        if exc.status.code != 409:
            raise
    name, namespace = secret["metadata"]["name"], secret["metadata"]["namespace"]
    try:
        await ctx.kube.delete(Secret, name, namespace=namespace)
    except KubeError as exc:
        if exc.status.code != 404:
            raise
    await ctx.kube.create(codecs.from_dict(secret))
