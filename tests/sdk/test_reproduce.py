"""The submission `crucible runs reproduce` builds: every reference by name or `@latest`
pinned to what the run read, the image digest its pod ran, and refusals that say why."""

import re
from datetime import UTC, datetime
from typing import Any

import pytest

from crucible.reproduction import CannotReproduce, reproduction, reproduction_name
from crucible.schemas.provenance import CodePackage, CodeSource, GitState
from crucible.schemas.runs import AttemptPublic, RunPublic

NOW = datetime(2026, 12, 1, tzinfo=UTC)
DIGEST = "crucible.local/workload@sha256:" + "ab" * 32
CODE = CodeSource(
    directory="/src",
    packages={"crucible": "0.1.0"},
    git=GitState(commit="c" * 40, dirty=False, top="/src"),
)


def run_of(kind: str, spec: dict[str, Any], **fields: Any) -> RunPublic:
    manifest_kind = {"train": "TrainingRun", "rollout": "RolloutJob", "eval": "EvalJob"}[kind]
    values: dict[str, Any] = {
        "id": 7,
        "project_id": 1,
        "experiment_id": 1,
        "name": "orig",
        "kind": kind,
        "backend": "local",
        "phase": "Succeeded",
        "reason": "",
        "message": "",
        "manifest": {
            "apiVersion": "crucible.dev/v1alpha1",
            "kind": manifest_kind,
            "metadata": {"name": "orig"},
            "spec": {"experiment": "e", **spec},
        },
        "spec_digest": "sha256:x",
        "code_ref": "",
        "code": CODE,
        "tags": {"team": "a", "crucible.dev/evaluates-run": "3"},
        "gpus": 0,
        "k8s_namespace": None,
        "k8s_name": None,
        "k8s_uid": None,
        "attempt_count": 1,
        "resolved_inputs": {"datasets": [], "checkpoint": None},
        "next_attempt_reason": None,
        "resume_checkpoint_id": None,
        "next_attempt_at": None,
        "latest_step": 10,
        "created_at": NOW,
        "started_at": NOW,
        "finished_at": NOW,
        "updated_at": NOW,
    }
    return RunPublic.model_validate(values | fields)


def attempt(image_id: str | None) -> AttemptPublic:
    return AttemptPublic(
        id=1,
        run_id=7,
        number=1,
        start_reason="initial",
        resumed_from_checkpoint_id=None,
        end_reason="Completed",
        exit_code=0,
        message="",
        created_at=NOW,
        started_at=NOW,
        ended_at=NOW,
        heartbeat_at=None,
        image="crucible.local/workload:dev",
        image_id=image_id,
        packages=None,
    )


def test_training_inputs_and_init_checkpoint_are_pinned() -> None:
    run = run_of(
        "train",
        {
            "inputs": [{"producedBy": "teach", "mountAs": "train"}, {"dataset": "extra@latest"}],
            "initFrom": {"run": "sft", "checkpoint": "best:accuracy"},
        },
        resolved_inputs={"datasets": ["sums@3", "extra@9"], "checkpoint": 41},
    )
    request = reproduction(run, [attempt(None)], project="p", name="orig-r1", current_code=CODE)
    spec = request.manifest.spec
    assert [(i.dataset, i.produced_by, i.mount_as) for i in spec.inputs] == [  # type: ignore[union-attr]
        ("sums@3", None, "train"),
        ("extra@9", None, None),
    ]
    assert spec.init_from is not None and spec.init_from.id == 41  # type: ignore[union-attr]
    assert request.manifest.metadata.name == "orig-r1"
    assert request.tags == {"team": "a", "crucible.dev/reproduces": "7"}


def test_artifacts_named_in_the_config_are_pinned_by_id() -> None:
    config = {"model": {"tokenizer": "artifact:chat-bpe"}, "suite": {"ids": ["artifact:3"]}}
    run = run_of(
        "train",
        {"config": config},
        resolved_inputs={"datasets": [], "checkpoint": None, "artifacts": {"chat-bpe": 12, "3": 3}},
    )
    request = reproduction(run, [attempt(None)], project="p", name="orig-r1", current_code=CODE)
    assert request.manifest.spec.config == {
        "model": {"tokenizer": "artifact:12"},
        "suite": {"ids": ["artifact:3"]},
    }


