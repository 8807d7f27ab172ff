"""The training loop: SFT (masked next-token loss) and RL (GRPO-style policy gradient).

`Trainer.__init__` does all setup; `train()` -> `train_step()` -> `forward_backward_step()`
reads top to bottom. Everything that decides the next batch is in `checkpoint_state()` (one
`TrainerState`), so a run resumed from a checkpoint at step k continues exactly as if it had
never stopped. `python -m crucible.jobs.train` runs it as a job.
"""

import contextlib
import copy
import json
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn
from torch.distributed.fsdp import FSDPModule
from torch.distributed.tensor import DTensor
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LambdaLR
from torch.profiler import record_function

from crucible.config.model_source import ModelSpec, as_model_spec
from crucible.config.workload import DataConfig, ModelConfig, TrainConfig
from crucible.domain.step_control import BetweenSteps, ProfileOrder, StepControl
from crucible.models.build import build_from_spec, build_tokenizer
from crucible.models.hf import LanguageModel
from crucible.training.checkpoint import Checkpointer, Stateful
from crucible.training.data import Batch, Row, collate_rows
from crucible.training.flops import StepFlops, bf16_peak_flops
from crucible.training.parallelize import (
    apply_activation_checkpointing,
    apply_fsdp,
    compile_blocks,
)
from crucible.training.precision.apply import (
    apply_precision,
    compiles_whole_model,
    load_precision_state,
    precision_state,
    precision_stats,
    sample_matmul_error,
)
from crucible.training.profile_summary import (
    DATA_ANNOTATION,
    FORWARD_BACKWARD_ANNOTATION,
    OPTIMIZER_ANNOTATION,
)
from crucible.training.profiling import StepProfiler
from crucible.training.records import RecordSource
from crucible.training.train_data import Item, build_train_data

MetricsFn = Callable[[int, dict[str, float]], None]
"""Receives (step, metrics) after every step; the run SDK's `run.log` fits."""

TRAINER_STATE_KEY = "trainer"
"""The trainer's state in a checkpoint is `{TRAINER_STATE_KEY: TrainerState}`; DCP stores the
weights under `trainer.model.<parameter>`, which `model_only()` loads on their own."""


