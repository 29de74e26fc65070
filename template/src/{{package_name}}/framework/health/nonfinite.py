# Managed by the template; local edits are merged on update.
"""Stop on a non-finite loss or update without letting it touch the weights, and without a
device-to-host sync per step."""

import math
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.distributed.tensor import DTensor
from torch.utils.hooks import RemovableHandle

from ..paths import RunLayout
from .errors import HealthCheckFailed

CHECKPOINT_NAME = "before-nonfinite.ckpt"
CULPRITS = ("loss", "gradient norm", "largest weight, optimizer state or buffer after the update")


class NonFiniteGuard(Callback):
    """Skips every update from the first non-finite step on, on the device; then stops the run.

    A step is bad when its loss is not finite, or when it leaves a non-finite value in
    the weights, the optimizer state or the module's buffers (a finite loss can still
    have NaN gradients, or overflow BatchNorm statistics). Checking that on the host would
    wait for the device every step; instead the check stays on the device, the way
    GradScaler skips fp16 overflow steps: a flag tensor is raised, and from then on each
    optimizer step is undone with `torch.where` over the parameters and optimizer state
    (copied just before the step) and the module's buffers (copied before the batch).
    The host reads the flag every `check_every_n_steps` batches and at the end of each
    epoch; the weights are then still exactly those from before the first bad step: they
    are saved to `<checkpoints>/before-nonfinite.ckpt` and the run stops with exit
    status 1, naming the global step, batch index and value.

    Why torch's optimizer step hooks: Lightning has no callback hook between the
    optimizer step and what other callbacks see, and the precision plugin that runs the
    step belongs to the precision setting. `register_step_pre_hook` and
    `register_step_post_hook` wrap exactly the update, for any optimizer and precision,
    in automatic and manual optimization alike. Under a GradScaler (fp16) an overflow
    step is skipped by the scaler itself, so the hooks do not run and the step is not a
    failure; a non-finite loss still is. Under several processes every process sees the
    same all-reduced update, so all skip the same steps. The cost per step: one copy of
    the parameters, optimizer state and buffers in device memory, and one max-abs pass
    over them.

    Args:
        check_every_n_steps: how often (in training batches) the host reads the flag; the
            run stops at most this many batches after the first bad one.
        check_grad_norm: also check the gradient norm before the step, to report a
            non-finite gradient as such (the update check catches its effect anyway).
            Ignored under a GradScaler, whose job non-finite gradients are.
    """

    def __init__(self, check_every_n_steps: int = 50, check_grad_norm: bool = False) -> None:
        if check_every_n_steps < 1:
            raise ValueError(
                f"NonFiniteGuard(check_every_n_steps={check_every_n_steps}): use 1 or more "
                "(how many batches pass between reads of the device-side flag)."
            )
        self.check_every_n_steps = check_every_n_steps
        self.check_grad_norm = check_grad_norm
        self._handles: list[RemovableHandle] = []
        self._saved: dict[int, tuple[list[torch.Tensor], list[tuple[torch.Tensor, ...]]]] = {}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = pl_module.device
        self._bad = torch.zeros((), dtype=torch.bool, device=device)  # sticky
        # The first bad step: global step, batch index, value, index into CULPRITS.
        self._step = torch.full((), -1, dtype=torch.long, device=device)
        self._batch = torch.full((), -1, dtype=torch.long, device=device)
        self._value = torch.zeros((), dtype=torch.float32, device=device)
        self._what = torch.zeros((), dtype=torch.long, device=device)
        self._batches = 0
        self._global_step = self._batch_idx = 0
        self._buffers: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._module = pl_module
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._check_grads = self.check_grad_norm and scaler is None
        for optimizer in trainer.optimizers:
            self._handles.append(optimizer.register_step_pre_hook(self._before_step))
            self._handles.append(optimizer.register_step_post_hook(self._after_step))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._remove_hooks()
        self._stop_if_bad(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._remove_hooks()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._global_step, self._batch_idx = trainer.global_step, batch_idx
        # Buffers (BatchNorm statistics) change in the forward pass, not in the step.
        self._buffers = [(b, b.detach().clone()) for b in pl_module.buffers()]

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # Under a GradScaler this is the scaled loss: finite exactly when the loss is.
        self._raise_flag(_max_abs([loss.detach()]), culprit=0)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not self._check_grads:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
        norms = [torch.linalg.vector_norm(_local(g)) for g in grads if g is not None]
        if norms:
            self._raise_flag(torch.linalg.vector_norm(torch.stack(norms)), culprit=1)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        with torch.no_grad():
            for buffer, before in self._buffers:
                buffer.copy_(torch.where(self._bad, before, buffer))
        self._batches += 1
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if last or self._batches % self.check_every_n_steps == 0:
            self._stop_if_bad(trainer)

    def _raise_flag(self, value: torch.Tensor, culprit: int) -> None:
        """Raise the flag if `value` is not finite; remember the first bad step. No host read."""
        value = value.float().reshape(())
        bad = ~torch.isfinite(value)
        first = bad & ~self._bad
        self._step = torch.where(first, self._global_step, self._step)
        self._batch = torch.where(first, self._batch_idx, self._batch)
        self._value = torch.where(first, value, self._value)
        self._what = torch.where(first, culprit, self._what)
        self._bad = self._bad | bad

    def _before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._saved[id(optimizer)] = (
            [p.detach().clone() for p in _params(optimizer)],
            [(s, s.detach().clone()) for s in _states(optimizer)],
        )

    @torch.no_grad()
    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Undo this update when the flag is up; on the device, so nothing waits for it."""
        saved_params, saved_states = self._saved.pop(id(optimizer))
        params, states = _params(optimizer), _states(optimizer)
        self._raise_flag(_max_abs([*params, *states, *self._module.buffers()]), culprit=2)
        for param, before in zip(params, saved_params, strict=True):
            param.copy_(torch.where(self._bad, before, param))
        before_states = {id(state): copy for state, copy in saved_states}
        for state in states:
            saved = before_states.get(id(state))
            if saved is None:  # created by this step: back to an untouched zero state
                state.masked_fill_(self._bad, 0)
            else:
                state.copy_(torch.where(self._bad, saved, state))

    def _stop_if_bad(self, trainer: L.Trainer) -> None:
        if not trainer.strategy.reduce_boolean_decision(bool(self._bad), all=False):
            return
        step, batch, what = (int(t) for t in (self._step, self._batch, self._what))
        value = float(self._value)
        path = _checkpoint_dir(trainer) / CHECKPOINT_NAME
        trainer.save_checkpoint(path, weights_only=False)  # resumable: optimizer and loops too
        if step < 0:
            where = "on another process"
        else:
            where = (
                f"at global step {step} (batch {batch} of epoch {trainer.current_epoch}), "
                f"{CULPRITS[what]} = {value}"
            )
        raise HealthCheckFailed(
            f"training diverged: a non-finite value appeared {where}. No update from that "
            f"step on was applied; the weights from just before it are saved in {path} "
            "(resume with `--ckpt_path` that file). Common fixes: a lower learning rate "
            "(the example: `--model.optimizer.lr`), gradient clipping (`--trainer.gradient_clip_val 1.0`), "
            "or bf16 instead of fp16; the debug preset's anomaly detection names the first "
            "operation that produced it."
        )

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self._saved.clear()


def _max_abs(tensors: list[torch.Tensor]) -> torch.Tensor:
    """The largest magnitude over the floating tensors: NaN or inf exactly when one value is."""
    floats = [t for t in tensors if t.is_floating_point() and t.numel()]
    if hasattr(torch, "_foreach_max"):
        # One fused call over all tensors (torch >= 2.6): a third of the per-tensor norms'
        # cost on a small model, where this check runs every step.
        maxima = list(torch._foreach_max(torch._foreach_abs(floats)))
    else:
        maxima = [torch.linalg.vector_norm(t, math.inf) for t in floats]
    return torch.stack(maxima).float().amax()  # stack promotes mixed precisions


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 (DTensor) tensor, else the tensor: same storage.

    Under FSDP2 each rank guards its own shards; the flag is combined over the ranks when
    the host reads it (`reduce_boolean_decision`), as under DDP.
    """
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [_local(p) for group in optimizer.param_groups for p in group["params"]]


def _states(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """The tensors of the optimizer's per-parameter state (moments, step counters)."""
    return [
        _local(value)
        for state in optimizer.state.values()
        for value in state.values()
        if isinstance(value, torch.Tensor)
    ]


def _checkpoint_dir(trainer: L.Trainer) -> Path:
    callback = trainer.checkpoint_callback
    dirpath = getattr(callback, "dirpath", None)
    return Path(dirpath) if dirpath else RunLayout(trainer.default_root_dir).checkpoints
