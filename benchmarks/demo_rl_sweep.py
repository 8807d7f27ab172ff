"""Which SFT and RL settings make the demo loop improve held-out accuracy at each stage?

Run on the GPU machine (float32, the same math as the CPU demo):
`python3 benchmarks/demo_rl_sweep.py`; writes rows to $OUT/sweep2.json.
"""

import itertools
import json
import os
import sys
import time

sys.path.insert(0, "services")
import torch

from crucible.config.workload import (
    EvalConfig,
    RolloutConfig,
    TaskConfig,
    TrainConfig,
    model_preset,
)
from crucible.rollouts.datagen import teach
from crucible.rollouts.evaluate import evaluate
from crucible.rollouts.rollout import per_sample, rollout
from crucible.tasks.arithmetic import ArithmeticTask, SolverTeacher, exact_match_reward
from crucible.training.train import Trainer

dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
task = ArithmeticTask(TaskConfig(digits=2))
mc = model_preset("small")
held = task.sample("held_out", 500, seed=1234, unique=True)
ec = EvalConfig(max_new_tokens=5)
out = []
for seed, sft_lr, sft_steps, ndata in itertools.product((0, 1), (1e-3, 3e-3), (800, 1200), (4000,)):
    records = teach(SolverTeacher(), task.sample("train", ndata, seed=seed))
    t0 = time.time()
    sft = Trainer(
        TrainConfig(
            steps=sft_steps, batch_size=32, lr=sft_lr, warmup_steps=20, bf16=False, seed=seed
        ),
        mc,
        records,
        device=dev,
    )
    sft.train()
    acc_sft = evaluate(sft.raw_model, sft.tokenizer, held, ec).accuracy
    state = {k: v.clone() for k, v in sft.raw_model.state_dict().items()}
    print(
        f"seed {seed} sft lr {sft_lr} steps {sft_steps}: {acc_sft:.3f} ({time.time() - t0:.0f}s)",
        flush=True,
    )
    prompts = [r["prompt"] for r in records[:1024]]
    traj = rollout(
        sft.raw_model,
        sft.tokenizer,
        prompts,
        per_sample(exact_match_reward),
        RolloutConfig(
            samples_per_prompt=8, temperature=1.0, max_new_tokens=5, batch_size=64, seed=seed
        ),
    )
    recs = [t.to_record() for t in traj]
    mean_r = sum(r["reward"] for r in recs) / len(recs)
    for lr, steps, kl in itertools.product((1e-4, 2e-4), (64, 128), (0.0, 0.05)):
        rl = Trainer(
            TrainConfig(
                mode="rl",
                steps=steps,
                batch_size=16,
                samples_per_prompt=8,
                lr=lr,
                warmup_steps=3,
                kl_coef=kl,
                bf16=False,
                seed=seed,
            ),
            mc,
            recs,
            init_model_state=state,
            device=dev,
        )
        rl.train()
        acc_rl = evaluate(rl.raw_model, rl.tokenizer, held, ec).accuracy
        row = dict(
            seed=seed,
            sft_lr=sft_lr,
            sft_steps=sft_steps,
            sft=acc_sft,
            reward=mean_r,
            lr=lr,
            rl_steps=steps,
            kl=kl,
            rl=acc_rl,
            gain=round(acc_rl - acc_sft, 3),
        )
        out.append(row)
        print(json.dumps(row), flush=True)
with open(os.path.join(os.environ.get("OUT", "."), "sweep2.json"), "w") as f:
    json.dump(out, f, indent=1)