class Trainer:
    def __init__(
        self,
        config: TrainConfig,
        model: ModelConfig | ModelSpec,
        records: Sequence[dict[str, Any]] | tuple[RecordSource, str],
        *,
        data: DataConfig | None = None,
        checkpointer: Checkpointer | None = None,
        init_model_state: dict[str, Tensor] | None = None,
        log: MetricsFn | None = None,
        device: torch.device | None = None,
        profile_dir: Path | None = None,
    ) -> None:
        """model: the built-in GPT's shape, or a ModelSpec (a Hugging Face model too).
        records: SFT and pre-training records in memory, or (source, shape) streaming
        them (`train_data.open_files`); RL trajectories from `rollout.py`, in memory.
        data: how SFT and pre-training read and pack their records.
        init_model_state: weights to start from (RL requires the SFT checkpoint's).
        profile_dir: where profiles are written: of the steps `config.profile_from_step`
        chooses, and of those a live request asks for (`train(control=...)`)."""
        self.config = config
        self.checkpointer = checkpointer
        self.log = log
        self.device = device or default_device()
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.world_size = dist.get_world_size() if dist.is_initialized() else 1
        self.micro_batch_size = _micro_batch_size(config, self.world_size)
        self.profiler = StepProfiler(
            profile_dir,
            from_step=config.profile_from_step,
            steps=config.profile_steps,
            rank=self.rank,
        )
        seed_everything(config.seed)

        self.model_spec = as_model_spec(model)
        self.tokenizer = build_tokenizer(self.model_spec)

        if config.mode == "rl" and init_model_state is None:
            raise ValueError("RL mode starts from a policy: pass the SFT checkpoint's weights")
        self.raw_model = build_from_spec(self.model_spec, device=self.device)
        # Counted before fp8 swaps the Linear layers; the peak is the MFU's denominator.
        self.step_flops = StepFlops(self.raw_model)
        self.peak_flops = bf16_peak_flops(self.device)
        self.data = build_train_data(
            config, data or DataConfig(), self.tokenizer, records, self.raw_model.max_seq_len
        )
        if init_model_state is not None:
            self.raw_model.load_state_dict(init_model_state)
        self.reference = maybe_build_reference(config, self.raw_model)
        apply_precision(config, self.raw_model, self.device)
        apply_activation_checkpointing(self.raw_model, config.activation_checkpointing)
        self.model = parallelize(config, self.raw_model, self.device)
        self.batch_loss = compile_loss(config, self.forward_loss)
        """`forward_loss`, compiled as one graph with `compile` unless FSDP compiles blocks."""

        self.optimizer = build_optimizer(config, self.raw_model, self.device)
        self.scheduler = build_lr_scheduler(config, self.optimizer)
        self.step = 0
        """Optimizer steps done."""
        self.last_checkpoint_step: int | None = None
        """Step of the checkpoint saved or resumed from last (None: none yet). A checkpoint
        counts as saved once complete: an async save (`checkpoint_async`) only once it is
        registered, after `wait_for_checkpoint()`."""
        self.checkpoint_in_flight: int | None = None
        """Step of an async save that may still be writing (None: none)."""
        self.stopped = False
        """True when the last `train()` returned early because `should_stop` (or `control`)
        said so."""
        self.maybe_resume()

    def train(
        self,
        *,
        should_stop: Callable[[], bool] | None = None,
        control: StepControl | None = None,
    ) -> list[float]:
        """Run up to `config.steps`; returns the loss of every step run here.

        should_stop: asked before every step (on every rank: it may be a collective such as
        the SDK's `run.should_checkpoint`). When it answers True the trainer checkpoints the
        current step, unless that step is already saved or being saved, sets `stopped` and
        returns.

        control: instead of `should_stop`, the run's `StepControl` (the SDK's
        `run.step_control()`): asked before every step whether to stop, as `should_stop`, and
        for a live profile request, which the trainer records from the next step (after any
        window it would overlap) and reports started and, once written, done.

        An async save still in flight is waited for before returning (normally or stopped),
        so when `train()` returns every checkpoint it started is registered and
        `last_checkpoint_step` names the last.
        """
        if should_stop is not None and control is not None:
            raise ValueError("pass should_stop or control, not both: control stops the run too")
        losses: list[float] = []
        self.stopped = False
        self.model.train()
        if self.config.save_initial and self.step == 0 and self.last_checkpoint_step is None:
            self.save_checkpoint()
        while self.step < self.config.steps:
            between = _between_steps(should_stop, control)
            if between.stop:
                if self.step not in (self.last_checkpoint_step, self.checkpoint_in_flight):
                    self.save_checkpoint()
                self.stopped = True
                break
            if between.profile is not None and control is not None:
                self.maybe_schedule_profile(between.profile, control)
            started = time.perf_counter()
            self.step += 1
            with self.profiler.around(self.step):
                metrics = self.train_step()
            if control is not None:
                self.maybe_report_profile_written(control)
            elapsed = max(time.perf_counter() - started, 1e-9)
            metrics["tokens_per_s"] = metrics["tokens"] / elapsed
            metrics["model_flops_per_s"] = metrics.pop("model_flops") / elapsed
            if self.peak_flops is not None:
                metrics["mfu"] = metrics["model_flops_per_s"] / (self.peak_flops * self.world_size)
            losses.append(metrics["loss"])
            if self.log is not None:
                self.log(self.step, metrics)
            self.maybe_checkpoint()
        self.wait_for_checkpoint()
        return losses

    def maybe_schedule_profile(self, order: ProfileOrder, control: StepControl) -> None:
        """Record a live request's steps from the next one; every rank decides the same
        window, since each has the same step, spec window and request."""
        window = self.profiler.schedule(
            order.steps,
            next_step=self.step + 1,
            final_step=self.config.steps,
            request_id=order.request_id,
        )
        if window is not None:
            control.profile_started(order.request_id, window.first, window.last)

    def maybe_report_profile_written(self, control: StepControl) -> None:
        written = self.profiler.take_written()
        if written is not None and written.request_id is not None:
            control.profile_done(written.request_id)

    def train_step(self) -> dict[str, float]:
        # The record_function ranges name the step's parts in a profile (profile_summary
        # splits the step's time by them); outside a profiler they cost next to nothing.
        with record_function(DATA_ANNOTATION):
            items = self.data.take(self.config.batch_size)
        sampled = self._precision_stats_due()
        if sampled:
            # This step's batch also measures each low-precision GEMM against bf16's.
            sample_matmul_error(self.raw_model, True)
        # Every rank draws the same global batch and keeps its own slice, so the data
        # order does not depend on the number of ranks.
        mine = items[self.rank :: self.world_size]
        micro_batches = [
            mine[i : i + self.micro_batch_size] for i in range(0, len(mine), self.micro_batch_size)
        ]
        loss_sum = torch.zeros((), device=self.device)
        for i, chunk in enumerate(micro_batches):
            with record_function(DATA_ANNOTATION):
                batch = collate_rows(_rows(chunk), pad_id=self.tokenizer.PAD).to(self.device)
            with (
                record_function(FORWARD_BACKWARD_ANNOTATION),
                self._maybe_no_sync(last=i == len(micro_batches) - 1),
            ):
                loss_sum += self.forward_backward_step(batch, scale=1 / len(micro_batches))
        with record_function(OPTIMIZER_ANNOTATION):
            grad_norm = nn.utils.clip_grad_norm_(
                self.raw_model.parameters(), self.config.grad_clip or float("inf")
            )
            if isinstance(grad_norm, DTensor):
                grad_norm = grad_norm.full_tensor()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            lr = float(self.scheduler.get_last_lr()[0])
            self.scheduler.step()
        if dist.is_initialized():
            dist.all_reduce(loss_sum, op=dist.ReduceOp.AVG)
        row_targets = [sum(e.num_targets for e in row) for row in _rows(items)]
        # .item() is a host-device sync; once per step is the price of logging the loss.
        metrics = {
            "loss": loss_sum.item() / len(micro_batches),
            "grad_norm": float(grad_norm),
            "lr": lr,
            # Positions trained on in the global batch (every rank knows all of it): padding
            # is not counted, so tokens/s is the useful throughput.
            "tokens": float(sum(row_targets)),
            "model_flops": float(self.step_flops.of_rows(row_targets)),
        }
        if sampled:
            sample_matmul_error(self.raw_model, False)
            metrics.update(precision_stats(self.config, self.raw_model, sampled=True))
        return metrics

    def _precision_stats_due(self) -> bool:
        every = self.config.fp8_stats_every
        return self.config.precision != "bf16" and (
            self.step == 1 or (every > 0 and self.step % every == 0)
        )

    def forward_backward_step(self, batch: Batch, *, scale: float) -> Tensor:
        loss = self.batch_loss(batch)
        torch.autograd.backward(loss * scale)
        return loss.detach()

    def forward_loss(self, batch: Batch) -> Tensor:
        """The model's forward and the loss: one graph with `compile` (`batch_loss`), so the
        float32 logits over the vocabulary are never written to memory whole."""
        with self._autocast():
            if batch.positions is None:
                logits = self.model(batch.inputs)
            else:
                logits = self.model(batch.inputs, positions=batch.positions)
        logits = logits.float()
        if self.config.mode == "sft":
            return sft_loss(logits, batch)
        return self.policy_loss(logits, batch)

    def policy_loss(self, logits: Tensor, batch: Batch) -> Tensor:
        """Clipped policy gradient on group-normalised advantages, per completion token."""
        reference_logp = None
        if self.reference is not None:
            with torch.no_grad(), self._autocast():
                ref_logits = self.reference(batch.inputs).float()
            reference_logp = token_logprobs(ref_logits, batch.targets)
        return clipped_policy_loss(
            token_logprobs(logits, batch.targets),
            batch,
            clip_eps=self.config.clip_eps,
            kl_coef=self.config.kl_coef,
            reference_logp=reference_logp,
        )

    def full_model_state(self) -> dict[str, Tensor]:
        """The whole model's weights on the CPU, on rank 0 (empty on the others); a
        collective under FSDP, so every rank calls it."""
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        state = get_model_state_dict(self.raw_model, options=options)
        return {name: value for name, value in state.items() if isinstance(value, Tensor)}

    def checkpoint_state(self) -> dict[str, Stateful]:
        """What a `Checkpointer` saves and restores: everything that decides the rest of
        the run."""
        return {TRAINER_STATE_KEY: TrainerState(self)}

    def maybe_resume(self) -> None:
        if self.checkpointer is None:
            return
        loaded = self.checkpointer.load(self.checkpoint_state())
        if loaded is not None:
            self.step = loaded
            self.last_checkpoint_step = loaded

    def maybe_checkpoint(self) -> None:
        every = self.config.checkpoint_every
        if self.step == self.config.steps or (every > 0 and self.step % every == 0):
            self.save_checkpoint()

    def save_checkpoint(self) -> None:
        """Checkpoint the current step (a no-op without a checkpointer). With
        `checkpoint_async` it returns once the state is copied, the save still in flight;
        otherwise once the checkpoint is complete."""
        if self.checkpointer is None:
            return
        self.wait_for_checkpoint()  # the previous save first, so that it counts as saved
        self.checkpointer.save(self.step, self.checkpoint_state())
        self.checkpoint_in_flight = self.step
        if not self.config.checkpoint_async:
            self.wait_for_checkpoint()

    def wait_for_checkpoint(self) -> None:
        """Block until the save in flight, if any, is complete (an async one: registered);
        then it is `last_checkpoint_step`. Raises if it failed, leaving
        `last_checkpoint_step` at the checkpoint before."""
        if self.checkpointer is None or self.checkpoint_in_flight is None:
            return
        step, self.checkpoint_in_flight = self.checkpoint_in_flight, None
        self.checkpointer.wait()
        self.last_checkpoint_step = step

    def _autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.device.type == "cuda" and self.config.bf16:
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return contextlib.nullcontext()

    @contextlib.contextmanager
    def _maybe_no_sync(self, *, last: bool) -> Iterator[None]:
        # Only the last micro-batch all-reduces (DDP) or reduce-scatters (FSDP) gradients.
        if isinstance(self.model, DistributedDataParallel) and not last:
            with self.model.no_sync():
                yield
        elif isinstance(self.raw_model, FSDPModule):
            self.raw_model.set_requires_gradient_sync(last)
            yield
        else:
            yield


