"""Lineage graph walks at 100,000 entities: GET /api/v1/lineage/...?depth=10 through the real app.

Builds, in the Postgres at CRUCIBLE_DATABASE_URL, one fresh project holding families of
model-improvement loops (per generation: a train run reads the family's dataset and sometimes
another family's, starts from the previous generation's best checkpoint and writes
checkpoints; an eval run scores each checkpoint; a rollout run starts from the best one and
writes the next dataset version). Rows go in with COPY, ids reserved from the tables' own
sequences, so the database stays usable afterwards.

It then starts the API under uvicorn in a subprocess (one worker, as `crucible server` would)
and times sequential keep-alive requests from random roots in the middle generations: each
direction from any kind of node, and both directions from train runs (the largest
neighbourhoods). The headline figure is `both` from any node. The same walks are also timed
in-process through the service function, without HTTP, to show where the time goes. The
project is deleted at the end unless --keep.

    eval "$(scripts/services env)"
    .venv/bin/python benchmarks/lineage_bench.py            # writes benchmarks/results/lineage.json
"""

import argparse
import json
import math
import os
import platform
import random
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import Engine, create_engine, delete, select, text
from sqlalchemy.orm import Session

from crucible.core import lineage
from crucible.core.access import SYSTEM
from crucible.db import schema
from crucible.db.tables import Experiment, Project, Run, RunInput
from crucible.domain.enums import EdgeRelation, LineageDirection, NodeType

RESULTS = Path(__file__).parent / "results" / "lineage.json"
TARGET_P50_MS = 50.0
CHECKPOINTS_PER_RUN = 4
ENTITIES_PER_GENERATION = 1 + CHECKPOINTS_PER_RUN + 1 + CHECKPOINTS_PER_RUN + 1 + 1
CROSS_FAMILY_READS = 0.3  # share of train runs that also read another family's dataset


@dataclass
class Rows:
    """Everything to COPY, per table, plus the node ids to draw roots from."""

    runs: list[tuple[Any, ...]] = field(default_factory=list)
    versions: list[tuple[Any, ...]] = field(default_factory=list)
    checkpoints: list[tuple[Any, ...]] = field(default_factory=list)
    evals: list[tuple[Any, ...]] = field(default_factory=list)
    inputs: list[tuple[Any, ...]] = field(default_factory=list)
    edges: list[tuple[Any, ...]] = field(default_factory=list)
    middle: list[tuple[NodeType, int]] = field(default_factory=list)
    middle_train_runs: list[tuple[NodeType, int]] = field(default_factory=list)

    @property
    def entities(self) -> int:
        return len(self.runs) + len(self.versions) + len(self.checkpoints) + len(self.evals)


class Ids:
    """Ids drawn from the tables' own sequences, so later inserts by the app never collide."""

    def __init__(self, session: Session, counts: dict[str, int]) -> None:
        self._free: dict[str, Iterator[int]] = {}
        for table, count in counts.items():
            ids = session.scalars(
                text(
                    f"SELECT nextval(pg_get_serial_sequence('{table}', 'id')) "
                    "FROM generate_series(1, :n)"
                ),
                {"n": count},
            ).all()
            self._free[table] = iter(ids)

    def next(self, table: str) -> int:
        return next(self._free[table])


