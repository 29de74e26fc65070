"""Stop on a non-finite loss or update, keep no bad step in the weights, keep no copy of
the state (unless asked), and read nothing from the device per step."""

from __future__ import annotations  # _Check, defined below, in a signature

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from jsonargparse.typing import PositiveInt
from lightning.pytorch.callbacks import Callback
from torch.distributed.tensor import DTensor
from torch.nn.utils import get_total_norm
from torch.utils.hooks import RemovableHandle

from ...platform.paths import RunLayout
from ...platform.private_apis import skips_on_found_inf
from ..batches import named_tensors
from .errors import HealthCheckFailed
from .state_copy import GuardedState

CHECKPOINT_NAME = "before-nonfinite.ckpt"
CULPRITS = ("loss", "gradient norm", "largest weight, optimizer state or buffer after the update")
# Devices where reading a flag on the host waits for nothing (no queue of work to drain):
# there the flag is read at each step.
FREE_FLAG_READS = frozenset({"cpu"})
# What `keep_copy=True` costs: peak memory above plain Lightning per parameter, measured
# with the template's memory benchmark (100M-parameter MLP, AdamW, CPU: 22.8 bytes; the
# default mode, the whole generated fit included, 0.2).
COPY_BYTES_PER_PARAMETER = 23
# Up to this many elements, a CPU takes the state's largest magnitude from one concatenated
# copy. torch's foreach norm reduces each tensor on its own there (about 6 us a tensor:
# 0.3 ms a step for the example's 50 tensors of 73k elements, over 1% of its step), while
# copying a million floats costs about as much as reading them; above, the bytes dominate.
CONCATENATED_STATE_LIMIT = 1 << 20
FIXES = (
    "Common fixes: a lower learning rate (the example: `--model.optimizer.lr`), gradient "
    "clipping (`--trainer.gradient_clip_val 1.0`), or bf16 instead of fp16; the debug "
    "preset's anomaly detection names the first operation that produced it."
)