def _between_steps(
    should_stop: Callable[[], bool] | None, control: StepControl | None
) -> BetweenSteps:
    if control is not None:
        return control.between_steps()
    return BetweenSteps(stop=should_stop is not None and should_stop())


def sft_loss(logits: Tensor, batch: Batch) -> Tensor:
    losses = F.cross_entropy(logits.transpose(1, 2), batch.targets, reduction="none")
    return masked_mean(losses, batch.loss_mask)


def token_logprobs(logits: Tensor, targets: Tensor) -> Tensor:
    """(batch, seq) log-probability of each target under (batch, seq, vocab) `logits`."""
    return -F.cross_entropy(logits.transpose(1, 2), targets, reduction="none")


def clipped_policy_loss(
    logp: Tensor,
    batch: Batch,
    *,
    clip_eps: float,
    kl_coef: float = 0.0,
    reference_logp: Tensor | None = None,
) -> Tensor:
    """The RL loss of `Trainer.policy_loss` on the policy's `logp` of the batch's targets:
    the importance ratio to the rollout policy, exp(logp - old_logprobs), times the
    advantage, clipped PPO-style to [1 - clip_eps, 1 + clip_eps] (0: no clipping), plus
    `kl_coef` times the k3 KL to the reference policy when `reference_logp` is given;
    averaged over the completion tokens. Online RL (`crucible.online_rl.loop`) trains with
    it too."""
    ratio = torch.exp(logp - batch.old_logprobs)
    advantages = batch.advantages[:, None]
    objective = ratio * advantages
    if clip_eps > 0:
        objective = torch.minimum(objective, ratio.clamp(1 - clip_eps, 1 + clip_eps) * advantages)
    per_token = -objective
    if reference_logp is not None:
        # k3 estimator of KL(policy || reference): unbiased and always >= 0.
        log_ratio = reference_logp - logp
        per_token = per_token + kl_coef * (log_ratio.exp() - log_ratio - 1)
    return masked_mean(per_token, batch.loss_mask)


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def _rows(items: Sequence[Item]) -> list[Row]:
    return [row for item in items for row in item]


