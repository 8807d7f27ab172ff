"""The jobs' environment contract, in process: config sections and fields, spec overrides,
inputs. (test_jobs.py runs the jobs themselves.)"""

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from crucible.config.model_source import ModelSpec
from crucible.config.parse import ConfigError, parse_config
from crucible.config.workload import ModelConfig, TaskConfig, model_preset
from crucible.domain.contract import reference_workload
from crucible.jobs import datagen, rollout, train
from crucible.jobs import eval as eval_jobs
from crucible.jobs.env import Inputs, parse_inputs, read_env
from crucible.jobs.sampling import fit_new_tokens, rollout_config
from crucible.jobs.train import train_config


def env_of(config: object = None, spec: object = None, inputs: object = None) -> dict[str, str]:
    env = {}
    for name, value in (("CONFIG", config), ("SPEC", spec), ("INPUTS", inputs)):
        if value is not None:
            env[f"CRUCIBLE_{name}"] = json.dumps(value)
    return env


def test_no_config_is_the_defaults() -> None:
    config = parse_config(None)
    assert config.model == ModelSpec(gpt=model_preset("tiny")) == ModelSpec(gpt=ModelConfig())
    assert config.task == TaskConfig()
    assert config.train.steps == 300 and config.datagen.num_prompts == 2000
    assert config.rollout_num_prompts is None


def test_sections_are_converted_to_their_dataclasses() -> None:
    config = parse_config(
        json.dumps(
            {
                "model": {"preset": "small", "n_layer": 2},
                "task": {"digits": 1, "operators": ["+", "*"]},
                "train": {"mode": "rl", "lr": 1, "steps": 10.0, "save_initial": True},
                "rollout": {"num_prompts": 16, "top_p": 0.9},
                "datagen": {"num_prompts": 50},
            }
        )
    )
    assert config.model.gpt == ModelConfig(n_layer=2, n_head=4, d_model=128, max_seq_len=64)
    assert config.task.operators == ("+", "*")
    assert config.train.lr == 1.0 and isinstance(config.train.lr, float)
    assert config.train.steps == 10 and isinstance(config.train.steps, int)
    assert config.train.mode == "rl" and config.train.save_initial
    assert config.rollout_num_prompts == 16 and config.rollout.top_p == 0.9
    assert config.datagen.num_prompts == 50
    assert config.given["train"] == {"mode": "rl", "lr": 1.0, "steps": 10, "save_initial": True}


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"train": {"stepz": 1}},
            "config.train.stepz is not a field; valid: mode, steps, batch_size, "
            "grad_accum_steps, lr,",
        ),
        (
            {"trian": {}},
            "config.trian is not a section; valid: model, task, train, data, rollout, eval",
        ),
        (
            {"model": {"layers": 2}},
            "config.model.layers is not a field; valid: preset, hf, tokenizer, n_layer",
        ),
        (
            {"rollout": {"num_promptz": 2}},
            "config.rollout.num_promptz is not a field; valid: num_prompts, temperature",
        ),
        ({"train": {"steps": "ten"}}, 'config.train.steps must be an integer, not "ten"'),
        ({"train": {"steps": True}}, "config.train.steps must be an integer, not true"),
        ({"train": {"bf16": 1}}, "config.train.bf16 must be true or false, not 1"),
        ({"train": {"mode": "ppo"}}, 'config.train.mode must be one of "sft", "rl", not "ppo"'),
        ({"task": {"operators": "+"}}, 'config.task.operators must be a list, not "+"'),
        ({"task": {"operators": ["/"]}}, "config.task: operators=('/',) must be a non-empty"),
        ({"task": []}, "config.task must be an object, not []"),
        ({"model": {"preset": "huge"}}, "config.model: unknown model preset 'huge'; choose one"),
        ({"model": {"n_head": 3}}, "config.model: d_model=64 is not divisible by n_head=3"),
        ({"datagen": {"num_prompts": 0}}, "config.datagen.num_prompts must be at least 1"),
        ({"online": {}}, "config.online.environment is required"),
        (
            {"online": {"environment": "calculator", "episodez": {}}},
            "config.online.episodez is not a field; valid: environment, options, rounds",
        ),
        (
            {"online": {"environment": "calculator", "episode": {"max_turns": "2"}}},
            'config.online.episode.max_turns must be an integer, not "2"',
        ),
        (
            {"online": {"environment": "calculator", "engine": {"block_size": 0}}},
            "config.online.engine: block_size must be positive, got 0",
        ),
        (
            {"online": {"environment": "calculator", "group_size": 1}},
            "config.online: online RL group_size must be an integer of at least 2",
        ),
        ({"online": {"environment": "calculator", "rounds": 0}}, "config.online.rounds must be"),
        (
            {"episodes": {"environment": "calculator", "max_failed_fraction": 1.5}},
            "config.episodes: max_failed_fraction must be from 0 to 1, got 1.5",
        ),
    ],
)
def test_a_bad_config_is_one_sentence_naming_the_path(config: object, message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        parse_config(json.dumps(config))
    assert str(raised.value).startswith(message), str(raised.value)


def test_bad_json_and_inputs_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="CRUCIBLE_CONFIG is not valid JSON"):
        parse_config("{")
    with pytest.raises(ConfigError, match="CRUCIBLE_CONFIG must be a JSON object, not"):
        parse_config("[1]")
    assert parse_inputs(None) == Inputs()
    assert parse_inputs('{"datasets": ["a@1", "b@2"], "checkpoint": 3}') == Inputs(
        ("a@1", "b@2"), 3
    )
    with pytest.raises(ConfigError, match=r"CRUCIBLE_INPUTS.datasets must be a list of"):
        parse_inputs('{"datasets": "a@1"}')
    with pytest.raises(ConfigError, match=r"CRUCIBLE_INPUTS.checkpoint must be a checkpoint id"):
        parse_inputs('{"checkpoint": "latest"}')


