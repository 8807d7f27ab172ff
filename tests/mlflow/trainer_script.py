"""A Hugging Face Trainer with its MLflow callback, unchanged, logging to Crucible: the
tracking URI, the token and the experiment come from MLFLOW_* variables only. A tiny GPT-2
built from a config (no downloads) trains a few steps on random tokens.

Prints one JSON line with the MLflow run the callback logged to."""

import json
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

import mlflow


class RandomTokens(torch.utils.data.Dataset[dict[str, torch.Tensor]]):
    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        ids = torch.randint(0, 64, (16,), generator=torch.Generator().manual_seed(index))
        return {"input_ids": ids, "labels": ids}


config = GPT2Config(vocab_size=64, n_positions=16, n_embd=16, n_layer=1, n_head=2)
with tempfile.TemporaryDirectory() as output:
    arguments = TrainingArguments(
        output_dir=output,
        max_steps=6,
        per_device_train_batch_size=4,
        logging_steps=2,
        report_to=["mlflow"],
        save_strategy="no",
        use_cpu=True,
        run_name="hf-trainer",
    )
    trainer = Trainer(model=GPT2LMHeadModel(config), args=arguments, train_dataset=RandomTokens())
    trainer.train()
    run = mlflow.last_active_run()
print(json.dumps({"run_id": run.info.run_id if run else None}))
