"""The eval trigger: every registered checkpoint gets exactly one EvalJob per eval suite in
its run's policy.

Exactly once comes from the name: an EvalJob is named after the checkpoint and the suite,
and submitting the same name with the same spec returns the run already there. A redelivered
message, a second worker or a re-registered checkpoint therefore adds nothing.
"""

import hashlib
import re

from sqlalchemy.orm import Session

from crucible.core.access import SYSTEM
from crucible.core.runs import submit_run
from crucible.db.tables import Checkpoint, Project, Run
from crucible.domain.artifact_refs import ARTIFACT_SCHEME
from crucible.domain.enums import Backend
from crucible.domain.resources import API_VERSION, TAG_CHECKPOINT, TAG_EVALUATES_RUN
from crucible.domain.specs import MAX_RUN_NAME, EvalPolicy, TrainingRunManifest, parse_manifest
from crucible.schemas.runs import RunSubmit


def on_checkpoint_registered(session: Session, *, checkpoint_id: int) -> list[int]:
    """Submit the checkpoint's EvalJobs; returns their run ids (existing ones included)."""
    checkpoint = session.get(Checkpoint, checkpoint_id)
    if checkpoint is None or checkpoint.deleted_at is not None:
        return []
    run = session.get_one(Run, checkpoint.run_id)
    manifest = parse_manifest(run.manifest)
    if not isinstance(manifest, TrainingRunManifest) or not manifest.spec.evals:
        return []
    project = session.get_one(Project, run.project_id)
    submitted = []
    for policy in manifest.spec.evals:
        eval_run = submit_run(
            session=session,
            principal=SYSTEM,
            run_in=RunSubmit.model_validate(
                {
                    "project": project.name,
                    "manifest": eval_manifest(run, manifest, checkpoint, policy),
                    "backend": Backend(run.backend),
                    "code_ref": run.code_ref,
                    "code": run.code,  # the training run's code scores its checkpoints
                }
            ),
            # Reserved: no user may set them, so they name this run and checkpoint only.
            platform_tags={TAG_EVALUATES_RUN: str(run.id), TAG_CHECKPOINT: str(checkpoint.id)},
        )
        submitted.append(eval_run.id)
    return submitted


def eval_manifest(
    run: Run, manifest: TrainingRunManifest, checkpoint: Checkpoint, policy: EvalPolicy
) -> dict[str, object]:
    spec = manifest.spec
    eval_spec: dict[str, object] = {
        "experiment": spec.experiment,
        "checkpoint": {"id": checkpoint.id},
        "suite": policy.suite,
        "gpus": policy.gpus,
        "config": policy.config,
        "env": [e.model_dump(by_alias=True) for e in spec.env],
        "scheduling": spec.scheduling.model_dump(by_alias=True, exclude_none=True),
    }
    image = policy.image or spec.image
    if image is not None:
        eval_spec["image"] = image
    if spec.working_dir is not None:  # where the run's code is: a suite's import path too
        eval_spec["workingDir"] = spec.working_dir
    if spec.code_package is not None:
        # The package the run itself read, by id, so a newer one of the same name registered
        # since does not score this run's checkpoints.
        ref = spec.code_package.removeprefix(ARTIFACT_SCHEME)
        pinned = (run.resolved_inputs or {}).get("artifacts", {}).get(ref)
        eval_spec["codePackage"] = f"{ARTIFACT_SCHEME}{pinned}" if pinned else spec.code_package
    if policy.command:  # a team's own harness instead of the reference eval workload
        eval_spec["command"] = policy.command
        eval_spec["args"] = policy.args
    metadata: dict[str, object] = {"name": eval_run_name(run.name, checkpoint.id, policy.suite)}
    if manifest.metadata.namespace is not None:
        metadata["namespace"] = manifest.metadata.namespace
    return {"apiVersion": API_VERSION, "kind": "EvalJob", "metadata": metadata, "spec": eval_spec}


def eval_run_name(run_name: str, checkpoint_id: int, suite: str) -> str:
    """`<run>-c<checkpoint id>-<suite>`, a DNS label of at most MAX_RUN_NAME characters,
    unique per (checkpoint, suite) however long the names are."""
    slug = re.sub(r"[^a-z0-9]+", "-", suite.lower()).strip("-") or "suite"
    head = f"{run_name[:15].rstrip('-')}-c{checkpoint_id}-"
    name = head + slug
    if len(name) > MAX_RUN_NAME or slug != suite:
        digest = hashlib.sha256(suite.encode()).hexdigest()[:4]
        room = MAX_RUN_NAME - len(head) - len(digest) - 1
        name = f"{head}{slug[:room].strip('-')}-{digest}".replace("--", "-")
    return name