def build_rows(
    session: Session,
    project_id: int,
    experiment_id: int,
    families: int,
    generations: int,
    seed: int,
) -> Rows:
    rng = random.Random(seed)
    now = datetime.now(UTC)
    ids = Ids(
        session,
        {
            "runs": families * generations * 3,
            "datasets": families,
            "dataset_versions": families * (generations + 1),
            "checkpoints": families * generations * CHECKPOINTS_PER_RUN,
            "eval_results": families * generations * CHECKPOINTS_PER_RUN,
        },
    )
    rows = Rows()
    datasets: list[tuple[Any, ...]] = []
    versions_by_family: list[list[int]] = []

    def edge(src: tuple[NodeType, int], dst: tuple[NodeType, int], rel: EdgeRelation) -> None:
        rows.edges.append((project_id, src[0].value, src[1], dst[0].value, dst[1], rel.value))

    def run(name: str, kind: str) -> int:
        run_id = ids.next("runs")
        manifest = {"kind": kind, "metadata": {"name": name}, "spec": {"experiment": "bench"}}
        rows.runs.append(
            (
                run_id,
                project_id,
                experiment_id,
                name,
                kind,
                "local",
                "Succeeded",
                "Completed",
                "",
                json.dumps(manifest),
                f"sha256:{run_id:064x}",
                "",
                "{}",
                8,
                1,
                now,
                now,
            )
        )
        return run_id

    def version(family: int, number: int, producer: int | None) -> int:
        version_id = ids.next("dataset_versions")
        rows.versions.append(
            (
                version_id,
                datasets[family][0],
                number,
                f"s3://bench/family-{family}/v{number}",
                f"sha256:{version_id:064x}",
                10_000,
                "{}",
                producer,
                now,
            )
        )
        return version_id

    for family in range(families):
        datasets.append((ids.next("datasets"), project_id, f"family-{family}", "", now))
        versions_by_family.append([version(family, 1, None)])

    best: list[int | None] = [None] * families
    for generation in range(generations):
        middle = generations // 4 <= generation < 3 * generations // 4
        for family in range(families):
            prefix = f"f{family}-g{generation}"
            data = versions_by_family[family][-1]
            train = run(f"{prefix}-train", "train")
            reads = [data]
            if rng.random() < CROSS_FAMILY_READS:
                reads.append(rng.choice(versions_by_family[rng.randrange(families)]))
            for version_id in dict.fromkeys(reads):
                rows.inputs.append((train, version_id, None, now))
                edge(
                    (NodeType.dataset_version, version_id),
                    (NodeType.run, train),
                    EdgeRelation.consumed_by,
                )
            if best[family] is not None:
                rows.inputs.append((train, None, best[family], now))
                edge(
                    (NodeType.checkpoint, best[family] or 0),
                    (NodeType.run, train),
                    EdgeRelation.initialised,
                )

            evaluator = run(f"{prefix}-eval", "eval")
            written = []
            for k in range(CHECKPOINTS_PER_RUN):
                checkpoint = ids.next("checkpoints")
                written.append(checkpoint)
                rows.checkpoints.append(
                    (
                        checkpoint,
                        train,
                        (k + 1) * 1000,
                        f"s3://bench/{prefix}/step-{(k + 1) * 1000}",
                        f"sha256:{checkpoint:064x}",
                        2**30,
                        "{}",
                        now,
                    )
                )
                edge(
                    (NodeType.run, train), (NodeType.checkpoint, checkpoint), EdgeRelation.produced
                )
                result = ids.next("eval_results")
                scores = json.dumps({"accuracy": round(rng.random(), 4)})
                rows.evals.append((result, checkpoint, evaluator, "gsm8k", scores, now))
                rows.inputs.append((evaluator, None, checkpoint, now))
                edge(
                    (NodeType.checkpoint, checkpoint),
                    (NodeType.run, evaluator),
                    EdgeRelation.initialised,
                )
                edge(
                    (NodeType.run, evaluator), (NodeType.eval_result, result), EdgeRelation.produced
                )
                edge(
                    (NodeType.checkpoint, checkpoint),
                    (NodeType.eval_result, result),
                    EdgeRelation.scored_by,
                )
                if middle:
                    rows.middle += [
                        (NodeType.checkpoint, checkpoint),
                        (NodeType.eval_result, result),
                    ]
            best[family] = rng.choice(written)

            rollout = run(f"{prefix}-rollout", "rollout")
            rows.inputs.append((rollout, None, best[family], now))
            edge(
                (NodeType.checkpoint, best[family] or 0),
                (NodeType.run, rollout),
                EdgeRelation.initialised,
            )
            produced = version(family, len(versions_by_family[family]) + 1, rollout)
            versions_by_family[family].append(produced)
            edge(
                (NodeType.run, rollout), (NodeType.dataset_version, produced), EdgeRelation.produced
            )
            if middle:
                rows.middle_train_runs.append((NodeType.run, train))
                rows.middle += [
                    (NodeType.run, train),
                    (NodeType.run, evaluator),
                    (NodeType.run, rollout),
                    (NodeType.dataset_version, produced),
                ]
    _copy(session, "datasets", ["id", "project_id", "name", "description", "created_at"], datasets)
    return rows


def _copy(
    session: Session, table: str, columns: Sequence[str], rows: list[tuple[Any, ...]]
) -> None:
    cursor = session.connection().connection.driver_connection.cursor()  # type: ignore[union-attr]
    with cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