def _micro_batch_size(config: TrainConfig, world_size: int) -> int:
    parts = config.grad_accum_steps * world_size
    if config.batch_size % parts != 0:
        raise ValueError(
            f"batch_size={config.batch_size} does not split into grad_accum_steps="
            f"{config.grad_accum_steps} x world_size={world_size} equal micro-batches"
        )
    return config.batch_size // parts


def default_device() -> torch.device:
    if torch.cuda.is_available():
        local = dist.get_rank() % torch.cuda.device_count() if dist.is_initialized() else 0
        return torch.device("cuda", local)
    return torch.device("cpu")


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def rng_state() -> dict[str, Any]:
    """Every RNG the trainer draws from, as plain JSON values."""
    numpy_state = np.random.get_state(legacy=False)
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": {
            **numpy_state,
            "state": {**numpy_state["state"], "key": numpy_state["state"]["key"].tolist()},
        },
        "torch": torch.get_rng_state().tolist(),
    }
    if torch.cuda.is_available():
        state["cuda"] = [s.tolist() for s in torch.cuda.get_rng_state_all()]
    return state


def load_rng_state(state: dict[str, Any]) -> None:
    random.setstate(_as_tuples(state["python"]))
    numpy_state = state["numpy"]
    key = np.array(numpy_state["state"]["key"], dtype=np.uint32)
    np.random.set_state({**numpy_state, "state": {**numpy_state["state"], "key": key}})
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([torch.tensor(s, dtype=torch.uint8) for s in state["cuda"]])