class NonFiniteGuard(Callback):
    """Skips every update from the first non-finite loss on, on the device; then stops the run.

    By default the guard keeps no copy of the training state. Before each update (after
    the backward pass, the unscaling and the clipping) it raises a flag tensor on the
    device when the loss, or with `check_grad_norm` the gradient norm, is not finite,
    and from then on every step is skipped, the way GradScaler skips an fp16 overflow:
    on a CPU, where reading the flag waits for nothing, it is read and the gradients are
    dropped (torch's optimizers leave a parameter without a gradient untouched: weights,
    moments and step count); an optimizer whose step reads `found_inf` (torch's fused
    ones, `fused: true`) gets the flag and skips on the device; under a GradScaler, which
    reads its own flag on the host at each step, the flag is read too. With any other
    optimizer on a GPU the gradients are zeroed on the device instead: nothing non-finite
    reaches the weights, but the optimizer's momentum and weight decay still move them
    (the stop message says so). The host reads the flag every `check_every_n_steps`
    batches, at the end of each epoch and before every checkpoint is written; the run
    then stops with exit status 1, naming the global step, batch index and value, and
    the weights from before the first bad step are saved to
    `<checkpoints>/before-nonfinite.ckpt`.

    The stop message tells bad data from a bad update, since their fixes differ. Each
    batch's floating tensors are checked for finiteness on the device (one flag per
    tensor, read only when the run stops; NaN inputs alone do not stop a run, as a model
    may mask them): when the first non-finite value came with a non-finite input, the
    message names that batch and its tensors and points at the data; when the loss was
    not finite before the run's first update, the weights cannot be the cause, and it
    points at the data's targets and the loss; otherwise it gives the advice for a
    diverging run (learning rate, clipping, precision).

    An update can also go bad with a finite loss and finite gradients (an absurd learning
    rate overflowing the weights, BatchNorm statistics overflowing). After each step the
    largest magnitude of the weights, optimizer state and buffers is taken on the device
    (one reduction over the state, no copy) into a second flag. Such an update cannot be
    undone without a copy of the state: the run stops, no checkpoint is written from the
    broken state (every save checks the flag first), and the message names the last
    checkpoint written before it, in the checkpoints folder, to resume from.

    `keep_copy=True` undoes bad updates too: a copy of the parameters, optimizer state
    and buffers after the last good step is kept, and each step is checked after the
    update and put back from the copy while the flag is up (on a GPU with `torch.where`,
    on a CPU only when a step is bad). It costs about `COPY_BYTES_PER_PARAMETER` (23)
    bytes of memory per parameter with AdamW, more than the parameters, gradients and
    both moments together: measure with `benchmarks/memory.py` before turning it on for
    a model that fills the device.

    The checks run through torch's optimizer step hooks and Lightning's
    `on_before_optimizer_step`, so they work for any optimizer and precision, in
    automatic and manual optimization. The loss checked is what reaches the backward pass
    (`manual_backward` under manual optimization, where `training_step` returns none);
    of several in one batch (a GAN's discriminator and generator losses), the first that
    is not finite is the one named. A batch that makes no step (gradient accumulation)
    is checked by its loss. Under several processes every process sees the same
    all-reduced gradients; the flags are combined over the ranks when the host reads
    them (a NaN loss on one rank only: turn `check_grad_norm` on so that every rank skips
    the step). Under FSDP2 each rank checks its own shards.

    Args:
        check_every_n_steps: how often (in training batches) the host reads the flags; the
            run stops at most this many batches after the first bad one.
        check_grad_norm: also check the gradient norm before the step (one norm per
            step), to skip a step whose gradients are not finite although its loss is.
            Ignored under a GradScaler, whose job non-finite gradients are.
        keep_copy: keep a copy of the state to undo a bad update too (memory: see above).
    """

    def __init__(
        self,
        check_every_n_steps: PositiveInt = 50,
        check_grad_norm: bool = False,
        keep_copy: bool = False,
    ) -> None:
        self.check_every_n_steps = check_every_n_steps
        self.check_grad_norm = check_grad_norm
        self.keep_copy = keep_copy
        self._handles: list[RemovableHandle] = []
        self._broken: torch.Tensor | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._module = pl_module
        self._optimizers = list(trainer.optimizers)
        # Sticky flags: a bad loss or gradient (every step from then on is skipped or
        # undone), and a bad update that nothing undid (no copy).
        self._bad = torch.zeros((), dtype=torch.bool, device=pl_module.device)
        self._broken = torch.zeros_like(self._bad)
        self._batches = 0
        self._global_step = self._batch_idx = 0
        self._first_step = trainer.global_step  # not 0 on a resume
        self._inputs: _Inputs | None = None
        self._checks_before_batch = 0
        self._loss: torch.Tensor | None = None
        self._grad_norm: torch.Tensor | None = None
        self._worst: torch.Tensor | None = None
        self._stepped = self._stopping = self._zeroed = False
        self._scaler = getattr(trainer.precision_plugin, "scaler", None)
        self._check_grads = self.check_grad_norm and self._scaler is None
        # Since the host last read the flags: each check, and with a copy the tensors the
        # flag cannot reach before each (history[i] is the state before checks[i]).
        self._checks: list[_Check] = []
        if self.keep_copy:
            self._state = self._guarded_state()
            self._history = [self._state.elsewhere()]
        else:
            self._watched = self._watched_state()
        for optimizer in self._optimizers:
            self._handles.append(optimizer.register_step_post_hook(self._after_step))

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Gathering the state again follows a buffer that a module replaced instead of
        # updating it in place; with a copy, the state is good here (the flag was read).
        if self.keep_copy:
            self._state = self._guarded_state()
        else:
            self._watched = self._watched_state()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._remove_hooks()
        self._stop_if_bad(trainer)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        self._remove_hooks()

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        # Never write a checkpoint from a state a bad update broke: stop instead. (A
        # skipped step leaves the state good: that save goes ahead.)
        if self._broken is None or self._stopping or self.keep_copy:
            return
        if trainer.strategy.reduce_boolean_decision(bool(self._broken), all=False):
            self._stop_if_bad(trainer)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._global_step, self._batch_idx = trainer.global_step, batch_idx
        self._checks_before_batch = len(self._checks)
        # Where reading a flag waits for nothing, the inputs of a batch are checked only
        # when one of its checks found a non-finite value (on_train_batch_end): a pass over
        # every batch was a few percent of a small model's step on a CPU.
        on_host = self._bad.device.type in FREE_FLAG_READS
        self._inputs = None if on_host else _Inputs.of(batch, self._bad.device)

    def on_before_backward(
        self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor
    ) -> None:
        # Under a GradScaler this is the scaled loss: finite exactly when the loss is.
        loss = loss.detach()
        if not self.keep_copy:
            self._bad |= ~torch.isfinite(loss)
        if self._loss is None:
            self._loss = loss
        else:
            # A later backward pass of the same batch (manual optimization: a GAN's two
            # losses) keeps the first non-finite loss, on the device: the message names it.
            self._loss = torch.where(torch.isfinite(self._loss), loss, self._loss)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._check_grads:
            grads = [_local(p.grad) for p in _params(optimizer) if p.grad is not None]
            if grads:
                self._grad_norm = get_total_norm(grads, foreach=True)
        if self.keep_copy:
            return
        if self._grad_norm is not None:
            self._bad |= ~torch.isfinite(self._grad_norm)
        self._skip_if_bad(optimizer)

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self.keep_copy:
            if not self._stepped:  # its loss, and the buffers its forward pass changed
                self._check_and_undo()
        else:
            self._checks.append(self._check(self._worst))
        if self._bad.device.type in FREE_FLAG_READS:
            for check in self._checks[self._checks_before_batch :]:
                if check.culprit() is not None:
                    check.inputs = _Inputs.of(batch, self._bad.device)
        self._stepped = False
        self._batches += 1
        last = trainer.fit_loop.epoch_loop.batch_progress.is_last_batch
        if last or self._batches % self.check_every_n_steps == 0:
            self._stop_if_bad(trainer)

    def _skip_if_bad(self, optimizer: torch.optim.Optimizer) -> None:
        """Make this step a no-op while the flag is up, without reading it where that waits."""
        # Under a GradScaler (not fused) the gradients were unscaled and its own flag set
        # before this hook; it reads that flag on the host at each step anyway.
        reads_free = self._bad.device.type in FREE_FLAG_READS or self._scaler is not None
        if reads_free:
            if not self._bad:
                return
            if self._scaler is not None and skips_on_found_inf(optimizer):
                # The scaler looks for non-finite gradients of a fused optimizer after this.
                for param in _params(optimizer):
                    if param.grad is not None:
                        param.grad.fill_(math.nan)
                return
            for param in _params(optimizer):
                param.grad = None
        elif skips_on_found_inf(optimizer):
            vars(optimizer)["found_inf"] = self._bad.float()  # read by fused kernels; popped after
        else:
            self._zeroed = True
            for param in _params(optimizer):
                if param.grad is not None:
                    param.grad.masked_fill_(self._bad, 0.0)

    def _after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._stepped = True
        if self.keep_copy:
            self._check_and_undo()
            return
        if self._scaler is None:
            vars(optimizer).pop("found_inf", None)
        self._worst = self._largest_magnitude()
        if self._worst is not None and self._broken is not None:
            self._broken |= ~torch.isfinite(self._worst)

    def _check(self, worst: torch.Tensor | float | None) -> _Check:
        check = _Check(
            self._global_step, self._batch_idx, self._loss, self._grad_norm, worst, self._inputs
        )
        self._loss = self._grad_norm = self._worst = None
        return check

    def _watched_state(self) -> _Watched:
        """The floating tensors of the state on the module's device, and their layout."""
        found = {
            id(t): t
            for t in self._state_tensors().values()
            if t.is_floating_point() and t.numel() and t.device == self._bad.device
        }
        tensors = list(found.values())
        # Flat views follow the in-place updates of the tensors they view (a strided one,
        # channels_last weights, has none: its state goes tensor by tensor).
        small = (
            self._bad.device.type in FREE_FLAG_READS
            and sum(t.numel() for t in tensors) <= CONCATENATED_STATE_LIMIT
            and all(t.is_contiguous() for t in tensors)
        )
        return _Watched(
            _layout(self._optimizers),
            tensors,
            [t.detach().view(-1) for t in tensors] if small else None,
        )

    @torch.no_grad()
    def _largest_magnitude(self) -> torch.Tensor | None:
        """The largest magnitude of the weights, optimizer state and buffers: not finite
        when one is. One foreach reduction per device and dtype, no copy of the state; a
        small state on a CPU: one copy and one reduction (CONCATENATED_STATE_LIMIT)."""
        if self._watched.layout != _layout(self._optimizers):  # the step created optimizer state
            self._watched = self._watched_state()
        tensors = self._watched.tensors
        if not tensors:
            return None
        if self._watched.flat is not None:  # dtypes promote to the widest; max keeps a NaN
            return torch.cat(self._watched.flat).abs().max()
        return get_total_norm(tensors, norm_type=math.inf, foreach=True)

    def _state_tensors(self) -> dict[int, torch.Tensor]:
        """Every parameter, optimizer state and buffer (this rank's shards under FSDP2)."""
        found: dict[int, torch.Tensor] = {}
        for optimizer in self._optimizers:
            for param in _params(optimizer):
                found.setdefault(id(param), _local(param))
                for value in optimizer.state.get(param, {}).values():
                    if isinstance(value, torch.Tensor):
                        found.setdefault(id(value), _local(value))
        for buffer in self._module.buffers():
            found.setdefault(id(buffer), buffer)
        return found

    # --- keep_copy=True: check after the update, undo from the copy -----------------------

    @torch.no_grad()
    def _check_and_undo(self) -> None:
        """Raise the flag on a non-finite value; undo the step while it is up.

        The host reads nothing where that would wait for the device (FREE_FLAG_READS).
        """
        if self._state.layout != _layout(self._optimizers):
            # The step created optimizer state: its state before the step was none (zeros).
            self._state = self._guarded_state(good=self._state.good_pieces())
        current = self._state.gather()
        # Every call here is a tensor operation, slow on a CPU right after the backward pass
        # (cold caches: tens of microseconds each): as few as the check needs.
        on_host = self._bad.device.type in FREE_FLAG_READS
        check = self._copy_check_on_host(current) if on_host else self._copy_check(current)
        self._state.keep_or_undo(current, self._bad, on_host)
        self._checks.append(check)
        self._history.append(self._state.elsewhere(current))

    def _copy_check(self, current: list[torch.Tensor]) -> _Check:
        """Raise the flag with tensor operations only: the host reads nothing."""
        loss = None if self._loss is None else self._loss.abs()  # NaN stays NaN, -inf: inf
        worst = None
        for value in (*self._state.magnitudes(current), loss, self._grad_norm):
            if value is not None:
                worst = value if worst is None else torch.maximum(worst, value)
        if worst is not None:
            self._bad |= ~torch.isfinite(worst)
        return self._check(worst)

    def _copy_check_on_host(self, current: list[torch.Tensor]) -> _Check:
        """Raise the flag from values read on the host, where reading waits for nothing.

        Two reductions per group and a read of each scalar, instead of the device path's
        chain of tensor operations (a third of the check's cost on the example's CPU step).
        """
        loss = None if self._loss is None else float(self._loss)
        grad_norm = None if self._grad_norm is None else float(self._grad_norm)
        worst = self._state.worst_on_host(current)
        if not all(math.isfinite(v) for v in (loss, grad_norm, worst) if v is not None):
            self._bad.fill_(True)
        self._loss = self._grad_norm = None
        return _Check(self._global_step, self._batch_idx, loss, grad_norm, worst, self._inputs)

    def _guarded_state(self, good: dict[int, torch.Tensor] | None = None) -> GuardedState:
        """Every parameter, optimizer state and buffer, with the good copy given or taken now."""
        tensors = self._state_tensors()
        return GuardedState(tensors, self._bad.device, _layout(self._optimizers), good)

    # --- reading the flags --------------------------------------------------------------

    def _stop_if_bad(self, trainer: L.Trainer) -> None:
        flag = self._bad if self.keep_copy or self._broken is None else self._bad | self._broken
        if not trainer.strategy.reduce_boolean_decision(bool(flag), all=False):
            self._checks.clear()
            if self.keep_copy:
                del self._history[:-1]  # the state now: the next window's start
            return
        self._stopping = True
        # Only now, with the run stopping, are the checks read on the host.
        found = [(i, check.culprit()) for i, check in enumerate(self._checks)]
        first = next(((i, culprit) for i, culprit in found if culprit is not None), None)
        if self.keep_copy and first is not None:  # the groups on the flag's device are back
            self._state.put_back(self._history[first[0]])
        cause = None
        if first is None:
            where = "on another process"
        else:
            index, (what, value) = first
            check = self._checks[index]
            where = (
                f"at global step {check.global_step} (batch {check.batch_idx} of epoch "
                f"{trainer.current_epoch}), {CULPRITS[what]} = {value}"
            )
            cause = self._cause(check, what, where)
        checkpoints = _checkpoint_dir(trainer)
        if not self.keep_copy and trainer.strategy.reduce_boolean_decision(
            bool(self._broken), all=False
        ):
            raise HealthCheckFailed(self._broken_message(where, checkpoints, cause))
        path = checkpoints / CHECKPOINT_NAME
        trainer.save_checkpoint(path, weights_only=False)  # resumable: optimizer and loops too
        if self._zeroed:
            applied = (
                "The steps from then on ran with zero gradients (the optimizer's momentum "
                "and weight decay still moved the weights; a fused optimizer, `fused: true`, "
                "skips them exactly); the weights at the stop are saved in"
            )
        else:
            applied = (
                "No update from that step on was applied; the weights from just before it "
                "are saved in"
            )
        saved = f"{applied} {path} (resume with `--ckpt_path` that file)."
        if cause is not None:
            raise HealthCheckFailed(f"{cause} {saved}")
        raise HealthCheckFailed(
            f"training diverged: a non-finite value appeared {where}. {saved} {FIXES}"
        )

    def _cause(self, check: _Check, what: int, where: str) -> str | None:
        """What to blame when it was not an update: the data, or a loss never finite."""
        names = check.nonfinite_inputs()
        if names:
            return (
                f"the training data is not finite: {', '.join(names)} held NaN or inf "
                f"values {where}. The data is at fault, not the training: fix the samples of "
                "that batch where they are made (the Dataset's `__getitem__` or the files it "
                "reads: a missing value read as NaN, a division by zero), or drop them."
            )
        if what == CULPRITS.index("loss") and check.global_step == self._first_step:
            return (
                f"the loss was not finite before the run's first update, on finite inputs: "
                f"{where}. The weights had not been trained yet, so the learning rate is not "
                "the cause: look at that batch's targets (labels outside the loss's range, "
                "a log of zero) and at the loss and forward pass computed on them."
            )
        return None

    def _broken_message(self, where: str, checkpoints: Path, cause: str | None = None) -> str:
        written = sorted(
            (p for p in checkpoints.glob("*.ckpt") if p.name != CHECKPOINT_NAME),
            key=lambda p: p.stat().st_mtime,
        )
        if written:
            last = (
                f"the last checkpoint written before it is {written[-1]}: resume from it "
                "(`--ckpt_path` that file) after one of the fixes below"
            )
        else:
            last = f"no checkpoint was written before it in {checkpoints}: start again"
        if cause is not None:
            return f"{cause} The update it led to broke the weights, so nothing was saved; {last}."
        return (
            f"training diverged: a non-finite value appeared {where}, after an update whose "
            "loss was finite. Such an update cannot be undone without a copy of the state, "
            "so nothing was saved from it; "
            f"{last}. {FIXES} `keep_copy: true` on NonFiniteGuard undoes such an update "
            f"instead (about {COPY_BYTES_PER_PARAMETER} bytes of memory per parameter)."
        )

    def _remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


