# Managed by the template; local edits are merged on update.
"""Stop on a non-finite loss or update without letting it touch the weights, and without a
device-to-host sync per step."""

from __future__ import annotations  # _GuardedState, defined below, in a signature

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback
from torch.distributed.tensor import DTensor
from torch.utils.hooks import RemovableHandle

from ..paths import RunLayout
from ..private_apis import copy_each
from .errors import HealthCheckFailed

CHECKPOINT_NAME = "before-nonfinite.ckpt"
CULPRITS = ("loss", "gradient norm", "largest weight, optimizer state or buffer after the update")
# Devices where reading the flag on the host waits for nothing (no queue of work to drain):
# there the flag is read after every check, and the weights are written only to undo a step.
FREE_FLAG_READS = frozenset({"cpu"})


class NonFiniteGuard(Callback):
    """Skips every update from the first non-finite step on, on the device; then stops the run.

    A step is bad when its loss is not finite, or when it leaves a non-finite value in
    the weights, the optimizer state or the module's buffers (a finite loss can still
    have NaN gradients, or overflow BatchNorm statistics). Checking that on the host would
    wait for the device every step; instead the check stays on the device, the way
    GradScaler skips fp16 overflow steps: a flag tensor is raised, and from then on each
    step is undone with `torch.where` against a copy of the state after the last good
    step. (On a CPU, where nothing is queued, reading a value costs nothing: there the
    check reads the loss and the state's extremes after each step, and the state is
    written back only to undo one.) The host reads the flag to stop the run every
    `check_every_n_steps` batches and at the end of each epoch; the weights are then
    still exactly those from before the first bad step: they are saved to
    `<checkpoints>/before-nonfinite.ckpt` and the run stops with exit status 1, naming
    the global step, batch index and value.

    The check runs right after each optimizer step, through torch's
    `register_step_post_hook`: Lightning has no callback hook between the step and what
    other callbacks see, and the hook works for any optimizer and precision, in automatic
    and manual optimization alike. A batch that makes no step (gradient accumulation, or a
    GradScaler skipping an fp16 overflow, which is no failure) is checked at its end: its
    loss and the buffers its forward pass changed.

    Cost per check: about fifteen tensor operations on a GPU, five on a CPU, whatever
    the number of tensors, as the tensors are handled as a few flat groups (one per
    device and dtype) rather than one by one; one copy of the parameters, optimizer
    state and buffers is kept. Tensors on another device than the module's (Adam's step
    counters stay on the host when the module is on a GPU) cannot be matched against the
    device-side flag without a sync: they keep a copy per check until the host reads the
    flag, and are put back from it when the run stops. Under several processes every
    process sees the same all-reduced update, so all skip the same steps; under FSDP2
    each rank guards its own shards.

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

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._module = pl_module
        self._optimizers = list(trainer.optimizers)
        self._bad = torch.zeros((), dtype=torch.bool, device=pl_module.device)  # sticky
        self._batches = 0
        self._global_step = self._batch_idx = 0
        self._loss: torch.Tensor | None = None
        self._grad_norm: torch.Tensor | None = None
        self._stepped = False
        self._state = self._guarded_state()
        # Since the host last read the flag: each check, and the tensors the flag cannot
        # reach before each (history[i] is the state before checks[i]).
        self._checks: list[_Check] = []
        self._history = [self._state.elsewhere()]
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._check_grads = self.check_grad_norm and scaler is None
        for optimizer in self._optimizers:
            self._handles.append(optimizer.register_step_post_hook(self._after_step))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The state is good here (the last batch read the flag); gathering it again also
        # follows a buffer that a module replaced instead of updating it in place.
        self._state = self._guarded_state()

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

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # Under a GradScaler this is the scaled loss: finite exactly when the loss is.
        self._loss = loss.detach()

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if not self._check_grads:
            return
        grads = [p.grad for group in optimizer.param_groups for p in group["params"]]
        norms = [torch.linalg.vector_norm(_local(g)) for g in grads if g is not None]
        if norms:
            self._grad_norm = torch.linalg.vector_norm(torch.stack(norms))

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if not self._stepped:
            self._check()
        self._stepped = False
        self._batches += 1
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if last or self._batches % self.check_every_n_steps == 0:
            self._stop_if_bad(trainer)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True
        self._check()

    @torch.no_grad()
    def _check(self) -> None:
        """Raise the flag on a non-finite value; undo the step while it is up.

        The host reads nothing where that would wait for the device (FREE_FLAG_READS).
        """
        if self._state.layout != _layout(self._optimizers):
            # The step created optimizer state: its state before the step was none (zeros).
            self._state = self._guarded_state(good=self._state.good_pieces())
        current = self._state.gather()
        # Every call here is a tensor operation, slow on a CPU right after the backward pass
        # (cold caches: tens of microseconds each): as few as the check needs.
        if self._bad.device.type in FREE_FLAG_READS:
            check = self._check_on_host(current)
        else:
            check = self._check_on_device(current)
        self._state.keep_or_undo(current, self._bad)
        self._checks.append(check)
        self._history.append(self._state.elsewhere(current))
        self._loss = self._grad_norm = None

    def _check_on_device(self, current: list[torch.Tensor]) -> _Check:
        """Raise the flag with tensor operations only: the host reads nothing."""
        loss = None if self._loss is None else self._loss.abs()  # NaN stays NaN, -inf: inf
        worst = None
        for value in (*self._state.magnitudes(current), loss, self._grad_norm):
            if value is not None:
                worst = value if worst is None else torch.maximum(worst, value)
        if worst is not None:
            self._bad |= ~torch.isfinite(worst)
        return _Check(self._global_step, self._batch_idx, self._loss, self._grad_norm, worst)

    def _check_on_host(self, current: list[torch.Tensor]) -> _Check:
        """Raise the flag from values read on the host, where reading waits for nothing.

        Two reductions per group and a read of each scalar, instead of the device path's
        chain of tensor operations (a third of the check's cost on the example's CPU step).
        """
        loss = None if self._loss is None else float(self._loss)
        grad_norm = None if self._grad_norm is None else float(self._grad_norm)
        worst = self._state.worst_on_host(current)
        if not all(math.isfinite(v) for v in (loss, grad_norm, worst) if v is not None):
            self._bad.fill_(True)
        return _Check(self._global_step, self._batch_idx, loss, grad_norm, worst)

    def _guarded_state(self, good: dict[int, torch.Tensor] | None = None) -> _GuardedState:
        """Every parameter, optimizer state and buffer, with the good copy given or taken now."""
        found: dict[int, torch.Tensor] = {}
        for optimizer in self._optimizers:
            for group in optimizer.param_groups:
                for param in group["params"]:
                    found.setdefault(id(param), _local(param))
                    for value in optimizer.state.get(param, {}).values():
                        if isinstance(value, torch.Tensor):
                            found.setdefault(id(value), _local(value))
        for buffer in self._module.buffers():
            found.setdefault(id(buffer), buffer)
        return _GuardedState(found, self._bad.device, _layout(self._optimizers), good)

    def _stop_if_bad(self, trainer: L.Trainer) -> None:
        if not trainer.strategy.reduce_boolean_decision(bool(self._bad), all=False):
            self._checks.clear()
            del self._history[:-1]  # the state now: the next window's start
            return
        # Only now, with the run stopping, are the checks read on the host.
        found = [(i, check.culprit()) for i, check in enumerate(self._checks)]
        first = next(((i, culprit) for i, culprit in found if culprit is not None), None)
        if first is not None:  # the groups on the flag's device are back already
            self._state.put_back(self._history[first[0]])
        path = _checkpoint_dir(trainer) / CHECKPOINT_NAME
        trainer.save_checkpoint(path, weights_only=False)  # resumable: optimizer and loops too
        if first is None:
            where = "on another process"
        else:
            index, (what, value) = first
            check = self._checks[index]
            where = (
                f"at global step {check.global_step} (batch {check.batch_idx} of epoch "
                f"{trainer.current_epoch}), {CULPRITS[what]} = {value}"
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


@dataclass
class _Check:
    """One check's values, left on the device unless the run stops."""

    global_step: int
    batch_idx: int
    # Tensors from the device path, numbers from the host path.
    loss: torch.Tensor | float | None
    grad_norm: torch.Tensor | float | None
    worst: torch.Tensor | float | None  # the largest magnitude of all: not finite when one is not

    def culprit(self) -> tuple[int, float] | None:
        """(index into CULPRITS, value) of the first non-finite value, else None (host reads)."""
        for what, value in enumerate((self.loss, self.grad_norm, self.worst)):
            if value is not None and not math.isfinite(float(value)):
                return what, float(value)
        return None