class TrainerState:
    """A trainer's whole state as one DCP `Stateful`.

    Model and optimizer go through torch.distributed.checkpoint.state_dict (like the SDK's
    `TrainState`), which keys optimizer state by parameter name and materialises it for a
    fresh optimizer, so DCP has tensors to load into. The rest (LR schedule, data
    order, every RNG, the step) is one JSON string: one entry in the checkpoint, and
    exact, since JSON round-trips Python floats.
    """

    def __init__(self, trainer: "Trainer") -> None:
        self.trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        # Imported here: torch.distributed.checkpoint costs seconds to import, and only runs
        # that checkpoint need it.
        from torch.distributed.checkpoint.state_dict import get_state_dict

        trainer = self.trainer
        fresh = not trainer.optimizer.state
        model_state, optimizer_state = get_state_dict(trainer.raw_model, trainer.optimizer)
        if fresh:
            # get_state_dict materialises a fresh optimizer's state with a zero-lr step;
            # forget it again so that saving at step 0 changes nothing (AdamW's step count
            # feeds its bias correction).
            trainer.optimizer.state.clear()
        progress = {
            "step": trainer.step,
            "optimizer_fresh": fresh,
            "scheduler": trainer.scheduler.state_dict(),
            "data": trainer.data.state_dict(),
            "rng": rng_state(),
            "precision": precision_state(trainer.config, trainer.raw_model),
        }
        return {
            "model": model_state,
            "optimizer": optimizer_state,
            "progress": json.dumps(progress),
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        from torch.distributed.checkpoint.state_dict import set_state_dict

        trainer = self.trainer
        set_state_dict(
            trainer.raw_model,
            trainer.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
        )
        progress = json.loads(state_dict["progress"])
        if progress["optimizer_fresh"]:
            trainer.optimizer.state.clear()
        trainer.scheduler.load_state_dict(progress["scheduler"])
        trainer.data.load_state_dict(progress["data"])
        load_rng_state(progress["rng"])
        load_precision_state(trainer.raw_model, progress.get("precision", {}))
        trainer.step = int(progress["step"])


def model_only(model_state: dict[str, Tensor]) -> dict[str, Any]:
    """The part of a trainer checkpoint that holds the weights, keyed as DCP stores them:
    load it (e.g. `run.load_checkpoint(model_only(model.state_dict()), checkpoint_id=...)`)
    to fill `model_state`'s tensors in place without the optimizer and the rest."""
    return {TRAINER_STATE_KEY: {"model": model_state}}


def _as_tuples(value: Any) -> Any:
    """random.setstate wants tuples; a serialiser may hand back lists."""
    if isinstance(value, list | tuple):
        return tuple(_as_tuples(v) for v in value)
    return value


def build_optimizer(
    config: TrainConfig, model: nn.Module, device: torch.device
) -> torch.optim.Optimizer:
    """AdamW with weight decay on the matmul weights only: not on embeddings (a tied head
    is its embedding), norms or biases."""
    embeddings = {
        id(param)
        for module in model.modules()
        if isinstance(module, nn.Embedding)
        for param in module.parameters()
    }
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for param in model.parameters():
        (decay if param.dim() >= 2 and id(param) not in embeddings else no_decay).append(param)
    return torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": config.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=config.lr,
        betas=(config.beta1, config.beta2),
        fused=device.type == "cuda",
    )