def load(engine: Engine, families: int, generations: int, seed: int) -> tuple[int, Rows]:
    with Session(engine) as session, session.begin():
        name = f"lineage-bench-{secrets.token_hex(3)}"
        project = Project(name=name, namespace=name, description="lineage_bench.py")
        session.add(project)
        session.flush()
        experiment = Experiment(project_id=project.id, name="bench")
        session.add(experiment)
        session.flush()
        rows = build_rows(session, project.id, experiment.id, families, generations, seed)
        _copy(
            session,
            "runs",
            [
                "id",
                "project_id",
                "experiment_id",
                "name",
                "kind",
                "backend",
                "phase",
                "reason",
                "message",
                "manifest",
                "spec_digest",
                "code_ref",
                "tags",
                "gpus",
                "attempt_count",
                "created_at",
                "updated_at",
            ],
            rows.runs,
        )
        _copy(
            session,
            "dataset_versions",
            [
                "id",
                "dataset_id",
                "version",
                "uri",
                "digest",
                "record_count",
                "schema",
                "produced_by_run_id",
                "created_at",
            ],
            rows.versions,
        )
        _copy(
            session,
            "checkpoints",
            ["id", "run_id", "step", "uri", "digest", "size_bytes", "meta", "created_at"],
            rows.checkpoints,
        )
        _copy(
            session,
            "eval_results",
            ["id", "checkpoint_id", "eval_run_id", "suite", "scores", "created_at"],
            rows.evals,
        )
        _copy(
            session,
            "run_inputs",
            ["run_id", "dataset_version_id", "checkpoint_id", "created_at"],
            rows.inputs,
        )
        _copy(
            session,
            "lineage_edges",
            ["project_id", "src_type", "src_id", "dst_type", "dst_id", "relation"],
            rows.edges,
        )
        project_id = project.id
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        for table in (
            "runs",
            "dataset_versions",
            "checkpoints",
            "eval_results",
            "run_inputs",
            "lineage_edges",
        ):
            connection.execute(text(f"ANALYZE {table}"))
    return project_id, rows


def cleanup(engine: Engine, project_id: int) -> None:
    """Delete the project. run_inputs has no index on checkpoint_id or dataset_version_id, so
    its rows go first (by run) and the table is vacuumed; otherwise every cascaded checkpoint
    delete would scan it."""
    runs = select(Run.id).where(Run.project_id == project_id)
    with Session(engine) as session, session.begin():
        session.execute(delete(RunInput).where(RunInput.run_id.in_(runs)))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM run_inputs"))
    with Session(engine) as session, session.begin():
        session.execute(delete(Project).where(Project.id == project_id))


# --- timing ---------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def serve(port: int) -> None:
    """The --serve mode: the real app under uvicorn, configured from the environment."""
    import uvicorn

    from crucible.api.app import create_app
    from crucible.settings import load_settings

    uvicorn.run(
        create_app(load_settings()),
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
    )


def start_server(database_url: str, token: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "CRUCIBLE_DATABASE_URL": database_url, "CRUCIBLE_ADMIN_TOKEN": token}
    process = subprocess.Popen([sys.executable, __file__, "--serve", str(port)], env=env)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                return process, base
        except httpx.TransportError:
            time.sleep(0.2)
    process.terminate()
    raise SystemExit("the API did not start within 60 s")


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(latencies: list[float], nodes: list[int]) -> dict[str, Any]:
    return {
        "requests": len(latencies),
        "p50_ms": round(percentile(latencies, 50), 2),
        "p90_ms": round(percentile(latencies, 90), 2),
        "p99_ms": round(percentile(latencies, 99), 2),
        "mean_ms": round(statistics.fmean(latencies), 2),
        "nodes_returned": int(statistics.median(nodes)),
        "nodes_returned_max": max(nodes),
    }


def time_http(
    base: str,
    token: str,
    roots: list[tuple[NodeType, int]],
    direction: str,
    depth: int,
    warmup: int,
) -> dict[str, Any]:
    latencies: list[float] = []
    nodes: list[int] = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {token}"}) as client:
        for i, (node_type, node_id) in enumerate(roots):
            start = time.perf_counter()
            response = client.get(
                f"/api/v1/lineage/{node_type.value}/{node_id}",
                params={"direction": direction, "depth": depth},
            )
            elapsed = (time.perf_counter() - start) * 1000
            response.raise_for_status()
            if i >= warmup:
                latencies.append(elapsed)
                nodes.append(len(response.json()["nodes"]))
    return summary(latencies, nodes)


