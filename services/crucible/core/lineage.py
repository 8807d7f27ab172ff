"""Lineage: the edges written beside each fact, what runs read, and walks over the graph.

Every write that creates a fact (a run produced a checkpoint, read a dataset version, ...)
adds the matching `LineageEdge` in the same transaction, so graph queries are one recursive
CTE over one table and never a UNION over the fact tables.
"""

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ARRAY,
    CTE,
    BigInteger,
    ColumnElement,
    Executable,
    Integer,
    Select,
    String,
    and_,
    any_,
    bindparam,
    cast,
    literal,
    literal_column,
    null,
    select,
    union_all,
)
from sqlalchemy.orm import InstrumentedAttribute, Session

from crucible.core.access import Principal
from crucible.core.lookups import get_or_404
from crucible.core.runs import load_run
from crucible.db.tables import (
    Artifact,
    Checkpoint,
    Dataset,
    DatasetVersion,
    EvalResult,
    LineageEdge,
    Run,
    RunInput,
)
from crucible.db.upsert import insert_ignoring_duplicates
from crucible.domain.enums import EdgeRelation, LineageDirection, NodeType, Role
from crucible.domain.errors import InvalidInput, NotFound
from crucible.schemas.lineage import (
    LineageGraph,
    RunInputCreate,
    RunInputPublic,
)

MAX_DEPTH = 50
NODE_CAP = 5000
# A node reached along several edges (or at several depths) is one walk row per way in, so
# the walk itself is capped higher than the node count; either cap marks the graph truncated.
ROW_CAP = 4 * NODE_CAP
_TYPE_LENGTH = 16  # lineage_edges.src_type / dst_type
_ID_ARRAY = ARRAY(BigInteger)

Node = tuple[str, int]  # (NodeType value, id)


def add_edge(
    session: Session,
    *,
    project_id: int,
    source: tuple[NodeType, int],
    target: tuple[NodeType, int],
    relation: EdgeRelation,
) -> None:
    insert_ignoring_duplicates(
        session,
        LineageEdge,
        project_id=project_id,
        src_type=source[0].value,
        src_id=source[1],
        dst_type=target[0].value,
        dst_id=target[1],
        relation=relation.value,
    )


# --- run inputs ---------------------------------------------------------------------------


def link_input(
    *, session: Session, principal: Principal, run_id: int, input_in: RunInputCreate
) -> RunInputPublic:
    """Record that a run reads a dataset version or an artifact, or starts from a checkpoint
    (idempotent)."""
    run = load_run(session, principal, run_id, Role.editor)
    if input_in.dataset_version_id is not None:
        version_id = input_in.dataset_version_id
        version = get_or_404(session, DatasetVersion, version_id, "dataset version")
        dataset = session.get_one(Dataset, version.dataset_id)
        if dataset.project_id != run.project_id:
            raise NotFound("dataset version", version_id)
        insert_ignoring_duplicates(session, RunInput, run_id=run.id, dataset_version_id=version_id)
        add_edge(
            session,
            project_id=run.project_id,
            source=(NodeType.dataset_version, version_id),
            target=(NodeType.run, run.id),
            relation=EdgeRelation.consumed_by,
        )
        row = session.scalar(
            select(RunInput).where(
                RunInput.run_id == run.id, RunInput.dataset_version_id == version_id
            )
        )
    elif input_in.artifact_id is not None:
        artifact_id = input_in.artifact_id
        artifact = get_or_404(session, Artifact, artifact_id, "artifact")
        if artifact.project_id != run.project_id:
            raise NotFound("artifact", artifact_id)
        insert_ignoring_duplicates(session, RunInput, run_id=run.id, artifact_id=artifact_id)
        add_edge(
            session,
            project_id=run.project_id,
            source=(NodeType.artifact, artifact_id),
            target=(NodeType.run, run.id),
            relation=EdgeRelation.consumed_by,
        )
        row = session.scalar(
            select(RunInput).where(RunInput.run_id == run.id, RunInput.artifact_id == artifact_id)
        )
    else:
        assert input_in.checkpoint_id is not None  # the schema demands exactly one
        checkpoint_id = input_in.checkpoint_id
        checkpoint = get_or_404(session, Checkpoint, checkpoint_id, "checkpoint")
        if session.get_one(Run, checkpoint.run_id).project_id != run.project_id:
            raise NotFound("checkpoint", checkpoint_id)
        if checkpoint.run_id == run.id:
            raise InvalidInput(
                "checkpoint_id",
                checkpoint_id,
                f"run {run.id} wrote this checkpoint, so it cannot start from it; "
                "resume through a new attempt instead",
                location="body",
            )
        link_checkpoint_input(
            session, project_id=run.project_id, checkpoint_id=checkpoint_id, run_id=run.id
        )
        row = session.scalar(
            select(RunInput).where(
                RunInput.run_id == run.id, RunInput.checkpoint_id == checkpoint_id
            )
        )
    assert row is not None  # inserted above, or there already
    return _input_public(session, [row])[0]


