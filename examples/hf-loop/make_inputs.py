"""What a user of examples/hf-loop/loop.yaml already has, made here so the example runs
anywhere without a download: a Hugging Face model directory and a Parquet dataset.

    python examples/hf-loop/make_inputs.py hf-inputs

writes

- `hf-inputs/model/`: a tiny Llama-architecture causal LM with random weights, as
  `save_pretrained` writes it (config.json, model.safetensors), and its tokenizer
  (tokenizer.json and its config): a byte-level BPE trained on the task's text with the
  project's own tokenizer code, as a model directory carries the tokenizer it was made with;
- `hf-inputs/arith.parquet`: prompt/completion records of one-digit additions, each with
  its `answer`, from the arithmetic task's train split only, so the task's held-out
  problems stay unseen.
"""

import argparse
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.utils import logging

from crucible.config.workload import TaskConfig
from crucible.models.bpe import train_bpe
from crucible.tasks.arithmetic import ArithmeticTask

TASK = TaskConfig(digits=1, operators=("+",))
"""loop.yaml's `config.task`: the held-out evals draw from the same task."""

VOCAB_SIZE = 320
"""The model's embedding rows; the BPE trained on this small text stays below it."""

MODEL = LlamaConfig(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    vocab_size=VOCAB_SIZE,
    max_position_embeddings=64,
    # The ids bpe.py gives its special tokens, so transformers' generate stops at EOS.
    pad_token_id=0,
    bos_token_id=1,
    eos_token_id=2,
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Write a tiny Hugging Face model directory and a Parquet dataset."
    )
    parser.add_argument("directory", type=Path, help="where to write model/ and arith.parquet")
    directory = parser.parse_args().directory
    records = write_dataset(directory / "arith.parquet")
    write_model(directory / "model", records)
    print(f"wrote {directory / 'model'} and {directory / 'arith.parquet'} ({len(records)} records)")


def write_dataset(path: Path) -> list[dict[str, str]]:
    """Every train-split problem of the task as a prompt/completion record with its answer."""
    task = ArithmeticTask(TASK)
    problems = task.sample("train", task.num_possible, seed=0, unique=True)
    records = [{"prompt": p.prompt, "completion": p.answer, "answer": p.answer} for p in problems]
    path.parent.mkdir(parents=True, exist_ok=True)
    # Several row groups, as a dataset of any size has: the trainer streams them.
    pq.write_table(pa.Table.from_pylist(records), path, row_group_size=32)
    return records


def write_model(directory: Path, records: list[dict[str, str]]) -> None:
    """The tokenizer, then a randomly initialised model that embeds all of its ids."""
    texts = [record["prompt"] + record["completion"] for record in records]
    train_bpe(texts, directory, vocab_size=VOCAB_SIZE, min_frequency=1)
    torch.manual_seed(0)
    logging.disable_progress_bar()  # a one-shard model needs no bar
    LlamaForCausalLM(MODEL).save_pretrained(directory, safe_serialization=True)


if __name__ == "__main__":
    main()
