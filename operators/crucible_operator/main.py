"""`crucible operator`: run the kopf operator against the current cluster (KUBECONFIG, or
the in-cluster service account) and the control plane at CRUCIBLE_API_URL."""

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

import kopf
from lightkube import AsyncClient
from prometheus_client import start_http_server

from crucible.client.async_http import AsyncCrucibleClient
from crucible.settings import Settings
from crucible_operator import naming, run_tokens
from crucible_operator.cluster_report import report_forever
from crucible_operator.context import OperatorContext
from crucible_operator.essence import EmptyEssence
from crucible_operator.feed import EventFollower
from crucible_operator.handlers import build_registry
from crucible_operator.kube import BoundedKube
from crucible_operator.metrics import OperatorMetrics
from crucible_operator.pods import PodOptions

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OperatorConfig:
    namespaces: tuple[str, ...]  # empty: every namespace
    pod_options: PodOptions
    metrics_port: int | None
    health_port: int | None
    peering: str | None  # kopf peering name; None: standalone (one instance, no peering)


def run_operator(settings: Settings, config: OperatorConfig, *, verbose: bool = False) -> None:
    kopf.configure(verbose=verbose)  # kopf's log format, on the root logger
    if not verbose:  # a line per HTTP request or handler call is noise at this rate
        for name in ("httpx", "httpx2", "kopf.objects"):
            logging.getLogger(name).setLevel(logging.WARNING)
    registry = build_registry()
    metrics = OperatorMetrics()

    @kopf.on.startup(registry=registry)
    async def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **kw: Any) -> None:
        settings.persistence.finalizer = naming.FINALIZER
        settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=naming.GROUP)
        settings.persistence.diffbase_storage = EmptyEssence()
        settings.posting.level = logging.INFO
        settings.watching.server_timeout = 300
        # Every handler is a coroutine; kopf's threads serve only the start-up login.
        settings.execution.max_workers = 1
        memo.context = OperatorContext(
            api=api,
            kube=BoundedKube(AsyncClient(field_manager=naming.FIELD_MANAGER)),
            options=config.pod_options,
            metrics=metrics,
        )
        # The indexes are live views kopf keeps filling; the reporter reads them every tick.
        memo.reporter = asyncio.create_task(report_forever(memo.context, kw["crucible_pods"]))
        follower = EventFollower(memo.context.api, memo.context.changes, memo.context.loops.wake)
        memo.follower = asyncio.create_task(follower.follow())
        memo.token_sweep = asyncio.create_task(run_tokens.revoke_left_behind(memo.context))

    @kopf.on.cleanup(registry=registry)
    async def close(memo: kopf.Memo, **_: Any) -> None:
        memo.reporter.cancel()
        memo.follower.cancel()
        memo.token_sweep.cancel()
        await memo.context.kube.close()
        await memo.context.api.close()

    api = AsyncCrucibleClient.from_settings(settings)
    if config.metrics_port is not None:
        start_http_server(config.metrics_port, registry=metrics.registry)
    liveness = (
        f"http://0.0.0.0:{config.health_port}/healthz" if config.health_port is not None else None
    )
    kopf.run(
        registry=registry,
        clusterwide=not config.namespaces,
        namespaces=config.namespaces,
        standalone=config.peering is None,
        peering_name=config.peering,
        liveness_endpoint=liveness,
        memo=kopf.Memo(),
    )