class _Group:
    """Tensors of one device and dtype, gathered into one flat tensor and written back.

    One `torch.cat` and one `copy_each` per group, instead of a call per tensor: what
    keeps the guard cheap on a small model, where the per-call cost dominates.
    """

    def __init__(self, keys: list[int], tensors: list[torch.Tensor]) -> None:
        self.keys = keys
        self.tensors = tensors
        # Views share the tensors' memory; a non-contiguous tensor is copied each time.
        self.contiguous = all(t.is_contiguous() for t in tensors)
        self.views = [t.detach().view(-1) if self.contiguous else t for t in tensors]
        self.sizes = [t.numel() for t in tensors]

    def gather(self) -> torch.Tensor:
        if self.contiguous:
            return torch.cat(self.views)
        return torch.cat([t.reshape(-1) for t in self.tensors])

    def write(self, flat: torch.Tensor) -> None:
        pieces = list(flat.split(self.sizes))
        if self.contiguous:
            copy_each(self.views, pieces)
        else:
            for tensor, piece in zip(self.tensors, pieces, strict=True):
                tensor.copy_(piece.view(tensor.shape))

    def pieces(self, flat: torch.Tensor) -> dict[int, torch.Tensor]:
        return dict(zip(self.keys, flat.split(self.sizes), strict=True))