def link_checkpoint_input(
    session: Session, *, project_id: int, checkpoint_id: int, run_id: int
) -> None:
    """The run reads the checkpoint: a RunInput row and its `initialised` edge."""
    insert_ignoring_duplicates(session, RunInput, run_id=run_id, checkpoint_id=checkpoint_id)
    add_edge(
        session,
        project_id=project_id,
        source=(NodeType.checkpoint, checkpoint_id),
        target=(NodeType.run, run_id),
        relation=EdgeRelation.initialised,
    )


def list_inputs(*, session: Session, principal: Principal, run_id: int) -> list[RunInputPublic]:
    run = load_run(session, principal, run_id, Role.viewer)
    rows = list(
        session.scalars(select(RunInput).where(RunInput.run_id == run.id).order_by(RunInput.id))
    )
    return _input_public(session, rows)


def _input_public(session: Session, rows: list[RunInput]) -> list[RunInputPublic]:
    wanted: list[Node] = [_input_node(r) for r in rows]
    facts = _load_nodes(session, wanted)
    return [
        RunInputPublic(
            id=r.id,
            run_id=r.run_id,
            dataset_version_id=r.dataset_version_id,
            checkpoint_id=r.checkpoint_id,
            artifact_id=r.artifact_id,
            label=facts[node].label if node in facts else "",
            created_at=r.created_at,
        )
        for r, node in zip(rows, wanted, strict=True)
    ]


def _input_node(row: RunInput) -> Node:
    if row.dataset_version_id is not None:
        return (NodeType.dataset_version.value, row.dataset_version_id)
    if row.artifact_id is not None:
        return (NodeType.artifact.value, row.artifact_id)
    return (NodeType.checkpoint.value, row.checkpoint_id or 0)


# --- graph walks ----------------------------------------------------------------------------


def graph(
    *,
    session: Session,
    principal: Principal,
    node_type: NodeType,
    node_id: int,
    direction: LineageDirection,
    depth: int,
) -> LineageGraph:
    """Everything within `depth` hops of a node: upstream (what it was made from), downstream
    (what was made from it) or both, as nodes with labels and the edges walked."""
    if not 1 <= depth <= MAX_DEPTH:
        raise InvalidInput("depth", depth, f"walk between 1 and {MAX_DEPTH} hops", location="query")
    entity = node_type.value.replace("_", " ")
    root: Node = (node_type.value, node_id)
    root_fact = _load_nodes(session, [root]).get(root)
    if root_fact is None:
        raise NotFound(entity, node_id)
    principal.require(root_fact.project_id, Role.viewer, entity=entity, key=node_id)

    # Nodes stay (type value, id) tuples of plain values here; the one model_validate at the
    # end turns them into models in Rust, several times faster than a model per node.
    depths: dict[Node, int] = {root: 0}
    edges: dict[tuple[Node, Node], str] = {}
    rows_per_walk: dict[bool, int] = {}
    parameters = {
        "root_type": node_type.value,
        "root_id": node_id,
        "max_depth": depth,
        "row_cap": ROW_CAP + 1,
    }
    walk = session.connection().execute(_WALKS[direction], parameters).all()
    for node_type_, node_id_, hops, via_type, via_id, relation, upstream in walk:
        node = (node_type_, node_id_)
        if hops < depths.get(node, MAX_DEPTH + 1):
            depths[node] = hops
        upstream = bool(upstream)
        rows_per_walk[upstream] = rows_per_walk.get(upstream, 0) + 1
        if via_type is not None:
            via = (via_type, via_id)
            edges[(node, via) if upstream else (via, node)] = relation
    truncated = any(count > ROW_CAP for count in rows_per_walk.values())
    nearest_first = sorted(depths.items(), key=lambda kv: (kv[1], kv[0]))
    if len(nearest_first) > NODE_CAP:
        truncated = True
        nearest_first = nearest_first[:NODE_CAP]

    facts = _load_nodes(session, (n for n, _ in nearest_first))
    # Edges never cross projects, so this only drops rows deleted since the edge was written.
    visible = {n for n, f in facts.items() if principal.can_see(f.project_id)}
    return LineageGraph.model_validate(
        {
            "root": {"type": node_type, "id": node_id},
            "nodes": [
                {
                    "type": n[0],
                    "id": n[1],
                    "label": facts[n].label,
                    "depth": d,
                    "data": facts[n].data,
                }
                for n, d in nearest_first
                if n in visible
            ],
            "edges": [
                {
                    "source": {"type": s[0], "id": s[1]},
                    "target": {"type": t[0], "id": t[1]},
                    "relation": relation,
                }
                for (s, t), relation in sorted(edges.items())
                if s in visible and t in visible
            ],
            "truncated": truncated,
        }
    )


