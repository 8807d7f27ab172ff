"""The generated CRDs on a real API server: they install, valid resources are accepted,
`kubectl explain` / `get` show what users need, and malformed resources are rejected with
a message naming the field, by both the API server and the pydantic models behind the REST
API (the two ways in must agree)."""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from crucible.domain.specs import Manifest, SweepManifest
from crucible_operator import crds
from tests.k8s import cluster_helpers as h

pytestmark = pytest.mark.k8s

CRD_DIR = h.REPO_ROOT / "helm" / "crucible" / "crds"
EXAMPLE = h.REPO_ROOT / "examples" / "train-and-eval.yaml"
MANIFEST = TypeAdapter(Manifest)


@pytest.fixture(scope="module")
def installed_crds(cluster: h.Cluster) -> None:
    h.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_DIR))
    for kind in crds.KINDS:
        h.kubectl("wait", "--for=condition=Established", f"crd/{kind.crd_name}", "--timeout=30s")


def example(kind: str) -> dict[str, Any]:
    docs = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    (doc,) = [d for d in docs if d["kind"] == kind]
    return dict(doc)


def rollout_job() -> dict[str, Any]:
    return {
        "apiVersion": "crucible.dev/v1alpha1",
        "kind": "RolloutJob",
        "metadata": {"name": "arith-rollouts"},
        "spec": {
            "experiment": "arithmetic",
            "policy": {"checkpoint": {"run": "arith-sft", "checkpoint": "best:accuracy"}},
            "prompts": {"dataset": "arith-prompts@latest"},
            "reward": {"name": "exact_match", "options": {"strip": True}},
            "samplesPerPrompt": 4,
            "sampling": {"temperature": 0.7, "topP": 0.95, "maxNewTokens": 32},
            "replicas": 2,
            "gpusPerReplica": 1,
            "output": "arith-rollouts",
        },
    }


VALID = {
    "TrainingRun": lambda: example("TrainingRun"),
    "EvalJob": lambda: example("EvalJob"),
    "RolloutJob": rollout_job,
}


def apply_result(obj: dict[str, Any], namespace: str) -> Any:
    """Server-side apply with strict field validation, so unknown fields are errors
    rather than silently pruned."""
    return h.kubectl_result(
        "apply",
        "--server-side",
        "--validate=strict",
        "-n",
        namespace,
        "-f",
        "-",
        input=json.dumps(obj),
    )


def test_valid_resources_are_accepted(installed_crds: None, namespace: str) -> None:
    for make in VALID.values():
        obj = make()
        MANIFEST.validate_python(obj)  # the REST API accepts it too
        proc = apply_result(obj, namespace)
        assert proc.returncode == 0, proc.stderr
    run = h.kubectl_json("get", "trainingrun", "arith-sft", namespace=namespace)
    # Defaults from the pydantic models are applied by the API server.
    assert run["spec"]["gpusPerNode"] == 0
    assert run["spec"]["recovery"]["backoffSeconds"] == 1
    assert run["spec"]["evals"][0]["gpus"] == 0
    assert run["spec"]["config"] == {  # free-form: kept as given
        "model": {"preset": "tiny"},
        "task": {"digits": 1},
        "train": {
            "mode": "sft",
            "steps": 200,
            "lr": 0.003,
            "profile_from_step": 101,
            "profile_steps": 3,
        },
    }
    ej = h.kubectl_json("get", "ej", "arith-sft-eval", namespace=namespace)
    assert ej["spec"]["checkpoint"] == {"run": "arith-sft", "checkpoint": "latest"}


def test_get_crucible_lists_all_three_kinds(installed_crds: None, namespace: str) -> None:
    for make in VALID.values():
        h.apply(make(), namespace=namespace)
    names = h.kubectl("get", "crucible", "-o", "name", namespace=namespace).split()
    assert sorted(names) == [
        "evaljob.crucible.dev/arith-sft-eval",
        "rolloutjob.crucible.dev/arith-rollouts",
        "trainingrun.crucible.dev/arith-sft",
    ]
    for short in ("tr", "rj", "ej"):
        assert h.kubectl("get", short, "-o", "name", namespace=namespace).strip()


