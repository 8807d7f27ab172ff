"""The REST calls, each described once (method, path, body, what the answer validates as),
so that the blocking client (http.py) and the asynchronous one (async_http.py) send the same
requests. Only the calls both clients need are here (the operator and the CLI both send the
sweeps'); the rest live in http.py alone."""

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter

from crucible.schemas.cluster import ClusterReport, ReportReceived
from crucible.schemas.common import Page
from crucible.schemas.deployments import (
    DeploymentPublic,
    DeploymentReport,
    Promotion,
    PromotionAccepted,
)
from crucible.schemas.lineage import CheckpointPublic, EvalResultPublic
from crucible.schemas.runs import (
    AttemptEnd,
    AttemptPublic,
    AttemptStart,
    EventFeed,
    InputsResolution,
    PhaseReport,
    RunEventPublic,
    RunPublic,
    RunSubmit,
)
from crucible.schemas.sweeps import SweepPublic, SweepsPublic, SweepSubmit
from crucible.schemas.tenancy import (
    ProjectCreate,
    ProjectPublic,
    TokenCreate,
    TokenCreated,
    TokenPublic,
)

T = TypeVar("T")


@dataclass(frozen=True)
class Call(Generic[T]):
    name: str  # for metrics: which call
    method: str
    path: str
    answer: Any  # the type the answer validates as
    body: BaseModel | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    missing_is_none: bool = False  # a 404 answers None

    def json(self) -> Any:
        if self.body is None:
            return None
        return self.body.model_dump(mode="json", by_alias=True, exclude_unset=True)

    def parse(self, answer: Any) -> T:
        return _adapter(self.answer).validate_python(answer)  # type: ignore[no-any-return]


@cache
def _adapter(answer: Any) -> TypeAdapter[Any]:
    """Built once per type: a TypeAdapter compiles its validator when constructed."""
    return TypeAdapter(answer)


def get_run(run_id: int) -> Call[RunPublic]:
    return Call("get_run", "GET", f"/api/v1/runs/{run_id}", RunPublic)


def submit_run(run_in: RunSubmit) -> Call[RunPublic]:
    return Call("submit_run", "POST", "/api/v1/runs", RunPublic, run_in)


def cancel_run(run_id: int) -> Call[RunPublic]:
    return Call("cancel_run", "POST", f"/api/v1/runs/{run_id}/cancel", RunPublic)


def resolve_inputs(run_id: int) -> Call[InputsResolution]:
    path = f"/api/v1/runs/{run_id}/inputs/resolve"
    return Call("resolve_inputs", "POST", path, InputsResolution)


def report_phase(run_id: int, report: PhaseReport) -> Call[RunPublic]:
    return Call("report_phase", "POST", f"/api/v1/runs/{run_id}/phase", RunPublic, report)


def start_attempt(run_id: int, attempt_in: AttemptStart) -> Call[AttemptPublic]:
    path = f"/api/v1/runs/{run_id}/attempts"
    return Call("start_attempt", "POST", path, AttemptPublic, attempt_in)


def end_attempt(run_id: int, number: int, attempt_in: AttemptEnd) -> Call[AttemptPublic]:
    path = f"/api/v1/runs/{run_id}/attempts/{number}/end"
    return Call("end_attempt", "POST", path, AttemptPublic, attempt_in)


def list_attempts(run_id: int) -> Call[list[AttemptPublic]]:
    return Call("list_attempts", "GET", f"/api/v1/runs/{run_id}/attempts", list[AttemptPublic])


def list_events(run_id: int, after_id: int = 0) -> Call[list[RunEventPublic]]:
    path = f"/api/v1/runs/{run_id}/events"
    return Call("list_events", "GET", path, list[RunEventPublic], params={"after_id": after_id})


def event_feed(after_id: int | None = None, limit: int = 1000) -> Call[EventFeed]:
    """Events of every run this token may see after `after_id` (None: from now on)."""
    params: dict[str, Any] = {"limit": limit}
    if after_id is not None:
        params["after_id"] = after_id
    return Call("event_feed", "GET", "/api/v1/events", EventFeed, params=params)


