"""Names that several processes share are spelled once (crucible/domain/resources.py, the
event types in domain/reasons.py, the outbox topics in core/events.py): a second spelling in
the code would drift from the first. Docstrings and comments may mention them."""

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from crucible.domain import resources
from crucible.domain.specs import TrainingRunManifest

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "services" / "crucible", ROOT / "operators" / "crucible_operator"]
HOMES = {
    ROOT / "services/crucible/domain/resources.py",
    ROOT / "services/crucible/domain/reasons.py",
    ROOT / "services/crucible/core/events.py",
}


def modules() -> Iterator[tuple[Path, ast.Module]]:
    for folder in SOURCES:
        for path in sorted(folder.rglob("*.py")):
            if path not in HOMES:
                yield path, ast.parse(path.read_text(), str(path))


def docstrings(tree: ast.Module) -> set[int]:
    """ids of the string constants that are docstrings (a statement of their own)."""
    return {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }


def literals(tree: ast.Module) -> Iterator[ast.Constant]:
    skip = docstrings(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and id(node) not in skip:
            yield node


def where(path: Path, node: ast.AST) -> str:
    return f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', '?')}"


def test_the_resource_group_and_its_names_are_spelled_only_in_domain_resources() -> None:
    found = []
    for path, tree in modules():
        for node in literals(tree):
            if isinstance(node.value, str) and (
                "crucible.dev" in node.value or node.value == resources.VERSION
            ):
                found.append(f"{where(path, node)}: {node.value!r}")
    # The one exception: a Literal type takes no name, so the spec's apiVersion repeats it.
    allowed = [f"services/crucible/domain/specs.py:{_api_version_literal_line()}"]
    assert [f for f in found if f.rsplit(":", 1)[0] not in allowed] == []


def _api_version_literal_line() -> int:
    path = ROOT / "services/crucible/domain/specs.py"
    for node in literals(ast.parse(path.read_text())):
        if node.value == resources.API_VERSION:
            return node.lineno
    raise AssertionError("specs.py no longer spells the apiVersion Literal")


def test_the_spec_literal_is_the_shared_api_version() -> None:
    field = TrainingRunManifest.model_fields["api_version"]
    assert field.default == resources.API_VERSION
    assert field.annotation.__args__ == (resources.API_VERSION,)  # type: ignore[union-attr]


def test_the_drained_exit_code_is_spelled_only_in_domain_resources() -> None:
    found = [
        where(path, node)
        for path, tree in modules()
        for node in literals(tree)
        if node.value == resources.PREEMPTED_EXIT_CODE and type(node.value) is int
    ]
    assert found == []


@pytest.mark.parametrize(
    ("call", "keyword"), [("record_event", "type"), ("enqueue", "topic")], ids=["events", "topics"]
)
def test_event_types_and_outbox_topics_are_named_constants(call: str, keyword: str) -> None:
    found = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.attr if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else name
            for kw in node.keywords if name == call else []:
                if kw.arg == keyword and isinstance(kw.value, ast.Constant | ast.JoinedStr):
                    found.append(where(path, node))
    assert found == []


def test_outbox_topics_are_compared_by_name() -> None:
    found = []
    for path, tree in modules():
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Compare)
                and isinstance(node.left, ast.Attribute)
                and node.left.attr == "topic"
                and any(isinstance(c, ast.Constant) for c in node.comparators)
            ):
                found.append(where(path, node))
    assert found == []