def time_service(
    engine: Engine, roots: list[tuple[NodeType, int]], direction: str, depth: int, warmup: int
) -> dict[str, Any]:
    latencies: list[float] = []
    nodes: list[int] = []
    for i, (node_type, node_id) in enumerate(roots):
        start = time.perf_counter()
        with Session(engine) as session, session.begin():
            graph = lineage.graph(
                session=session,
                principal=SYSTEM,
                node_type=node_type,
                node_id=node_id,
                direction=LineageDirection(direction),
                depth=depth,
            )
        elapsed = (time.perf_counter() - start) * 1000
        if i >= warmup:
            latencies.append(elapsed)
            nodes.append(len(graph.nodes))
    return summary(latencies, nodes)


def machine(engine: Engine) -> dict[str, Any]:
    memory_kb = next(
        int(line.split()[1])
        for line in Path("/proc/meminfo").read_text().splitlines()
        if line.startswith("MemTotal")
    )
    with engine.connect() as connection:
        postgres = connection.execute(text("SHOW server_version")).scalar()
    return {
        "cores": os.cpu_count(),
        "memory_gb": round(memory_kb / 2**20, 1),
        "python": platform.python_version(),
        "postgres": postgres,
        "platform": platform.platform(),
        # The benchmark shares the machine; a high load average inflates every figure.
        "load_average_1m_at_start": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entities", type=int, default=100_000)
    parser.add_argument("--families", type=int, default=100)
    parser.add_argument("--depth", type=int, default=10)
    parser.add_argument("--requests", type=int, default=300, help="timed requests per scenario")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--database-url", default=os.environ.get("CRUCIBLE_DATABASE_URL"))
    parser.add_argument("--output", type=Path, default=RESULTS)
    parser.add_argument("--keep", action="store_true", help="keep the project afterwards")
    parser.add_argument("--serve", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    if not args.database_url or not args.database_url.startswith("postgresql"):
        raise SystemExit("set CRUCIBLE_DATABASE_URL to a Postgres URL (scripts/services env)")

    engine = create_engine(args.database_url)
    schema.upgrade(engine)
    host = machine(engine)
    generations = max(1, math.ceil(args.entities / args.families / ENTITIES_PER_GENERATION))
    started = time.perf_counter()
    project_id, rows = load(engine, args.families, generations, args.seed)
    load_s = time.perf_counter() - started
    print(f"loaded {rows.entities} entities, {len(rows.edges)} edges in {load_s:.1f} s", flush=True)

    rng = random.Random(args.seed)
    token = f"cru_bench-{secrets.token_hex(16)}"
    process, base = start_server(args.database_url, token)
    by_scenario: dict[str, Any] = {}
    try:
        scenarios = [
            ("both", "both", rows.middle),
            ("upstream", "upstream", rows.middle),
            ("downstream", "downstream", rows.middle),
            ("both_from_train_runs", "both", rows.middle_train_runs),
        ]
        for scenario, direction, population in scenarios:
            roots = rng.sample(population, args.requests + args.warmup)
            by_scenario[scenario] = {
                "direction": direction,
                "http": time_http(base, token, roots, direction, args.depth, args.warmup),
                "service": time_service(engine, roots, direction, args.depth, args.warmup),
            }
            print(scenario, json.dumps(by_scenario[scenario]), flush=True)
    finally:
        process.terminate()
        process.wait(timeout=30)
        if not args.keep:
            cleanup(engine, project_id)

    host["load_average_1m_at_end"] = round(os.getloadavg()[0], 2)
    headline = by_scenario["both"]["http"]
    report = {
        "name": "lineage",
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": host,
        "config": {
            "entities": rows.entities,
            "edges": len(rows.edges),
            "families": args.families,
            "generations": generations,
            "checkpoints_per_run": CHECKPOINTS_PER_RUN,
            "cross_family_reads": CROSS_FAMILY_READS,
            "depth": args.depth,
            "requests_per_scenario": args.requests,
            "warmup": args.warmup,
            "roots": "random runs, dataset versions, checkpoints and eval results of the "
            "middle half of the generations (both_from_train_runs: train runs only, the "
            "largest neighbourhoods)",
            "server": "uvicorn subprocess, 1 worker; sequential keep-alive requests (httpx)",
            "load_seconds": round(load_s, 1),
        },
        "results": {
            "direction": "both",
            "p50_ms": headline["p50_ms"],
            "p90_ms": headline["p90_ms"],
            "p99_ms": headline["p99_ms"],
            "nodes_returned": headline["nodes_returned"],
            "target_p50_ms": TARGET_P50_MS,
            "by_scenario": by_scenario,
        },
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