def test_printer_columns(installed_crds: None, namespace: str) -> None:
    h.apply(example("TrainingRun"), namespace=namespace)
    h.kubectl(
        "patch",
        "tr",
        "arith-sft",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(
            {"status": {"phase": "Running", "attempt": 2, "latestCheckpoint": {"step": 150}}}
        ),
        namespace=namespace,
    )
    lines = h.kubectl("get", "tr", "-o", "wide", namespace=namespace).splitlines()
    header = lines[0].split()
    for column in ("PHASE", "ATTEMPT", "NODES", "GPUS/NODE", "STEP", "AGE", "RUN-ID"):
        assert column in header, header
    row = dict(zip(header, lines[1].split(), strict=False))
    assert (row["PHASE"], row["ATTEMPT"], row["NODES"], row["STEP"]) == ("Running", "2", "1", "150")
    h.apply(example("EvalJob"), namespace=namespace)
    ej_header = h.kubectl("get", "ej", "-o", "wide", namespace=namespace).splitlines()[0].split()
    assert {"PHASE", "ATTEMPT", "GPUS", "STEP", "SUITE"} <= set(ej_header)


def test_status_conditions_follow_metav1(installed_crds: None, namespace: str) -> None:
    h.apply(example("TrainingRun"), namespace=namespace)
    condition = {
        "type": "Ready",
        "status": "Maybe",
        "reason": "Submitted",
        "message": "",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }
    patch = {"status": {"conditions": [condition]}}
    proc = h.kubectl_result(
        "patch", "tr", "arith-sft", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(patch),
    )  # fmt: skip
    assert proc.returncode != 0
    assert "status.conditions[0].status" in proc.stderr
    condition["status"] = "True"
    h.kubectl(
        "patch", "tr", "arith-sft", "--subresource=status", "--type=merge",
        "-p", json.dumps(patch), namespace=namespace,
    )  # fmt: skip
    run = h.kubectl_json("get", "tr", "arith-sft", namespace=namespace)
    assert run["status"]["conditions"][0]["reason"] == "Submitted"


def test_explain_shows_the_descriptions(installed_crds: None) -> None:
    out = h.kubectl("explain", "trainingrun.spec.recovery")
    assert "interruptions (preemption, eviction, a lost node)" in out
    for field in ("maxInterruptions", "maxFailures", "backoffSeconds"):
        assert field in out
    assert "Preemptions / node losses tolerated" in out
    out = h.kubectl("explain", "rolloutjob.spec.sampling.topP")
    assert "Nucleus sampling" in out
    out = h.kubectl("explain", "evaljob.status.results")
    assert "Scores by metric name" in out