@dataclass(frozen=True)
class _Watched:
    """The state NonFiniteGuard measures after each step, gathered once per layout."""

    layout: tuple[int, ...]  # changes when a step creates optimizer state
    tensors: list[torch.Tensor]
    # Their flat views where one copy and one reduction measure them (CONCATENATED_STATE_LIMIT)
    flat: list[torch.Tensor] | None


@dataclass
class _Check:
    """One check's values, left on the device unless the run stops."""

    global_step: int
    batch_idx: int
    # Tensors on the device path, numbers on the host path.
    loss: torch.Tensor | float | None
    grad_norm: torch.Tensor | float | None
    worst: torch.Tensor | float | None  # the largest magnitude of all: not finite when one is not
    inputs: _Inputs | None = None  # the batch's floating tensors, checked on the device

    def nonfinite_inputs(self) -> list[str]:
        """The names of the batch's tensors that held NaN or inf (a host read)."""
        if self.inputs is None:
            return []
        finite = self.inputs.finite.tolist()
        return [name for name, ok in zip(self.inputs.names, finite, strict=True) if not ok]

    def culprit(self) -> tuple[int, float] | None:
        """(index into CULPRITS, value) of the first non-finite value, else None (host reads)."""
        for what, value in enumerate((self.loss, self.grad_norm, self.worst)):
            if value is not None and not math.isfinite(float(value)):
                return what, float(value)
        return None


@dataclass
class _Inputs:
    """Which of a batch's floating tensors are finite: one flag each, left on the device."""

    names: tuple[str, ...]
    finite: torch.Tensor  # (len(names),) bool

    @staticmethod
    def of(batch: Any, device: torch.device) -> _Inputs | None:
        tensors = [
            (name, t)
            for name, t in named_tensors(batch, "batch")
            if t.is_floating_point() and t.numel() and t.device == device
        ]
        if not tensors:
            return None
        names = tuple(name for name, _ in tensors)
        return _Inputs(names, torch.stack([torch.isfinite(t).all() for _, t in tensors]))


def _params(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    return [param for group in optimizer.param_groups for param in group["params"]]


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
