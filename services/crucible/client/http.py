"""A typed, retrying client for the REST API, used by the CLI, operator, workers and workloads.

Every call that writes carries an Idempotency-Key that stays the same across its retries,
so a retry after a lost response never does the work twice.
"""

import logging
import time
import uuid
from typing import Any, TypeVar

import httpx
import orjson
from pydantic import BaseModel

from crucible.client import calls
from crucible.schemas.cluster import ClusterReport, ClusterView, ReportReceived, RunPodPublic
from crucible.schemas.common import Page
from crucible.schemas.deployments import (
    DeploymentPublic,
    DeploymentReport,
    DeploymentsPublic,
    PromotionAccepted,
)
from crucible.schemas.goodput import ExperimentGoodput, RunGoodput
from crucible.schemas.lineage import (
    ArtifactCreate,
    ArtifactPublic,
    CheckpointCreate,
    CheckpointPublic,
    DatasetPublic,
    DatasetVersionCreate,
    DatasetVersionPublic,
    EvalResultCreate,
    EvalResultPublic,
    RunInputCreate,
    RunInputPublic,
)
from crucible.schemas.profiles import (
    ProfileProgress,
    ProfileRequestCreate,
    ProfileRequestPublic,
    RunProfiles,
)
from crucible.schemas.provenance import AttemptEnvironment
from crucible.schemas.runs import (
    AttemptEnd,
    AttemptHeartbeat,
    AttemptPublic,
    AttemptStart,
    EventFeed,
    HeartbeatAnswer,
    InputsResolution,
    PhaseReport,
    RunEventPublic,
    RunPublic,
    RunSubmit,
)
from crucible.schemas.tenancy import (
    ExperimentPublic,
    ProjectCreate,
    ProjectPublic,
    TokenCreate,
    TokenCreated,
    TokenPublic,
)
from crucible.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

# Answers after which the same request may well succeed: a proxy in front of the API, or
# the API itself, is restarting or overloaded. `request` retries these a few times itself.
RETRY_STATUSES = frozenset({502, 503, 504})
# ... and what a sender that never gives up (the SDK's metric thread) also waits out: no
# answer at all (status 0: the client's own `ApiError` for an unreachable API), a timeout,
# too early, rate limited, or an internal error.
TRANSIENT_STATUSES = RETRY_STATUSES | {0, 408, 425, 429, 500}
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class ApiError(Exception):
    """The API refused a request; `detail` is its explanation."""

    def __init__(self, status: int, detail: Any, method: str, path: str) -> None:
        self.status = status
        self.detail = detail
        super().__init__(f"{method} {path} failed ({status}): {_describe(detail)}")


def _describe(detail: Any) -> str:
    if isinstance(detail, list):  # FastAPI validation errors
        return "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', []))}: {e.get('msg')}" for e in detail
        )
    return str(detail)


def token_of(settings: Settings) -> str | None:
    """The configured token, else the one `crucible up` wrote for this machine."""
    token = settings.token.get_secret_value() if settings.token else None
    if token is None and settings.local_token_file.exists():
        token = settings.local_token_file.read_text().strip()
    return token


def request_headers(
    method: str, content: bytes | None, idempotency_key: str | None
) -> dict[str, str]:
    headers = {"Content-Type": "application/json"} if content is not None else {}
    if method in WRITE_METHODS:
        headers["Idempotency-Key"] = idempotency_key or uuid.uuid4().hex
    return headers


def present(params: dict[str, Any] | None) -> dict[str, Any] | None:
    """The parameters that have a value; None rather than {}: httpx parses the URL once
    more to merge even no parameters."""
    return {k: v for k, v in (params or {}).items() if v is not None} or None


def retry_delay(backoff: float, attempt: int, retry_after: str | None) -> float:
    delay: float = backoff * 2**attempt
    if retry_after and retry_after.isascii() and retry_after.isdigit():
        delay = max(delay, float(retry_after))
    return min(delay, 10.0)


def unreachable(base_url: object, exc: Exception, method: str, path: str) -> ApiError:
    return ApiError(0, f"cannot reach {base_url}: {exc}", method, path)


