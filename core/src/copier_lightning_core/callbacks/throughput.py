"""Training throughput (samples/s, batches/s) and model FLOP utilisation, for any module.

Built on Lightning's `Throughput` meter, not its `ThroughputMonitor` callback: that one
synchronizes CUDA after every batch (to time it), a host sync per step that costs more
than it measures, and it needs a `batch_size_fn` and a `flops_per_batch` written for each
module. Here the meter is updated only when the loggers write (every `log_every_n_steps`),
so the one synchronization lands where Lightning's logging reads the device anyway; the
samples of a batch are counted as batches.py says (a `count_samples(batch)` method of the
module or data module, else the first dimension of the first tensor, or a batch object's
`num_graphs`); and the FLOPs are measured once, on the module's `example_input_array`, and
scaled by the samples. MFU is FLOPs per second over the device's peak (`get_available_flops`).

Logged as `train/samples_per_sec`, `train/batches_per_sec` (over all processes),
`train/device/...` (per process) and `train/device/mfu` when both numbers are known. A
batch whose samples cannot be counted leaves batches/s only, said once.
"""

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from jsonargparse.typing import restricted_number_type
from lightning.fabric.utilities.throughput import Throughput, get_available_flops, measure_flops
from lightning.pytorch.utilities import rank_zero_info

from .batches import default_count, named_tensors, sample_counter, uncounted_note

# Lightning's meter needs two points to take a difference (it asserts so, at the first
# step): the parser refuses a window of 1 instead. (mypy sees a type built at run time as
# a variable, so it is told the int it is.)
if TYPE_CHECKING:
    AtLeastTwo = int
else:
    AtLeastTwo = restricted_number_type("AtLeastTwo", int, (">=", 2), docstring="int ≥2")


class TrainingThroughput(L.Callback):
    """Logs samples/s, batches/s and (when known) MFU at the loggers' cadence.

    Args:
        window: logging points the rates are averaged over (at least 2: a rate is the
            difference between the first and the last).
    """

    def __init__(self, window: AtLeastTwo = 2) -> None:
        self.window = window
        self.flops_per_sample: float | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # Before compile and sharding, on the CPU copy of the weights: no device work.
        if stage == "fit":
            self.flops_per_sample = flops_per_sample(pl_module)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = trainer.strategy.root_device
        peak = get_available_flops(device, compute_dtype(str(trainer.precision)))
        self._meter = Throughput(peak, trainer.world_size, window_size=self.window)
        self._samples = self._batches = 0
        self._flops_counted = 0.0
        self._count = sample_counter(pl_module, trainer.datamodule)  # type: ignore[attr-defined]
        self._counted = True  # every batch so far had its samples counted
        self._synchronize = device.type == "cuda"
        self._start = self._now()
        missing = []
        if self.flops_per_sample is None and example_is_unbatched(pl_module):
            missing.append(
                f"the tensors of {type(pl_module).__name__}'s `example_input_array` do not "
                "share a first (batch) dimension, so its FLOPs per sample are not known"
            )
        elif self.flops_per_sample is None:
            missing.append(f"{type(pl_module).__name__} sets no `example_input_array`")
        if peak is None:
            missing.append(f"the peak FLOP/s of this {device.type} device is not known")
        if missing:
            rank_zero_info(f"TrainingThroughput: no MFU is logged: {' and '.join(missing)}.")

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, *_: Any
    ) -> None:
        samples = self._count(batch) if self._counted else 0
        if not samples and self._counted:
            self._counted = False
            skipped = "samples/s and FLOP/s are not logged (batches/s are)"
            rank_zero_info(uncounted_note("TrainingThroughput", type(batch).__name__, skipped))
        self._samples += samples
        self._batches += 1
        every = trainer.log_every_n_steps  # type: ignore[attr-defined]  # set, undeclared
        if not trainer.loggers or trainer.global_step % every:
            return
        flops = None
        if self.flops_per_sample is not None and self._counted:
            flops = self.flops_per_sample * self._samples - self._flops_counted
            self._flops_counted += flops
        self._meter.update(
            time=self._now() - self._start,
            batches=self._batches,
            # Lightning's meter needs samples >= batches: uncounted, batches stand in (dropped)
            samples=self._samples if self._counted else self._batches,
            flops=None if flops is None else int(flops),
        )
        metrics = self._meter.compute()
        if not self._counted:  # samples stand-ins, FLOPs of the batches counted before
            metrics = {k: v for k, v in metrics.items() if k.endswith("batches_per_sec")}
        if trainer.world_size == 1:  # the meter gives totals over processes only for several
            metrics |= {key[len("device/") :]: v for key, v in metrics.items() if "per_sec" in key}
        rates = {f"train/{k}": v for k, v in metrics.items() if k.endswith(("per_sec", "mfu"))}
        for logger in trainer.loggers if rates else ():
            logger.log_metrics(rates, step=trainer.global_step)

    def _now(self) -> float:
        """The time, once the device has finished what was queued (only at logging points)."""
        if self._synchronize:
            torch.cuda.synchronize()
        return time.perf_counter()


def batch_size(batch: Any) -> int:
    """The samples in `batch` without a module's hook (batches.py); 0: none found."""
    return default_count(batch)


def example_is_unbatched(module: L.LightningModule) -> bool:
    """Whether the tensors of `example_input_array` differ in their first dimension."""
    example = getattr(module, "example_input_array", None)
    firsts = {t.shape[0] for _, t in named_tensors(example) if t.ndim}
    return len(firsts) > 1


def flops_per_sample(module: L.LightningModule) -> float | None:
    """Training FLOPs per sample: 3x the forward on `example_input_array` (backward ~ 2x).

    Measured once, in eval mode and without gradients, so that nothing of the run changes
    (no BatchNorm statistics, no dropout draws from the RNG, no gradients).
    """
    example = getattr(module, "example_input_array", None)
    size = batch_size(example) if example is not None else 0
    if not size or example_is_unbatched(module):
        return None  # per sample means nothing without one batch dimension (graph inputs)

    def forward() -> Any:
        if isinstance(example, Mapping):
            return module(**example)
        return module(*example) if isinstance(example, tuple) else module(example)

    training = module.training
    module.eval()
    try:
        with torch.no_grad():
            return 3 * measure_flops(module, forward) / size
    finally:
        module.train(training)


def compute_dtype(precision: str) -> torch.dtype:
    """The dtype matmuls run in under a Lightning precision setting ("bf16-mixed", ...)."""
    if precision.startswith("bf16"):
        return torch.bfloat16
    if precision.startswith("16"):
        return torch.float16
    if precision.startswith("64"):
        return torch.float64
    return torch.float32
