"""CUDA memory per epoch, and a memory snapshot when a run dies of out-of-memory."""

from pathlib import Path

import lightning as L
import torch
from jsonargparse.typing import PositiveInt
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from ...platform.private_apis import (
    dump_cuda_allocations,
    record_cuda_allocations,
    stop_recording_cuda_allocations,
)

GIB = 2**30


class MemoryStats(Callback):
    """Logs allocated / reserved / peak CUDA memory (GiB) at the end of each training epoch.

    Allocated is what tensors use; reserved is what the caching allocator holds (what
    `nvidia-smi` shows); peak is the epoch's high-water mark. Reading them is host-only.
    Lightning's DeviceStatsMonitor logs every allocator counter at every logging step;
    these three per epoch are what the usual memory question needs.

    With `snapshot_on_oom`, torch records the allocation history (a small cost per
    allocation) and an out-of-memory error dumps it to
    `<root>/memory/oom-snapshot-rank<N>.pickle`, named in the error; open it at
    https://pytorch.org/memory_viz. Without CUDA this callback does nothing.

    Args:
        snapshot_on_oom: record allocation history and dump it on out-of-memory.
        max_entries: allocation events kept in the history.
    """

    def __init__(self, snapshot_on_oom: bool = False, max_entries: PositiveInt = 100_000) -> None:
        self.snapshot_on_oom = snapshot_on_oom
        self.max_entries = max_entries
        self._recording = False

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._device = trainer.strategy.root_device
        self._cuda = isinstance(trainer.accelerator, CUDAAccelerator)
        if not self._cuda and self.snapshot_on_oom:
            rank_zero_info("MemoryStats: not training on CUDA, so no memory snapshot on OOM.")
        elif self._cuda and self.snapshot_on_oom and not self._recording:
            record_cuda_allocations(self.max_entries)
            self._recording = True

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._cuda:
            torch.cuda.reset_peak_memory_stats(self._device)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._cuda:
            return
        stats = {
            "memory/allocated_gib": torch.cuda.memory_allocated(self._device) / GIB,
            "memory/reserved_gib": torch.cuda.memory_reserved(self._device) / GIB,
            "memory/peak_gib": torch.cuda.max_memory_allocated(self._device) / GIB,
        }
        pl_module.log_dict(stats, rank_zero_only=True)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        if not (self._recording and isinstance(exception, torch.cuda.OutOfMemoryError)):
            self._stop_recording()
            return
        path = (
            Path(trainer.default_root_dir)
            / "memory"
            / f"oom-snapshot-rank{trainer.global_rank}.pickle"
        )
        path.parent.mkdir(parents=True, exist_ok=True)
        dump_cuda_allocations(str(path))
        note = f"Memory snapshot of the allocations before this error: {path} (open it at https://pytorch.org/memory_viz)."
        if hasattr(exception, "add_note"):  # Python 3.11+
            exception.add_note(note)
        else:
            print(note)
        self._stop_recording()

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._stop_recording()

    def _stop_recording(self) -> None:
        if self._recording:
            stop_recording_cuda_allocations()
            self._recording = False