class _GuardedState:
    """The guarded tensors in flat groups, with a copy of the last good values of each.

    `here`: the groups on the flag's device, undone on the device with `torch.where`.
    `elsewhere`: the others, which the caller keeps a copy of per check instead.
    """

    def __init__(
        self,
        tensors: dict[int, torch.Tensor],
        device: torch.device,
        layout: tuple[int, ...],
        good: dict[int, torch.Tensor] | None = None,
    ) -> None:
        self.layout = layout
        by_kind: dict[tuple[torch.device, torch.dtype, bool], list[tuple[int, torch.Tensor]]] = {}
        for key, tensor in tensors.items():
            kind = (tensor.device, tensor.dtype, tensor.is_contiguous())
            by_kind.setdefault(kind, []).append((key, tensor))
        groups = [
            _Group([k for k, _ in items], [t for _, t in items]) for items in by_kind.values()
        ]
        self.here = [g for g in groups if g.tensors[0].device == device]
        self.others = [g for g in groups if g.tensors[0].device != device]
        self.good = [g.gather() if good is None else _assemble(g, good) for g in self.here]

    def gather(self) -> list[torch.Tensor]:
        return [group.gather() for group in [*self.here, *self.others]]

    def magnitudes(self, current: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per floating group on the flag's device, its largest magnitude: NaN if one is.

        abs().amax(), not vector_norm(inf): the same value, 25 times faster on a CPU.
        """
        return [
            flat.abs().amax()
            for flat in current[: len(self.here)]
            if flat.is_floating_point() and flat.numel()
        ]

    def worst_on_host(self, current: list[torch.Tensor]) -> float | None:
        """The largest magnitude of the floating groups on the flag's device, read on the
        host; a NaN or an infinity when there is one. None: no floating tensor there.

        amax and amin: two reductions that write nothing, where abs().amax() writes a
        temporary as large as the state.
        """
        extremes = [
            float(extreme)
            for flat in current[: len(self.here)]
            if flat.is_floating_point() and flat.numel()
            for extreme in (flat.amax(), flat.amin())
        ]
        if not extremes:
            return None
        return next((x for x in extremes if not math.isfinite(x)), max(map(abs, extremes)))

    def keep_or_undo(self, current: list[torch.Tensor], bad: torch.Tensor) -> None:
        """Where the flag is up, put the good copy back; else the current values become it."""
        if bad.device.type in FREE_FLAG_READS:
            # Read on the host: the `where` and the write-back, a pass over the whole state
            # each, happen only to undo (two thirds of the check's cost on a small model).
            if bad:
                for group, good in zip(self.here, self.good, strict=True):
                    group.write(good)
            else:
                self.good = current[: len(self.here)]
            return
        for index, (group, flat) in enumerate(zip(self.here, current, strict=False)):
            torch.where(bad, self.good[index], flat, out=flat)
            group.write(flat)
            self.good[index] = flat

    def good_pieces(self) -> dict[int, torch.Tensor]:
        pieces: dict[int, torch.Tensor] = {}
        for group, flat in zip(self.here, self.good, strict=True):
            pieces |= group.pieces(flat)
        return pieces

    def elsewhere(
        self, current: list[torch.Tensor] | None = None
    ) -> list[tuple[_Group, torch.Tensor]]:
        """The groups off the flag's device with their values now (from `current` if given)."""
        if current is None:
            return [(group, group.gather()) for group in self.others]
        return list(zip(self.others, current[len(self.here) :], strict=True))

    def put_back(self, kept: Iterable[tuple[_Group, torch.Tensor]]) -> None:
        """Write values kept by `elsewhere` back (tensors made since then: zeros)."""
        pieces: dict[int, torch.Tensor] = {}
        for group, flat in kept:
            pieces |= group.pieces(flat)
        for group in self.others:
            group.write(_assemble(group, pieces))


def _assemble(group: _Group, pieces: dict[int, torch.Tensor]) -> torch.Tensor:
    """A group's flat values from per-tensor pieces; a tensor without one gets zeros."""
    flat = [pieces.get(key) for key in group.keys]
    return torch.cat(
        [
            p if p is not None else torch.zeros(n, dtype=t.dtype, device=t.device)
            for p, n, t in zip(flat, group.sizes, group.tensors, strict=True)
        ]
    )


def _layout(optimizers: list[torch.optim.Optimizer]) -> tuple[int, ...]:
    """Parameters and per-parameter states per optimizer: changes when a step creates state."""
    return tuple(
        n
        for optimizer in optimizers
        for n in (sum(len(g["params"]) for g in optimizer.param_groups), len(optimizer.state))
    )


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """This rank's shard of an FSDP2 (DTensor) tensor, else the tensor: same storage.

    Under FSDP2 each rank guards its own shards; the flag is combined over the ranks when
    the host reads it (`reduce_boolean_decision`), as under DDP.
    """
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def _checkpoint_dir(trainer: L.Trainer) -> Path:
    callback = trainer.checkpoint_callback
    dirpath = getattr(callback, "dirpath", None)
    return Path(dirpath) if dirpath else RunLayout(trainer.default_root_dir).checkpoints