# --- malformed resources -----------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """A valid resource of `kind` with `change` applied (a dotted path -> value, or
    `DELETE`), and the field path both the API server and pydantic must name."""

    id: str
    kind: str
    change: dict[str, Any]
    field: str  # as the API server writes it: spec.inputs[0].dataset
    message: str = ""  # a further substring of kubectl's error (e.g. the CEL message)


DELETE = object()


def with_change(obj: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    for dotted, value in change.items():
        *parents, last = [int(p) if p.isdigit() else p for p in dotted.split(".")]
        node: Any = out
        for p in parents:
            if isinstance(p, str) and p not in node:
                node[p] = {}
            node = node[p]
        if value is DELETE:
            del node[last]
        else:
            node[last] = value
    return out


MALFORMED = [
    Bad("nodes-wrong-type", "TrainingRun", {"spec.nodes": "two"}, "spec.nodes"),
    Bad("command-not-a-list", "TrainingRun", {"spec.command": "python train.py"}, "spec.command"),
    Bad("config-not-an-object", "TrainingRun", {"spec.config": "mode=sft"}, "spec.config"),
    Bad("negative-gpus", "TrainingRun", {"spec.gpusPerNode": -1}, "spec.gpusPerNode"),
    Bad("gpus-per-node-17", "TrainingRun", {"spec.gpusPerNode": 17}, "spec.gpusPerNode"),
    Bad("zero-nodes", "TrainingRun", {"spec.nodes": 0}, "spec.nodes"),
    Bad(
        "name-41-chars",
        "TrainingRun",
        {"metadata.name": "r" * 41},
        "metadata.name",
        "must be at most 40 characters",
    ),
    Bad("name-with-dot", "TrainingRun", {"metadata.name": "arith.sft"}, "metadata.name"),
    Bad(
        "bad-dataset-ref",
        "TrainingRun",
        {"spec.inputs": [{"dataset": "arith-sft-data"}]},
        "spec.inputs[0].dataset",
    ),
    Bad(
        "dataset-and-produced-by",
        "TrainingRun",
        {"spec.inputs": [{"dataset": "d@1", "producedBy": "gen"}]},
        "spec.inputs[0]",
        "set exactly one of `dataset` and `producedBy`",
    ),
    Bad(
        "init-from-neither-id-nor-run",
        "TrainingRun",
        {"spec.initFrom": {"checkpoint": "latest"}},
        "spec.initFrom",
        "set exactly one of `id` and `run`",
    ),
    Bad("unknown-spec-field", "TrainingRun", {"spec.gpus": 8}, "spec.gpus", "not declared"),
    Bad(
        "bad-toleration-operator",
        "TrainingRun",
        {"spec.scheduling": {"tolerations": [{"key": "k", "operator": "Sometimes"}]}},
        "spec.scheduling.tolerations[0].operator",
    ),
    Bad(
        "negative-backoff",
        "TrainingRun",
        {"spec.recovery.backoffSeconds": -5},
        "spec.recovery.backoffSeconds",
    ),
    Bad(
        "negative-failure-budget",
        "TrainingRun",
        {"spec.recovery.maxFailures": -1},
        "spec.recovery.maxFailures",
    ),
    Bad("bad-env-name", "TrainingRun", {"spec.env": [{"name": "1X"}]}, "spec.env[0].name"),
    Bad(
        "bad-memory-quantity",
        "TrainingRun",
        {"spec.resources": {"memory": "lots"}},
        "spec.resources.memory",
    ),
    Bad("missing-experiment", "TrainingRun", {"spec.experiment": DELETE}, "spec.experiment"),
    Bad(
        "samples-per-prompt-0", "RolloutJob", {"spec.samplesPerPrompt": 0}, "spec.samplesPerPrompt"
    ),
    Bad("top-p-1.5", "RolloutJob", {"spec.sampling.topP": 1.5}, "spec.sampling.topP"),
    Bad("top-p-0", "RolloutJob", {"spec.sampling.topP": 0}, "spec.sampling.topP"),
    Bad(
        "policy-checkpoint-and-teacher",
        "RolloutJob",
        {"spec.policy.teacher": "arithmetic-solver"},
        "spec.policy",
        "set exactly one of `checkpoint` and `teacher`",
    ),
    Bad("missing-policy", "RolloutJob", {"spec.policy": DELETE}, "spec.policy"),
    Bad("missing-suite", "EvalJob", {"spec.suite": DELETE}, "spec.suite"),
    Bad("eval-gpus-negative", "EvalJob", {"spec.gpus": -2}, "spec.gpus"),
    Bad("nodes-1025", "TrainingRun", {"spec.nodes": 1025}, "spec.nodes"),
    Bad(
        "processes-per-node-0", "TrainingRun", {"spec.processesPerNode": 0}, "spec.processesPerNode"
    ),
    Bad(
        "checkpoint-every-0-steps",
        "TrainingRun",
        {"spec.checkpoints.everySteps": 0},
        "spec.checkpoints.everySteps",
    ),
    Bad(
        "keep-last-0", "TrainingRun", {"spec.checkpoints.keepLast": 0}, "spec.checkpoints.keepLast"
    ),
    Bad("eval-suite-empty", "TrainingRun", {"spec.evals": [{"suite": ""}]}, "spec.evals[0].suite"),
    Bad(
        "eval-policy-17-gpus",
        "TrainingRun",
        {"spec.evals": [{"suite": "heldout", "gpus": 17}]},
        "spec.evals[0].gpus",
    ),
    Bad(
        "backoff-over-an-hour",
        "TrainingRun",
        {"spec.recovery.backoffSeconds": 3601},
        "spec.recovery.backoffSeconds",
    ),
    Bad(
        "node-selector-number",
        "TrainingRun",
        {"spec.scheduling": {"nodeSelector": {"gpus": 8}}},
        "spec.scheduling.nodeSelector.gpus",
    ),
    Bad(
        "cpu-not-a-quantity",
        "TrainingRun",
        {"spec.resources": {"cpu": "fast"}},
        "spec.resources.cpu",
    ),
    Bad("env-as-a-map", "TrainingRun", {"spec.env": {"A": "1"}}, "spec.env"),
    Bad(
        "temperature-negative",
        "RolloutJob",
        {"spec.sampling.temperature": -0.5},
        "spec.sampling.temperature",
    ),
    Bad(
        "sql-in-the-name",
        "TrainingRun",
        {"metadata.name": "x'; drop table runs;--"},
        "metadata.name",
    ),
    Bad(
        "path-traversal-in-producer",
        "TrainingRun",
        {"spec.inputs": [{"producedBy": "../../etc"}]},
        "spec.inputs[0].producedBy",
    ),
]


def pydantic_paths(err: ValidationError) -> list[str]:
    """Error locations as field paths, without the union's kind tag: spec.inputs.0."""
    return [".".join(str(p) for p in e["loc"][1:]) for e in err.errors()]