def answer_of(response: httpx.Response, method: str, path: str) -> Any:
    """The decoded answer, or ApiError with the API's explanation."""
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise ApiError(response.status_code, detail, method, path)
    return orjson.loads(response.content) if response.content else None


class CrucibleClient:
    def __init__(
        self,
        api_url: str,
        token: str | None,
        *,
        timeout: float = 30.0,
        retries: int = 5,
        backoff: float = 0.25,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(
            base_url=api_url.rstrip("/"), headers=headers, timeout=timeout, transport=transport
        )
        self._retries = retries
        self._backoff = backoff

    @classmethod
    def from_settings(cls, settings: Settings, *, retries: int = 5) -> "CrucibleClient":
        return cls(settings.api_url, token_of(settings), retries=retries)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "CrucibleClient":
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | None = None,
        params: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> Any:
        """`content` is a body already encoded as JSON, for callers that encode faster."""
        headers = request_headers(method, content, idempotency_key)
        params = present(params)
        for attempt in range(self._retries + 1):
            try:
                response = self._http.request(
                    method, path, json=json, content=content, params=params, headers=headers
                )
            except httpx.TransportError as exc:
                if attempt == self._retries:
                    raise unreachable(self._http.base_url, exc, method, path) from exc
                time.sleep(retry_delay(self._backoff, attempt, None))
                continue
            if response.status_code in RETRY_STATUSES and attempt < self._retries:
                time.sleep(retry_delay(self._backoff, attempt, response.headers.get("Retry-After")))
                continue
            return answer_of(response, method, path)
        raise AssertionError("unreachable")

    def send(self, call: calls.Call[T]) -> T:
        content = None if call.body is None else orjson.dumps(call.json())
        try:
            answer = self.request(call.method, call.path, content=content, params=dict(call.params))
        except ApiError as exc:
            if call.missing_is_none and exc.status == 404:
                return None  # type: ignore[return-value]  # the call's type says so
            raise
        return call.parse(answer)

    def _get(self, path: str, model: type[T] | Any, **params: Any) -> T:
        return calls.Call("get", "GET", path, model, params=params).parse(
            self.request("GET", path, params=params)
        )

    def _post(self, path: str, body: BaseModel | None, model: type[T] | Any) -> T:
        return self.send(calls.Call("post", "POST", path, model, body))

    # -- resources ---------------------------------------------------------------------------

    def create_project(self, name: str, description: str = "") -> ProjectPublic:
        return self._post(
            "/api/v1/projects", ProjectCreate(name=name, description=description), ProjectPublic
        )

    def create_project_from(self, project_in: ProjectCreate) -> ProjectPublic:
        """Create a project with every field (its Kubernetes namespace, for one)."""
        return self.send(calls.create_project(project_in))

    def list_projects(self, cursor: str | None = None) -> Page[ProjectPublic]:
        return self.send(calls.list_projects(cursor))

    def create_token(self, token_in: TokenCreate) -> TokenCreated:
        return self.send(calls.create_token(token_in))

    def list_tokens(self) -> Page[TokenPublic]:
        return self.send(calls.list_tokens())

    def revoke_token(self, token_id: int) -> TokenPublic:
        return self.send(calls.revoke_token(token_id))

    def list_experiments(self, project: str | None = None) -> Page[ExperimentPublic]:
        return self._get("/api/v1/experiments", Page[ExperimentPublic], project=project)

    def submit_run(self, run_in: RunSubmit) -> RunPublic:
        return self.send(calls.submit_run(run_in))

    def list_runs(self, **filters: Any) -> Page[RunPublic]:
        return self._get("/api/v1/runs", Page[RunPublic], **filters)

    def get_run(self, run_id: int) -> RunPublic:
        return self.send(calls.get_run(run_id))

    def cancel_run(self, run_id: int) -> RunPublic:
        return self.send(calls.cancel_run(run_id))

    def preempt_run(self, run_id: int) -> RunPublic:
        return self._post(f"/api/v1/runs/{run_id}/preempt", None, RunPublic)

    def run_goodput(self, run_id: int) -> RunGoodput:
        return self._get(f"/api/v1/runs/{run_id}/goodput", RunGoodput)

    def experiment_goodput(self, experiment_id: int) -> ExperimentGoodput:
        return self._get(f"/api/v1/experiments/{experiment_id}/goodput", ExperimentGoodput)

    def list_run_profiles(self, run_id: int) -> RunProfiles:
        return self._get(f"/api/v1/runs/{run_id}/profiles", RunProfiles)

    def request_run_profile(self, run_id: int, steps: int) -> ProfileRequestPublic:
        """Ask the running run to record its next `steps` steps."""
        body = ProfileRequestCreate(steps=steps)
        return self._post(f"/api/v1/runs/{run_id}/profile", body, ProfileRequestPublic)

    def resolve_inputs(self, run_id: int) -> InputsResolution:
        return self.send(calls.resolve_inputs(run_id))

    def report_phase(self, run_id: int, report: PhaseReport) -> RunPublic:
        return self.send(calls.report_phase(run_id, report))

    def start_attempt(self, run_id: int, attempt_in: AttemptStart) -> AttemptPublic:
        return self.send(calls.start_attempt(run_id, attempt_in))

    def end_attempt(self, run_id: int, number: int, attempt_in: AttemptEnd) -> AttemptPublic:
        return self.send(calls.end_attempt(run_id, number, attempt_in))

    def report_environment(
        self, run_id: int, number: int, environment: AttemptEnvironment
    ) -> AttemptPublic:
        content = orjson.dumps(environment.model_dump(mode="json"))
        path = f"/api/v1/runs/{run_id}/attempts/{number}/environment"
        return AttemptPublic.model_validate(self.request("PUT", path, content=content))

    def list_attempts(self, run_id: int) -> list[AttemptPublic]:
        return self.send(calls.list_attempts(run_id))

    def report_cluster(self, cluster: str, report: ClusterReport) -> ReportReceived:
        """Replace what this backend last reported about its nodes and pods."""
        return self.send(calls.report_cluster(cluster, report))

    def get_cluster(self) -> ClusterView:
        return self._get("/api/v1/cluster", ClusterView)

    def list_run_pods(self, run_id: int) -> list[RunPodPublic]:
        return self._get(f"/api/v1/runs/{run_id}/pods", list[RunPodPublic])

    def list_deployments(
        self, project: str | None = None, limit: int = 100, cursor: str | None = None
    ) -> DeploymentsPublic:
        """Served checkpoints this token may see, newest first."""
        return self._get(
            "/api/v1/deployments", DeploymentsPublic, project=project, limit=limit, cursor=cursor
        )

    def get_deployment(self, deployment_id: int) -> DeploymentPublic:
        return self._get(f"/api/v1/deployments/{deployment_id}", DeploymentPublic)

    def report_deployment(
        self, backend: str, project: str, name: str, report: DeploymentReport
    ) -> DeploymentPublic:
        """Create or update a served checkpoint as this backend sees it."""
        return self.send(calls.report_deployment(backend, project, name, report))

    def remove_deployment(self, backend: str, project: str, name: str) -> None:
        """Forget a served checkpoint; one already gone is no error."""
        self.send(calls.remove_deployment(backend, project, name))

    def promote_checkpoint(self, deployment_id: int, checkpoint_id: int) -> PromotionAccepted:
        """Ask a deployment to serve a checkpoint of its project; accepted, then done by a
        worker and the operator."""
        return self.send(calls.promote_checkpoint(deployment_id, checkpoint_id))

    def list_events(self, run_id: int, after_id: int = 0) -> list[RunEventPublic]:
        return self.send(calls.list_events(run_id, after_id))

    def event_feed(self, after_id: int | None = None, limit: int = 1000) -> EventFeed:
        """Events of every run this token may see after `after_id` (None: from now on)."""
        return self.send(calls.event_feed(after_id, limit))

    def lineage(
        self, entity: str, entity_id: int, direction: str = "both", depth: int = 5
    ) -> dict[str, Any]:
        result: dict[str, Any] = self.request(
            "GET",
            f"/api/v1/lineage/{entity}/{entity_id}",
            params={"direction": direction, "depth": depth},
        )
        return result

    def heartbeat(
        self, run_id: int, attempt: int, profile: ProfileProgress | None = None
    ) -> HeartbeatAnswer:
        body = AttemptHeartbeat(attempt=attempt, profile=profile)
        return self._post(f"/api/v1/runs/{run_id}/heartbeat", body, HeartbeatAnswer)

    # -- metrics, checkpoints, datasets, evals -----------------------------------------------

    def register_checkpoint(self, run_id: int, checkpoint_in: CheckpointCreate) -> CheckpointPublic:
        return self._post(f"/api/v1/runs/{run_id}/checkpoints", checkpoint_in, CheckpointPublic)

    def latest_checkpoint(self, run_id: int) -> CheckpointPublic | None:
        """The run's newest live checkpoint, or None when it has none yet."""
        return self.send(calls.latest_checkpoint(run_id))

    def get_checkpoint(self, checkpoint_id: int) -> CheckpointPublic:
        return self._get(f"/api/v1/checkpoints/{checkpoint_id}", CheckpointPublic)

    def list_checkpoints(self, run_id: int, cursor: str | None = None) -> Page[CheckpointPublic]:
        return self._get(
            f"/api/v1/runs/{run_id}/checkpoints", Page[CheckpointPublic], cursor=cursor
        )

    def resolve_dataset(self, project: str, ref: str) -> DatasetVersionPublic:
        return self._get("/api/v1/datasets/resolve", DatasetVersionPublic, project=project, ref=ref)

    def register_dataset_version(self, version_in: DatasetVersionCreate) -> DatasetVersionPublic:
        return self._post("/api/v1/datasets/versions", version_in, DatasetVersionPublic)

    def list_datasets(
        self, project: str, cursor: str | None = None, limit: int | None = None
    ) -> Page[DatasetPublic]:
        """The project's datasets by name, each with its latest version number."""
        return self._get(
            "/api/v1/datasets", Page[DatasetPublic], project=project, cursor=cursor, limit=limit
        )

    def list_dataset_versions(
        self,
        dataset_id: int,
        cursor: str | None = None,
        limit: int | None = None,
        descending: bool = True,
    ) -> Page[DatasetVersionPublic]:
        """A dataset's versions, newest first unless `descending` is False."""
        return self._get(
            f"/api/v1/datasets/{dataset_id}/versions",
            Page[DatasetVersionPublic],
            cursor=cursor,
            limit=limit,
            descending=descending,
        )

    def get_dataset_version(self, version_id: int) -> DatasetVersionPublic:
        return self._get(f"/api/v1/datasets/versions/{version_id}", DatasetVersionPublic)

    def register_artifact(self, artifact_in: ArtifactCreate) -> ArtifactPublic:
        return self._post("/api/v1/artifacts", artifact_in, ArtifactPublic)

    def get_artifact(self, artifact_id: int) -> ArtifactPublic:
        return self._get(f"/api/v1/artifacts/{artifact_id}", ArtifactPublic)

    def list_artifacts(
        self,
        project: str,
        kind: str | None = None,
        cursor: str | None = None,
        *,
        name: str | None = None,
    ) -> Page[ArtifactPublic]:
        params = {"project": project, "cursor": cursor}
        params |= ({"kind": kind} if kind else {}) | ({"name": name} if name else {})
        return self._get("/api/v1/artifacts", Page[ArtifactPublic], **params)

    def link_input(self, run_id: int, input_in: RunInputCreate) -> RunInputPublic:
        return self._post(f"/api/v1/runs/{run_id}/inputs", input_in, RunInputPublic)

    def list_inputs(self, run_id: int) -> list[RunInputPublic]:
        return self._get(f"/api/v1/runs/{run_id}/inputs", list[RunInputPublic])

    def record_eval(self, result_in: EvalResultCreate) -> EvalResultPublic:
        return self._post("/api/v1/evals", result_in, EvalResultPublic)

    def list_run_evals(self, run_id: int) -> list[EvalResultPublic]:
        """Eval results of every checkpoint the run wrote."""
        return self._get(f"/api/v1/runs/{run_id}/evals", list[EvalResultPublic])

    def list_checkpoint_evals(self, checkpoint_id: int) -> list[EvalResultPublic]:
        """Eval results recorded for one checkpoint, every suite."""
        return self.send(calls.list_checkpoint_evals(checkpoint_id))

    def get_project(self, project_id: int) -> ProjectPublic:
        return self._get(f"/api/v1/projects/{project_id}", ProjectPublic)
