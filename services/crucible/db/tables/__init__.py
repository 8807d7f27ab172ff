"""All tables, imported here so `Base.metadata` is complete for Alembic and tests."""

from crucible.db.tables.base import Base
from crucible.db.tables.cluster import ClusterNode, RunPod
from crucible.db.tables.lineage import (
    Artifact,
    Checkpoint,
    Dataset,
    DatasetVersion,
    EvalResult,
    LineageEdge,
    RunInput,
)
from crucible.db.tables.metrics import MetricChunk, MetricSeries
from crucible.db.tables.mlflow import LoggedModel
from crucible.db.tables.plumbing import IdempotencyRecord, OutboxMessage
from crucible.db.tables.runs import Attempt, Run, RunEvent, RunProfileRequest
from crucible.db.tables.serving import Deployment
from crucible.db.tables.sweeps import Sweep, SweepTrial
from crucible.db.tables.tenancy import ApiToken, Experiment, Project

__all__ = [
    "ApiToken",
    "Artifact",
    "Attempt",
    "Base",
    "Checkpoint",
    "ClusterNode",
    "Dataset",
    "DatasetVersion",
    "Deployment",
    "EvalResult",
    "Experiment",
    "IdempotencyRecord",
    "LineageEdge",
    "LoggedModel",
    "MetricChunk",
    "MetricSeries",
    "OutboxMessage",
    "Project",
    "Run",
    "RunEvent",
    "RunInput",
    "RunPod",
    "RunProfileRequest",
    "Sweep",
    "SweepTrial",
]