def test_the_spec_wins_over_the_config() -> None:
    env = read_env(
        env_of(
            config={"rollout": {"samples_per_prompt": 2, "temperature": 0.5, "seed": 3}},
            spec={
                "samplesPerPrompt": 8,
                "sampling": {"temperature": 1.0, "topP": 0.9, "maxNewTokens": 64},
                "checkpoints": {"everySteps": 25, "keepLast": 3},
            },
        )
    )
    rollout = rollout_config(env)
    assert (rollout.samples_per_prompt, rollout.temperature, rollout.top_p) == (8, 1.0, 0.9)
    assert rollout.max_new_tokens == 64 and rollout.seed == 3
    assert train_config(env).checkpoint_every == 25
    # A whole manifest works as the spec too.
    manifest = {"kind": "RolloutJob", "spec": {"samplesPerPrompt": 4}}
    assert rollout_config(read_env(env_of(spec=manifest))).samples_per_prompt == 4


def test_a_checkpoints_task_with_the_config_on_top() -> None:
    config = parse_config(json.dumps({"task": {"held_out_fraction": 0.5}}))
    meta_task = {"digits": 1, "operators": ["+", "-"], "held_out_fraction": 0.2}
    task = config.task_over(meta_task, "checkpoint 3 meta.task")
    assert task == TaskConfig(digits=1, operators=("+", "-"), held_out_fraction=0.5)
    with pytest.raises(ConfigError, match=r"checkpoint 3 meta.task.size is not a field"):
        config.task_over({"size": 1}, "checkpoint 3 meta.task")


def test_new_tokens_are_cut_to_the_models_context() -> None:
    model = model_preset("tiny")  # 64 positions
    assert fit_new_tokens(8, model.max_seq_len, [len("12+34=") + 1]) == 8
    assert fit_new_tokens(64, model.max_seq_len, [len("12+34=") + 1]) == 64 - 7  # BOS, 6 bytes
    with pytest.raises(ConfigError, match="leaves no room"):
        fit_new_tokens(4, model.max_seq_len, [71])


@pytest.mark.parametrize(
    ("job", "spec", "inputs", "message"),
    [
        (
            datagen.datagen,
            {"policy": {"teacher": "oracle"}, "output": "x"},
            None,
            "spec.policy.teacher 'oracle' is neither a built-in teacher (arithmetic-solver, "
            "openai-endpoint) nor an import path",
        ),
        (datagen.datagen, {"policy": {"teacher": "arithmetic-solver"}}, None, "spec.output"),
        (
            rollout.rollout_job,
            {"policy": {"checkpoint": {"id": 1}}, "output": "x", "reward": {"name": "f1"}},
            {"checkpoint": 1},
            "spec.reward.name 'f1' is neither a built-in reward (exact_match) nor an import path",
        ),
        (
            rollout.rollout_job,
            {"policy": {"checkpoint": {"id": 1}}, "output": "x", "reward": {"name": "exact_match"}},
            None,
            "spec.policy is a checkpoint but CRUCIBLE_INPUTS names none",
        ),
        (
            eval_jobs.eval_job,
            {"suite": "mmlu"},
            {"checkpoint": 1},
            "spec.suite 'mmlu' is neither a built-in eval suite (arithmetic, "
            "agent-environment) nor an import path",
        ),
        (
            train.train,
            {"checkpoints": {"everySteps": 10}},
            {"datasets": ["d@1"]},
            "config.train.mode is 'rl', which starts from a policy",
        ),
    ],
)
def test_a_bad_spec_is_refused_before_any_work(
    monkeypatch: pytest.MonkeyPatch,
    job: Callable[[], None],
    spec: object,
    inputs: object,
    message: str,
) -> None:
    config = {"train": {"mode": "rl"}} if job is train.train else None
    for name in ("CRUCIBLE_CONFIG", "CRUCIBLE_SPEC", "CRUCIBLE_INPUTS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env_of(config, spec, inputs).items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as raised:
        job()
    assert str(raised.value).startswith(message), str(raised.value)


def test_every_config_in_docs_workloads_md_is_accepted() -> None:
    docs = Path(__file__).resolve().parents[2] / "docs" / "workloads.md"
    blocks = re.findall(r"```json\n(.*?)```", docs.read_text(), flags=re.S)
    assert len(blocks) >= 2
    for block in blocks:
        parse_config(block)


def test_an_online_section_makes_the_run_online_rl() -> None:
    config = parse_config(
        json.dumps(
            {
                "online": {
                    "environment": "letter_or_digit",
                    "options": {"kinds": ["digit"]},
                    "max_staleness": 1,
                    "episode": {"max_turns": 1, "stop_token_ids": [7]},
                    "engine": {"num_blocks": 64},
                }
            }
        )
    )
    assert config.online is not None and parse_config(None).online is None
    assert config.online.environment == "letter_or_digit" and config.online.rounds == 10
    assert config.online.rl.max_staleness == 1
    assert config.online.rl.episode.stop_token_ids == (7,)
    assert config.online.rl.engine.num_blocks == 64
    online_spec = {"config": {"online": {"environment": "letter_or_digit"}}}
    assert reference_workload("train", online_spec) == "crucible.jobs.online_rl"
    assert reference_workload("train", {"config": {}}) == "crucible.jobs.train"