@pytest.mark.parametrize("bad", MALFORMED, ids=[b.id for b in MALFORMED])
def test_malformed_resource_is_rejected_by_both(
    bad: Bad, installed_crds: None, namespace: str
) -> None:
    obj = with_change(VALID[bad.kind](), bad.change)

    with pytest.raises(ValidationError) as err:
        MANIFEST.validate_python(obj)
    pydantic_field = re.sub(r"\[(\d+)\]", r".\1", bad.field)
    assert pydantic_field in pydantic_paths(err.value), str(err.value)

    proc = apply_result(obj, namespace)
    assert proc.returncode != 0, f"the API server accepted {bad.id}: {proc.stdout}"
    assert bad.field in proc.stderr, proc.stderr
    assert bad.message in proc.stderr, proc.stderr
    assert not h.kubectl("get", "crucible", "-o", "name", namespace=namespace).strip()


@pytest.mark.parametrize(
    ("kind", "before", "after", "field"),
    [
        ("TrainingRun", {}, {"spec.nodes": 2}, "spec.nodes"),
        ("TrainingRun", {"spec.image": "img:1"}, {"spec.image": "img:2"}, "spec.image"),
        ("TrainingRun", {"spec.image": "img:1"}, {}, "spec.image"),  # removing it
        ("RolloutJob", {"spec.image": "img:1"}, {"spec.image": "img:2"}, "spec.image"),
        ("EvalJob", {"spec.image": "img:1"}, {"spec.image": "img:2"}, "spec.image"),
    ],
    ids=["nodes", "image", "image-removed", "rollout-image", "eval-image"],
)
def test_immutable_fields_cannot_change_after_creation(
    kind: str,
    before: dict[str, Any],
    after: dict[str, Any],
    field: str,
    installed_crds: None,
    namespace: str,
) -> None:
    base = VALID[kind]()
    proc = apply_result(with_change(base, before), namespace)
    assert proc.returncode == 0, proc.stderr

    proc = apply_result(with_change(base, after), namespace)
    assert proc.returncode != 0, f"the API server accepted a change of {field}"
    assert f"{field}: Invalid value" in proc.stderr, proc.stderr
    assert "immutable" in proc.stderr, proc.stderr


def test_mutable_fields_can_change(installed_crds: None, namespace: str) -> None:
    """Budgets can be raised on a live run, and an image can be set where none was."""
    base = example("TrainingRun")
    h.kubectl("apply", "--server-side", "-f", "-", input=json.dumps(base), namespace=namespace)
    changed = with_change(base, {"spec.recovery.maxFailures": 5, "spec.image": "img:1"})
    proc = apply_result(changed, namespace)
    assert proc.returncode == 0, proc.stderr
    run = h.kubectl_json("get", "tr", "arith-sft", namespace=namespace)
    assert (run["spec"]["recovery"]["maxFailures"], run["spec"]["image"]) == (5, "img:1")


def test_a_sweep_is_accepted_as_the_api_takes_it_and_cannot_change_after(
    installed_crds: None, namespace: str
) -> None:
    """examples/sweep.yaml is accepted (its free-form parameter ranges kept as written); a
    changed spec is refused, since the control plane registered the first one; and a name
    that leaves no room for the trials' `-NNN` is refused by name."""
    sweep = yaml.safe_load((h.REPO_ROOT / "examples" / "sweep.yaml").read_text())
    SweepManifest.model_validate(sweep)  # the REST API accepts it too
    proc = apply_result(sweep, namespace)
    assert proc.returncode == 0, proc.stderr
    stored = h.kubectl_json("get", "sweep", sweep["metadata"]["name"], namespace=namespace)
    assert stored["spec"]["parameters"] == sweep["spec"]["parameters"]
    assert stored["spec"]["run"]["nodes"] == 1  # the TrainingRun's defaults apply to `run`

    proc = apply_result(with_change(sweep, {"spec.budget.trials": 2}), namespace)
    assert proc.returncode != 0 and "spec is immutable" in proc.stderr, proc.stderr

    proc = apply_result(with_change(sweep, {"metadata.name": "s" * 37}), namespace)
    assert proc.returncode != 0, proc.stdout
    assert "metadata.name must be at most 36 characters" in proc.stderr, proc.stderr
