"""`crucible checkpoints export` as a user runs it, against a real API server: a trained
checkpoint written as a Hugging Face directory that loads back as `model: {hf: {path}}` and
answers with the same tokens, registered as a model artifact derived from the checkpoint;
and the refusals (a directory in use, a checkpoint that does not exist)."""

from pathlib import Path
from typing import Any

import torch

from crucible.artifacts.digest import content_of
from crucible.config.model_source import HFModelSource, ModelSpec
from crucible.jobs.checkpoints import model_spec_of
from crucible.models.build import build_from_spec, build_tokenizer
from crucible.rollouts.rollout import greedy_completions
from crucible.sdk.checkpoint import CheckpointStore
from crucible.training.train import model_only
from tests.cli.trained import PROMPTS, Trained, trained
from tests.servers import crucible
from tests.workloads.test_jobs import Platform, platform, server

__all__ = ["platform", "server", "trained"]  # the fixtures, imported for this module


def original_model(platform: Platform, checkpoint_id: int) -> tuple[Any, Any]:
    """The checkpoint's model and tokenizer, as the jobs load them."""
    record = platform.api.get_checkpoint(checkpoint_id)
    spec = model_spec_of(record, None)
    model = build_from_spec(spec, device=torch.device("cpu"))
    state = model.state_dict()
    store = CheckpointStore(platform.api, run_id=record.run_id, attempt=None, base_uri=record.uri)
    store.load(model_only(state), None, checkpoint_id=checkpoint_id)
    model.load_state_dict(state)
    return model.eval(), build_tokenizer(spec)


def test_export_writes_a_hf_directory_that_answers_the_same_and_registers_it(
    platform: Platform, trained: Trained, tmp_path: Path
) -> None:
    directory = tmp_path / "sft-hf"
    done = crucible(
        trained.env,
        "checkpoints",
        "export",
        str(trained.checkpoint_id),
        str(directory),
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
        p.name for p in directory.iterdir()
    }
    assert not directory.with_name("sft-hf.partial").exists()

    spec = ModelSpec(hf=HFModelSource(path=str(directory)))
    exported, tokenizer = (
        build_from_spec(spec, device=torch.device("cpu")).eval(),
        build_tokenizer(spec),
    )
    original, original_tokenizer = original_model(platform, trained.checkpoint_id)
    prompts = PROMPTS[::7]
    assert [tokenizer.encode(p) for p in prompts] == [original_tokenizer.encode(p) for p in prompts]
    ours = greedy_completions(original, original_tokenizer, prompts, max_new_tokens=3, batch_size=8)
    assert greedy_completions(exported, tokenizer, prompts, max_new_tokens=3, batch_size=8) == ours

    (artifact,) = platform.api.list_artifacts("default", kind="model").items
    assert f"registered artifact {artifact.id}" in done.stdout
    assert artifact.uri == directory.resolve().as_uri()
    assert artifact.digest == content_of(directory).digest
    assert [(s.type, s.id) for s in artifact.sources] == [("checkpoint", trained.checkpoint_id)]


def test_export_refuses_a_directory_in_use_and_a_missing_checkpoint(
    trained: Trained, tmp_path: Path
) -> None:
    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    refused = crucible(trained.env, "checkpoints", "export", str(trained.checkpoint_id), str(used))
    assert refused.returncode == 1
    assert f"{used} is not empty" in refused.stderr
    assert (used / "notes.txt").read_text() == "mine"
    missing = crucible(trained.env, "checkpoints", "export", "999999", str(tmp_path / "x"))
    assert missing.returncode == 1 and "999999" in missing.stderr
    assert not (tmp_path / "x").exists()