def test_a_code_package_is_pinned_by_id_and_stands_for_the_commands_directory() -> None:
    packaged = CODE.model_copy(
        update={"package": CodePackage(artifact_id=12, digest="sha256:" + "e" * 64)}
    )
    run = run_of(
        "train",
        {"command": ["python", "-m", "team_loop.train"], "codePackage": "artifact:team-code"},
        code=packaged,
        resolved_inputs={"datasets": [], "checkpoint": None, "artifacts": {"team-code": 12}},
    )
    # The package's directory is not here (no git state): what is installed still counts.
    here = CodeSource(directory="/elsewhere", packages={"crucible": "0.1.0"})
    request = reproduction(run, [], project="p", name="x", current_code=here)
    assert request.manifest.spec.code_package == "artifact:12"
    assert request.code == packaged
    newer = here.model_copy(update={"packages": {"crucible": "0.2.0"}})
    with pytest.raises(
        CannotReproduce, match=re.escape("crucible 0.1.0 was recorded, 0.2.0 is installed")
    ):
        reproduction(run, [], project="p", name="x", current_code=newer)


def test_rollout_policy_and_prompts_and_eval_checkpoint_are_pinned() -> None:
    rollout = run_of(
        "rollout",
        {
            "policy": {"checkpoint": {"run": "sft"}},
            "prompts": {"dataset": "q@latest"},
            "output": "samples",
        },
        resolved_inputs={"datasets": ["q@2"], "checkpoint": 5},
    )
    spec = reproduction(rollout, [], project="p", name="x", current_code=CODE).manifest.spec
    assert spec.policy.checkpoint.id == 5  # type: ignore[union-attr]
    assert spec.prompts.dataset == "q@2"  # type: ignore[union-attr]
    evaluation = run_of(
        "eval",
        {"checkpoint": {"run": "sft"}, "suite": "arithmetic"},
        resolved_inputs={"datasets": [], "checkpoint": 12},
    )
    spec = reproduction(evaluation, [], project="p", name="x", current_code=CODE).manifest.spec
    assert spec.checkpoint.id == 12  # type: ignore[union-attr]


def test_kubernetes_runs_pin_the_digest_their_pod_ran() -> None:
    run = run_of("train", {"image": "crucible.local/workload:dev"}, backend="kubernetes")
    request = reproduction(run, [attempt(DIGEST)], project="p", name="x", current_code=None)
    assert request.manifest.spec.image == DIGEST
    with pytest.raises(CannotReproduce, match="no pod of run 7 was seen running"):
        reproduction(run, [attempt(None)], project="p", name="x", current_code=None)
    with pytest.raises(CannotReproduce, match="names no repository digest"):
        reproduction(
            run, [attempt("sha256:" + "ab" * 32)], project="p", name="x", current_code=None
        )


def test_refusals_name_what_differs() -> None:
    run = run_of("train", {"command": ["python", "train.py"]})
    moved = CODE.model_copy(update={"git": GitState(commit="d" * 40, dirty=False, top="/src")})
    with pytest.raises(
        CannotReproduce, match=f"/src is at commit dddddddddddd, the run's code was {'c' * 40}"
    ):
        reproduction(run, [], project="p", name="x", current_code=moved)
    upgraded = CODE.model_copy(update={"packages": {"crucible": "0.2.0"}})
    with pytest.raises(
        CannotReproduce, match=re.escape("crucible 0.1.0 was recorded, 0.2.0 is installed")
    ):
        reproduction(run, [], project="p", name="x", current_code=upgraded)
    with pytest.raises(CannotReproduce, match="never resolved its inputs"):
        reproduction(
            run_of("train", {}, resolved_inputs=None), [], project="p", name="x", current_code=CODE
        )
    with pytest.raises(CannotReproduce, match="without a record of its code"):
        reproduction(run_of("train", {}, code=None), [], project="p", name="x", current_code=CODE)


def test_reproduction_names_stay_within_the_limit() -> None:
    assert reproduction_name("learn", 1) == "learn-r1"
    long = "a" * 30 + "-" + "b" * 9
    assert len(reproduction_name(long, 12)) == 40
    assert not reproduction_name("a" * 36 + "-bbb", 1).count("--")