def build_lr_scheduler(config: TrainConfig, optimizer: torch.optim.Optimizer) -> LambdaLR:
    warmup = config.warmup_steps
    decay_steps = max(1, config.steps - warmup)

    def multiplier(step: int) -> float:
        if step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / decay_steps)
        cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
        return config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine

    return LambdaLR(optimizer, multiplier)


def maybe_build_reference(config: TrainConfig, model: LanguageModel) -> LanguageModel | None:
    """A frozen copy of the initial policy, kept only when the KL penalty is on."""
    if config.mode != "rl" or config.kl_coef == 0:
        return None
    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    return reference.eval()


def parallelize(config: TrainConfig, model: LanguageModel, device: torch.device) -> nn.Module:
    """The module the train step calls: with several ranks, `model` sharded in place (FSDP,
    its blocks compiled with `compile`) or wrapped (DDP)."""
    if _fsdp(config):
        bf16 = device.type == "cuda" and config.bf16
        apply_fsdp(model, param_dtype=torch.bfloat16 if bf16 else None)
        if compiles_whole_model(config):
            compile_blocks(model)
        return model
    if not dist.is_initialized():
        return model
    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def compile_loss(config: TrainConfig, loss: Callable[[Batch], Tensor]) -> Callable[[Batch], Tensor]:
    """`loss` (forward and loss) compiled as one graph with `compile`; under DDP dynamo
    splits it at the gradient buckets. Under FSDP the blocks are compiled instead
    (`parallelize`), since its hooks sit between them; with an emulated precision, only its
    roundings (`compiles_whole_model`)."""
    if not compiles_whole_model(config) or _fsdp(config):
        return loss
    return torch.compile(loss)


def _fsdp(config: TrainConfig) -> bool:
    return config.fsdp and dist.is_initialized()
