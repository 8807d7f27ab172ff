"""`python -m crucible.jobs.datagen`: a teacher answers problems; the answers are
published as an SFT dataset (JSONL of {"prompt", "completion"}).

The RolloutJob's `policy` picks the teacher: `{teacher: "arithmetic-solver"}` (built in,
always right) or an import path to a team's own (`plugins.py`, with `policy.options` as
keyword arguments), or a checkpoint (CRUCIBLE_INPUTS.checkpoint), whose model answers
greedily (`rollout.ModelTeacher`), so a stronger model can teach a weaker one. The prompts are
`config.datagen.num_prompts` train-split problems of the task, or, when the job has a
prompts dataset, up to that many of its prompts.
"""

import logging
from typing import TYPE_CHECKING

from crucible.config.parse import ConfigError
from crucible.config.workload import TaskConfig
from crucible.jobs.checkpoints import load_model
from crucible.jobs.datasets import (
    output_path,
    read_records,
    require_fields,
    write_atomically,
)
from crucible.jobs.env import JobEnv, read_env
from crucible.jobs.process import run_job, setup_torch
from crucible.jobs.sampling import fit_new_tokens, rollout_config
from crucible.plugins import TEACHER, checked_completions, resolve
from crucible.tasks.arithmetic import ArithmeticTask

if TYPE_CHECKING:
    from crucible.models.hf import LanguageModel

log = logging.getLogger("crucible.jobs.datagen")

SFT_SCHEMA = {
    "format": "jsonl",
    "fields": {"prompt": "string", "completion": "string"},
}


def main() -> None:
    run_job("datagen", datagen)


def output_name(env: JobEnv) -> str:
    name = env.spec.get("output")
    if not isinstance(name, str) or not name:
        raise ConfigError("spec.output must name the dataset to publish (CRUCIBLE_SPEC has none)")
    return name


def datagen() -> None:
    env = read_env()
    name = output_name(env)
    policy = env.spec_object("policy")
    teacher_name = policy.get("teacher")
    teacher = None
    if teacher_name is not None:
        teacher = resolve(
            TEACHER,
            str(teacher_name),
            policy.get("options") or {},
            where="spec.policy.teacher",
            options_where="spec.policy.options",
        )
    elif env.inputs.checkpoint is None:
        raise ConfigError(
            "spec.policy names no teacher and CRUCIBLE_INPUTS no checkpoint: nothing to "
            f"answer with; use a teacher ({', '.join(TEACHER.builtins)} or an import path) or "
            "a policy checkpoint"
        )

    import crucible
    from crucible.rollouts.rollout import ModelTeacher
    from crucible.training.records import write_jsonl

    torch_setup = setup_torch(distributed=False)
    if torch_setup.rank != 0:
        return  # one process does the work
    run = crucible.init()
    task_config: TaskConfig = env.config.task
    model: LanguageModel | None = None
    if teacher_name is not None:
        source = f"teacher {teacher_name}"
    else:
        assert env.inputs.checkpoint is not None
        model, tokenizer, record = load_model(
            run, env.inputs.checkpoint, device=torch_setup.device, fallback=env.config.model
        )
        task_config = env.config.task_over(
            record.meta.get("task"), f"checkpoint {record.id} meta.task"
        )
        source = f"checkpoint {record.id}"

    limit = env.config.datagen.num_prompts
    if env.inputs.datasets:
        records = read_records(run, env.inputs.datasets[:1])
        require_fields(records, ("prompt",), "a prompts dataset has a prompt per record")
        prompts = [str(r["prompt"]) for r in records[:limit]]
    else:
        task = ArithmeticTask(task_config)
        problems = task.sample("train", limit, seed=env.config.datagen.seed)
        prompts = [p.prompt for p in problems]

    if teacher is not None:
        completions = checked_completions(teacher, teacher(prompts), len(prompts))
    else:
        assert model is not None
        sampling = rollout_config(env)
        completions = ModelTeacher(
            model,
            tokenizer,
            max_new_tokens=fit_new_tokens(
                sampling.max_new_tokens,
                model.max_seq_len,
                [len(tokenizer.encode(p, bos=True)) for p in prompts],
            ),
            batch_size=sampling.batch_size,
        ).complete(prompts)
    path = output_path(run, name)
    answers = [{"prompt": p, "completion": c} for p, c in zip(prompts, completions, strict=True)]
    count = write_atomically(path, lambda p: write_jsonl(p, answers))
    version = run.publish_dataset(name, path, count, schema={**SFT_SCHEMA, "source": source})
    log.info("published %s: %d records from %s (%s)", version.ref, count, source, version.digest)
    run.log({"datagen/records": float(count)}, step=0)
    run.finish()


if __name__ == "__main__":
    main()