def _walk(*, upstream: bool) -> Select[Any]:
    """One recursive CTE: rows (node, depth, the neighbour it was reached from, relation).

    UNION (not UNION ALL) drops a row already produced, so a cycle or a diamond adds at most
    one row per (node, depth, way in) and the walk ends at `max_depth` hops whatever the
    shape. Each step is an index lookup: (src_type, src_id, ...) downstream, (dst_type,
    dst_id) upstream. The outer LIMIT stops the recursion early on a huge graph.
    """
    edge = LineageEdge.__table__.alias("edge")
    # Postgres wants the anchor's column types to equal the recursive term's exactly.
    anchor = select(
        cast(bindparam("root_type", type_=String), String(_TYPE_LENGTH)).label("node_type"),
        cast(bindparam("root_id", type_=BigInteger), BigInteger).label("node_id"),
        literal_column("0", Integer).label("depth"),
        cast(null(), String(_TYPE_LENGTH)).label("via_type"),
        cast(null(), BigInteger).label("via_id"),
        cast(null(), String(_TYPE_LENGTH)).label("relation"),
    )
    walk: CTE = anchor.cte(name="walk_up" if upstream else "walk_down", recursive=True)
    if upstream:  # follow edges backwards: from a node to what it was made from
        near_type, near_id, far_type, far_id = (
            edge.c.dst_type,
            edge.c.dst_id,
            edge.c.src_type,
            edge.c.src_id,
        )
    else:
        near_type, near_id, far_type, far_id = (
            edge.c.src_type,
            edge.c.src_id,
            edge.c.dst_type,
            edge.c.dst_id,
        )
    step = (
        select(
            far_type, far_id, walk.c.depth + 1, walk.c.node_type, walk.c.node_id, edge.c.relation
        )
        .select_from(walk)
        .join(edge, and_(near_type == walk.c.node_type, near_id == walk.c.node_id))
        .where(walk.c.depth < bindparam("max_depth", type_=Integer))
    )
    walk = walk.union(step)
    return select(walk, literal(upstream).label("upstream")).limit(
        bindparam("row_cap", type_=Integer)
    )


# Built once: the statement cache then skips compiling them on every request.
_WALKS: dict[LineageDirection, Executable] = {
    LineageDirection.upstream: _walk(upstream=True),
    LineageDirection.downstream: _walk(upstream=False),
    LineageDirection.both: union_all(
        _walk(upstream=True).subquery().select(), _walk(upstream=False).subquery().select()
    ),
}


# --- node facts -----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Fact:
    project_id: int
    label: str
    data: dict[str, Any]


def _node_queries(
    by_id: Callable[[InstrumentedAttribute[int]], ColumnElement[bool]],
) -> dict[str, Executable]:
    """Per node type, the query for its label and details, filtered to the ids in `ids`."""
    return {
        NodeType.run.value: select(
            Run.id, Run.project_id, Run.name, Run.kind, Run.phase, Run.experiment_id
        ).where(by_id(Run.id)),
        NodeType.dataset_version.value: select(
            DatasetVersion.id,
            Dataset.project_id,
            Dataset.name,
            DatasetVersion.version,
            DatasetVersion.dataset_id,
            DatasetVersion.uri,
            DatasetVersion.digest,
            DatasetVersion.record_count,
        )
        .join(Dataset, Dataset.id == DatasetVersion.dataset_id)
        .where(by_id(DatasetVersion.id)),
        NodeType.checkpoint.value: select(
            Checkpoint.id,
            Run.project_id,
            Run.name,
            Checkpoint.run_id,
            Checkpoint.step,
            Checkpoint.uri,
            Checkpoint.digest,
            Checkpoint.deleted_at,
        )
        .join(Run, Run.id == Checkpoint.run_id)
        .where(by_id(Checkpoint.id)),
        NodeType.artifact.value: select(
            Artifact.id,
            Artifact.project_id,
            Artifact.kind,
            Artifact.name,
            Artifact.uri,
            Artifact.digest,
        ).where(by_id(Artifact.id)),
        NodeType.eval_result.value: select(
            EvalResult.id,
            Run.project_id,
            EvalResult.suite,
            EvalResult.scores,
            EvalResult.checkpoint_id,
            EvalResult.eval_run_id,
            Checkpoint.step,
        )
        .join(Checkpoint, Checkpoint.id == EvalResult.checkpoint_id)
        .join(Run, Run.id == Checkpoint.run_id)
        .where(by_id(EvalResult.id)),
    }


