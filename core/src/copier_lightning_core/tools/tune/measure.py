"""Short measured fits: samples per second, data wait and device memory of one setting.

Each measurement is an ordinary `fit` of the configured run built by the project's CLI,
so what is timed is what `fit` will run: the same model, data, callbacks and precision.
"""

import contextlib
import gc
import io
import json
import time
import warnings
from collections.abc import Sized
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from ...callbacks.batches import sample_counter, uncounted_note
from ...platform.refusal import Refusal
from ...run.lightning_cli import ProjectCLI

WARMUP = 2  # batches not timed: first-batch checks, allocator warm-up, compilation


class StepTimer(L.Callback):
    """Times each training batch the way `DataWaitMonitor` does, and the device memory peak.

    A batch's wait is the time from the end of the previous batch (for the first one: the
    epoch's start, which includes starting the loader and its workers) to its start; its
    total adds the step itself. The batches after `WARMUP` give the steady rates. On CUDA
    each batch ends with a device synchronization, so that its time is its own, not the
    queue's; the data wait then also counts loading that `fit` overlaps with device work:
    an upper bound of what fit's monitor sees. Samples are counted as fit's
    TrainingThroughput counts them (callbacks/batches.py: a `count_samples` hook, or the
    batch's own size).
    """

    def __init__(self) -> None:
        self.waits: list[float] = []
        self.totals: list[float] = []
        self.samples: list[int] = []
        self.memory: float | None = None  # peak reserved / total, CUDA only
        self.batches_per_epoch: int | None = None
        self.uncounted: str | None = None  # the type of a batch whose samples were not found

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._count = sample_counter(pl_module, trainer.datamodule)  # type: ignore[attr-defined]
        loader = trainer.train_dataloader
        self.batches_per_epoch = len(loader) if isinstance(loader, Sized) else None
        device = trainer.strategy.root_device
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last_end = time.perf_counter()

    def on_train_batch_start(self, *_: Any) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if trainer.strategy.root_device.type == "cuda":
            torch.cuda.synchronize(trainer.strategy.root_device)
        now = time.perf_counter()
        self.waits.append(self._start - self._last_end)
        self.totals.append(now - self._last_end)
        samples = self._count(batch)
        if not samples and self.uncounted is None:
            self.uncounted = type(batch).__name__
        self.samples.append(samples)
        self._last_end = now

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        device = trainer.strategy.root_device
        if device.type == "cuda":
            total = torch.cuda.get_device_properties(device).total_memory
            self.memory = torch.cuda.max_memory_reserved(device) / total

    @property
    def samples_per_sec(self) -> float:
        """Samples per second of the lower-quartile batch time after the warm-up (nan: none
        timed, or a batch whose samples were not counted).

        Not the mean: on a shared machine other processes slow some batches several times
        over; as Python's `timeit` advises, the faster times show what the setting can do,
        the slower ones the interference.
        """
        if self.uncounted is not None:
            return float("nan")
        batches = list(zip(self.samples, self.totals, strict=True))[WARMUP:]
        rates = sorted(n / t for n, t in batches if t > 0)
        return rates[len(rates) * 3 // 4] if rates else float("nan")

    def epoch_wait_fraction(self) -> float:
        """The `health/data_wait_fraction` DataWaitMonitor would log for a whole epoch.

        The first batch (loader start-up included) as measured, every other batch of the
        epoch at the steady per-batch wait and time measured after the warm-up; without a
        known epoch length, the batches measured. nan: too few batches were timed.
        """
        steady = len(self.totals) - WARMUP
        if steady <= 0:
            return float("nan")
        wait, total = sum(self.waits[WARMUP:]) / steady, sum(self.totals[WARMUP:]) / steady
        rest = (self.batches_per_epoch or len(self.totals)) - 1
        return (self.waits[0] + rest * wait) / (self.totals[0] + rest * total)


def percent(share: float) -> str:
    """0.25 -> "25%" (spelt out: a format spec of "%" closed by a brace reads as Jinja)."""
    return f"{100 * share:.0f}%"


@dataclass
class Measurement:
    """One timed setting: its label, samples/s, epoch data wait and device memory share."""

    value: Any
    samples_per_sec: float
    data_wait: float
    memory: float | None


def fit(options: list[str], root: Path, *callbacks: dict[str, Any]) -> Any:
    """One short `fit` with extra callbacks (class_path specs), as the command line gives it.

    Returns the CLI (its trainer, model, datamodule and resolved config). Each measurement
    is a new run, so each gets a root of its own (run_root.py).
    """
    gc.collect()  # the previous measurement's model and batches, before this one's peak
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    extra = [f"--trainer.default_root_dir={root}"]
    extra += [f"--trainer.callbacks+={json.dumps(spec)}" for spec in callbacks]
    # Each fit's closing summary (run root, checkpoints) would bury tune's own table.
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")  # meant
        return ProjectCLI(args=["fit", *options, *extra])


def callback(trainer: L.Trainer, kind: type) -> Any:
    """The trainer's first callback of `kind`, or None."""
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set, undeclared
    return next((each for each in callbacks if isinstance(each, kind)), None)


def timed(options: list[str], steps: int, root: Path, value: Any) -> tuple[Measurement, Any]:
    """`steps` timed batches after the warm-up; the measurement and the CLI that ran them."""
    timer = {"class_path": f"{__name__}.StepTimer"}
    cli = fit([*options, f"--trainer.limit_train_batches={WARMUP + steps}"], root, timer)
    found = callback(cli.trainer, StepTimer)
    if found.uncounted is not None:
        raise Refusal(
            uncounted_note("tune", found.uncounted, "it cannot compare samples per second")
        )
    measured = Measurement(value, found.samples_per_sec, found.epoch_wait_fraction(), found.memory)
    return measured, cli
