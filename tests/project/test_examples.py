"""Every resource under examples/ is one the REST API (and so the CRDs, generated from the
same models) accepts (a ServedModel: its spec model, which its CRD is generated from; a
Sweep: the file `crucible sweeps run` takes, every trial's config checked), and
a Kubernetes example that runs a command of its own names its image (the operator's
default image holds the reference workloads). Files named `*-values.yaml` are Helm values
for the chart, checked against its values schema."""

import json
from pathlib import Path

import jsonschema_rs
import pytest
import yaml
from pydantic import TypeAdapter

from crucible.cli.sweeps import load_sweep
from crucible.domain.specs import Manifest, ServedModelManifest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
VALUES = sorted(EXAMPLES.rglob("*-values.yaml"))
FILES = sorted(set(EXAMPLES.rglob("*.yaml")) - set(VALUES))
MANIFEST: TypeAdapter[object] = TypeAdapter(Manifest)


@pytest.mark.parametrize("path", FILES, ids=[str(p.relative_to(EXAMPLES)) for p in FILES])
def test_example_is_valid(path: Path) -> None:
    documents = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert documents, f"{path} holds no resource"
    for document in documents:
        if document["kind"] == "ServedModel":
            ServedModelManifest.model_validate(document)
            continue
        if document["kind"] == "Sweep":  # `crucible sweeps run`'s file, checked whole
            load_sweep(path)
            continue
        MANIFEST.validate_python(document)
        spec = document["spec"]
        if path.parent.name == "kubernetes" and spec.get("command"):
            assert spec.get("image"), f"{document['metadata']['name']} has no image"


def test_there_are_kubernetes_examples() -> None:
    assert {p.name for p in (EXAMPLES / "kubernetes").glob("*.yaml")} >= {
        "multi-node-sft.yaml",
        "loop.yaml",
        "served-model.yaml",
    }


@pytest.mark.parametrize("path", VALUES, ids=[str(p.relative_to(EXAMPLES)) for p in VALUES])
def test_values_example_fits_the_charts_schema(path: Path) -> None:
    schema = json.loads((ROOT / "helm" / "crucible" / "values.schema.json").read_text())
    jsonschema_rs.validate(schema, yaml.safe_load(path.read_text()))