# Postgres gets `id = ANY(:ids)`: one SQL text whatever the number of ids, so the driver
# prepares it once per connection, where an IN list would render (and plan) a new statement
# for every length. SQLite has no arrays and takes the IN list.
_NODE_QUERIES = {
    "postgresql": _node_queries(lambda column: column == any_(bindparam("ids", type_=_ID_ARRAY))),
    "sqlite": _node_queries(lambda column: column.in_(bindparam("ids", expanding=True))),
}


def _load_nodes(session: Session, nodes: Iterable[Node]) -> dict[Node, _Fact]:
    """Labels and details of the given nodes, one query per node type; missing ones are left out
    (an edge can outlive the row it names when a run is deleted)."""
    ids: dict[str, list[int]] = defaultdict(list)
    for node_type, node_id in nodes:
        ids[node_type].append(node_id)
    # Core rows straight from the connection: these are read-only lookups, and skipping the
    # ORM's result machinery is a third of their cost.
    connection = session.connection()
    queries = _NODE_QUERIES[connection.dialect.name]
    facts: dict[Node, _Fact] = {}
    for node_type, wanted in ids.items():
        describe = _DESCRIBE[node_type]
        for node_id, *columns in connection.execute(queries[node_type], {"ids": wanted}).all():
            facts[(node_type, node_id)] = describe(*columns)
    return facts


def _run_fact(project_id: int, name: str, kind: str, phase: str, experiment_id: int) -> _Fact:
    return _Fact(project_id, name, {"kind": kind, "phase": phase, "experiment_id": experiment_id})


def _dataset_version_fact(
    project_id: int,
    name: str,
    version: int,
    dataset_id: int,
    uri: str,
    digest: str,
    record_count: int | None,
) -> _Fact:
    return _Fact(
        project_id,
        f"{name}@{version}",
        {
            "dataset_id": dataset_id,
            "name": name,
            "version": version,
            "uri": uri,
            "digest": digest,
            "record_count": record_count,
        },
    )


def _checkpoint_fact(
    project_id: int,
    run_name: str,
    run_id: int,
    step: int,
    uri: str,
    digest: str,
    deleted_at: datetime | None,
) -> _Fact:
    return _Fact(
        project_id,
        f"{run_name} step {step}",
        {
            "run_id": run_id,
            "step": step,
            "uri": uri,
            "digest": digest,
            "deleted": deleted_at is not None,
        },
    )


def _eval_result_fact(
    project_id: int,
    suite: str,
    scores: dict[str, float],
    checkpoint_id: int,
    eval_run_id: int | None,
    step: int,
) -> _Fact:
    return _Fact(
        project_id,
        _eval_label(suite, scores),
        {
            "suite": suite,
            "scores": scores,
            "checkpoint_id": checkpoint_id,
            "eval_run_id": eval_run_id,
            "step": step,
        },
    )


def _artifact_fact(project_id: int, kind: str, name: str, uri: str, digest: str) -> _Fact:
    return _Fact(project_id, f"{kind} {name}", {"kind": kind, "uri": uri, "digest": digest})


# Each takes a node query's columns after the id, in order.
_DESCRIBE: dict[str, Callable[..., _Fact]] = {
    NodeType.run.value: _run_fact,
    NodeType.dataset_version.value: _dataset_version_fact,
    NodeType.checkpoint.value: _checkpoint_fact,
    NodeType.eval_result.value: _eval_result_fact,
    NodeType.artifact.value: _artifact_fact,
}


def _eval_label(suite: str, scores: dict[str, float], shown: int = 3) -> str:
    items = sorted(scores.items())
    text = ", ".join(f"{name}={value:.4g}" for name, value in items[:shown])
    more = ", ..." if len(items) > shown else ""
    return f"{suite}: {text}{more}"
