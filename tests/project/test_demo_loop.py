"""The demo loop's specs: valid for the API, chained by reference, and the same as the copy
in examples/ (which users submit with `crucible submit` or `kubectl apply`)."""

from pathlib import Path

import yaml

from crucible.demo.loop import FULL, QUICK, loop_manifests
from crucible.schemas.runs import RunSubmit

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "demo-loop.yaml"
ON_KUBERNETES = EXAMPLE.parent / "kubernetes" / "loop.yaml"


def test_every_document_is_a_valid_run() -> None:
    for size in (FULL, QUICK):
        for manifest in loop_manifests("demo", size):
            RunSubmit.model_validate({"project": "default", "manifest": manifest})


def test_stages_refer_to_each_other_by_name() -> None:
    teacher, sft, rollouts, rl = loop_manifests("demo", FULL)
    assert sft["spec"]["inputs"] == [{"producedBy": teacher["metadata"]["name"]}]
    assert rollouts["spec"]["policy"]["checkpoint"]["run"] == sft["metadata"]["name"]
    assert rl["spec"]["inputs"] == [{"producedBy": rollouts["metadata"]["name"]}]
    assert rl["spec"]["initFrom"]["run"] == sft["metadata"]["name"]
    assert all(m["spec"]["experiment"] == "demo" for m in (teacher, sft, rollouts, rl))


def test_the_example_file_is_the_full_loop() -> None:
    expected = yaml.safe_dump_all(loop_manifests("demo", FULL), sort_keys=False)
    assert EXAMPLE.read_text() == expected, (
        "examples/demo-loop.yaml is stale; regenerate it with "
        "`crucible demo --print > examples/demo-loop.yaml`"
    )


def test_the_kubernetes_loop_is_the_full_loop_with_a_gpu_per_stage() -> None:
    documents = list(yaml.safe_load_all(ON_KUBERNETES.read_text()))
    gpus = []
    for document in documents:
        spec = document["spec"]
        gpus += [spec.pop("gpusPerNode", None), spec.pop("gpusPerReplica", None)]
        gpus += [e.pop("gpus", None) for e in spec.get("evals", [])]
    assert documents == loop_manifests("loop", FULL), "examples/kubernetes/loop.yaml is stale"
    assert [g for g in gpus if g is not None] == [1, 1, 1, 1, 1]
