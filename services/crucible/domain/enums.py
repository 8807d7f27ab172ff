"""The closed vocabularies the whole system shares (API, database, operator, workers)."""

from enum import StrEnum


class RunKind(StrEnum):
    train = "train"
    rollout = "rollout"
    eval = "eval"


class Backend(StrEnum):
    local = "local"
    kubernetes = "kubernetes"


class Phase(StrEnum):
    Pending = "Pending"
    WaitingForInputs = "WaitingForInputs"
    Scheduling = "Scheduling"
    Running = "Running"
    Interrupted = "Interrupted"
    Recovering = "Recovering"
    Succeeded = "Succeeded"
    Failed = "Failed"
    Cancelled = "Cancelled"

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_PHASES


TERMINAL_PHASES = frozenset({Phase.Succeeded, Phase.Failed, Phase.Cancelled})


class AttemptReason(StrEnum):
    """Why an attempt started."""

    initial = "initial"
    preemption = "preemption"
    node_lost = "node-lost"
    failure_retry = "failure-retry"


class Role(StrEnum):
    viewer = "viewer"
    editor = "editor"
    admin = "admin"

    def allows(self, needed: "Role") -> bool:
        return _ROLE_RANK[self] >= _ROLE_RANK[needed]


_ROLE_RANK = {Role.viewer: 0, Role.editor: 1, Role.admin: 2}


class NodeType(StrEnum):
    """Kinds of node in the lineage graph."""

    dataset_version = "dataset_version"
    run = "run"
    checkpoint = "checkpoint"
    eval_result = "eval_result"
    artifact = "artifact"


class EdgeRelation(StrEnum):
    """Edges point the way data flows: from what was used to what was made."""

    consumed_by = "consumed_by"  # dataset_version -> run
    initialised = "initialised"  # checkpoint -> run (initFrom, or the checkpoint an eval scores)
    produced = "produced"  # run -> checkpoint | dataset_version | eval_result | artifact
    scored_by = "scored_by"  # checkpoint -> eval_result
    derived = "derived"  # checkpoint | dataset_version -> artifact (what it was made from)


class ArtifactKind(StrEnum):
    """What a registered artifact is."""

    model = "model"  # a Hugging Face model directory exported from a checkpoint
    tokenizer = "tokenizer"  # a tokenizer directory, e.g. BPE trained on a dataset
    code = "code"  # a team's Python code, one archive a run unpacks (artifacts/code_package.py)


class LineageDirection(StrEnum):
    upstream = "upstream"
    downstream = "downstream"
    both = "both"
