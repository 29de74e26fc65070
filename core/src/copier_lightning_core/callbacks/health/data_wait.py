"""How much of each training epoch is spent waiting for the next batch."""

import time
from typing import Any

import lightning as L
from jsonargparse.typing import ClosedUnitInterval
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn

from ...platform.loader_rules import available_cpus


class DataWaitMonitor(Callback):
    """Logs `health/data_wait_fraction` per epoch: time between steps over the whole epoch.

    The wait is the host time from the end of one training step to the start of the next,
    which is mostly fetching the next batch (with the loop's own bookkeeping); two clock
    reads per step, no device sync. Lightning's profilers measure the same more precisely
    but cost far more. Above `hint_above`, a one-line hint suggests more DataLoader
    workers, once per run.

    Args:
        hint_above: the fraction above which the loader is the likely bottleneck.
    """

    def __init__(self, hint_above: ClosedUnitInterval = 0.2) -> None:
        self.hint_above = hint_above
        self._hinted = False
        self._restart()

    def _restart(self) -> None:
        self._wait = 0.0
        self._total = 0.0
        self._last_end = time.perf_counter()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # A run resumed mid-epoch (e.g. a requeued SLURM job) starts without an epoch start.
        self._restart()

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._restart()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._wait += time.perf_counter() - self._last_end

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        now = time.perf_counter()
        self._total += now - self._last_end
        self._last_end = now

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._total <= 0:
            return
        fraction = self._wait / self._total
        pl_module.log("health/data_wait_fraction", fraction, rank_zero_only=True)
        if fraction > self.hint_above and not self._hinted:
            self._hinted = True
            workers = getattr(trainer.train_dataloader, "num_workers", "?")
            # More workers than the CPUs left to them only take turns with the training
            # process: at that ceiling, the hint is the cheaper loading alone.
            room = available_cpus() // max(trainer.num_devices, 1) - 1
            more = (
                "more DataLoader workers (`--data.num_workers`) or a cheaper __getitem__ would "
                "speed it up"
                if not isinstance(workers, int) or workers < room
                else f"{workers} workers already take the CPUs this process may use: cheaper "
                "loading (decode less per sample, smaller files, data prepared once ahead of "
                "training) or a machine with more cores would speed it up"
            )
            rank_zero_warn(
                f"Training waited for data {100 * fraction:.0f}% of epoch {trainer.current_epoch} "
                f"(num_workers={workers}): {more}."
            )