def latest_checkpoint(run_id: int) -> Call[CheckpointPublic | None]:
    """The run's newest live checkpoint, or None when it has none yet."""
    path = f"/api/v1/runs/{run_id}/checkpoints/latest"
    return Call("latest_checkpoint", "GET", path, CheckpointPublic, missing_is_none=True)


def list_checkpoint_evals(checkpoint_id: int) -> Call[list[EvalResultPublic]]:
    """Eval results recorded for one checkpoint, every suite."""
    path = f"/api/v1/checkpoints/{checkpoint_id}/evals"
    return Call("list_checkpoint_evals", "GET", path, list[EvalResultPublic])


def list_projects(cursor: str | None = None) -> Call[Page[ProjectPublic]]:
    params = {"cursor": cursor} if cursor else {}
    return Call("list_projects", "GET", "/api/v1/projects", Page[ProjectPublic], params=params)


def create_project(project_in: ProjectCreate) -> Call[ProjectPublic]:
    return Call("create_project", "POST", "/api/v1/projects", ProjectPublic, project_in)


def create_token(token_in: TokenCreate) -> Call[TokenCreated]:
    return Call("create_token", "POST", "/api/v1/tokens", TokenCreated, token_in)


def list_tokens() -> Call[Page[TokenPublic]]:
    """Every token this token may see (all of them for a global admin), revoked ones too."""
    return Call("list_tokens", "GET", "/api/v1/tokens", Page[TokenPublic])


def revoke_token(token_id: int) -> Call[TokenPublic]:
    return Call("revoke_token", "DELETE", f"/api/v1/tokens/{token_id}", TokenPublic)


def report_cluster(cluster: str, report: ClusterReport) -> Call[ReportReceived]:
    """Replace what this backend last reported about its nodes and pods."""
    path = f"/api/v1/clusters/{cluster}/report"
    return Call("report_cluster", "PUT", path, ReportReceived, report)


def report_deployment(
    backend: str, project: str, name: str, report: DeploymentReport
) -> Call[DeploymentPublic]:
    """Create or update a served checkpoint as this backend sees it; the answer says which
    checkpoint its reference resolves to now (`checkpoint_id`, or `resolve_error`)."""
    path = f"/api/v1/deployments/{backend}/{project}/{name}"
    return Call("report_deployment", "PUT", path, DeploymentPublic, report)


def remove_deployment(backend: str, project: str, name: str) -> Call[None]:
    """Forget a served checkpoint; one already gone is no error."""
    path = f"/api/v1/deployments/{backend}/{project}/{name}"
    return Call("remove_deployment", "DELETE", path, None)


def promote_checkpoint(deployment_id: int, checkpoint_id: int) -> Call[PromotionAccepted]:
    """Ask a deployment to serve a checkpoint of its project; a worker patches its resource."""
    path = f"/api/v1/deployments/{deployment_id}/promote"
    body = Promotion(checkpoint_id=checkpoint_id)
    return Call("promote_checkpoint", "POST", path, PromotionAccepted, body)


def submit_sweep(sweep_in: SweepSubmit) -> Call[SweepPublic]:
    return Call("submit_sweep", "POST", "/api/v1/sweeps", SweepPublic, sweep_in)


def get_sweep(sweep_id: int) -> Call[SweepPublic]:
    return Call("get_sweep", "GET", f"/api/v1/sweeps/{sweep_id}", SweepPublic)


def cancel_sweep(sweep_id: int) -> Call[SweepPublic]:
    return Call("cancel_sweep", "POST", f"/api/v1/sweeps/{sweep_id}/cancel", SweepPublic)


def list_sweeps(project: str, cursor: str | None = None) -> Call[SweepsPublic]:
    params = {"project": project, "cursor": cursor}
    return Call("list_sweeps", "GET", "/api/v1/sweeps", SweepsPublic, params=params)
