# Managed by the template; local edits are merged on update.
"""Bit-exact resume: a resumed run ends with the same tensors as an uninterrupted one.

Lightning restores weights, optimizers, schedulers and loop counters, but not the random
number generators nor the position of a plain DataLoader inside its epoch (a resumed
epoch would start over, in a new order). Three pieces close the gap:

- `ResumableDataLoader`: a DataLoader whose order is a function of (seed, epoch) and
  whose position Lightning saves in each checkpoint (`state_dict`) and restores before
  it iterates again (`load_state_dict`). Its sampler hands the dataset `(epoch, index)`
  keys, so random augmentation can draw from a generator seeded by (seed, epoch, index):
  the same numbers in any worker process, persistent or not, before or after a resume.
- `ResumeState`: saves the torch (CPU and CUDA), numpy and python RNG states and the
  loaders' positions with every checkpoint and puts them back when training resumes.
- `InterruptCheckpoint`: on SIGTERM (preemption) or Ctrl-C, writes `last.ckpt`, the file
  `--ckpt_path last` resumes from. Lightning stops on SIGTERM after a finished batch, so
  that checkpoint resumes exactly; Ctrl-C lands wherever the process is.

Checkpoints are written every `every_n_train_steps` by the `last.ckpt` ModelCheckpoint of
`configs/default.yaml` and at each epoch's end, so a kill loses at most the steps since.
"""

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torch.utils.data import DataLoader, Dataset, Sampler

from .paths import LAST_CHECKPOINT, RunLayout


def run_seed() -> int:
    """The run's seed: the one `seed_everything` set (the config's `seed_everything:`)."""
    return int(os.environ.get("PL_GLOBAL_SEED", torch.initial_seed()))


class EpochShuffle(Sampler[tuple[int, int]]):
    """A new random order every epoch, drawn from (seed, epoch) alone; yields (epoch, index).

    Lightning calls `set_epoch` before each epoch. `start` skips the items of the epoch
    that a checkpoint had already consumed.
    """

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self.epoch, self.start = 0, 0

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch, self.start = epoch, 0

    def __len__(self) -> int:
        return self.size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch, start = self.epoch, self.start
        self.start = 0
        generator = torch.Generator().manual_seed((self.seed * 1_000_003 + epoch) % 2**63)
        for index in torch.randperm(self.size, generator=generator)[start:].tolist():
            yield epoch, index


class ResumableDataLoader(DataLoader):
    """A DataLoader that resumes mid-epoch where its checkpoint left off, in the same order.

    Use it like `DataLoader`. With `shuffle=True` the order comes from `EpochShuffle` and
    the dataset receives `(epoch, index)` keys. Worker seeds come from a generator seeded
    by `seed` (default: the run's seed), so loading never draws from the global RNG.
    """

    def __init__(
        self,
        dataset: Dataset,
        batch_size: int | None = 1,
        shuffle: bool = False,
        sampler: Sampler | None = None,
        seed: int | None = None,
        generator: torch.Generator | None = None,
        **kwargs: Any,
    ) -> None:
        seed = run_seed() if seed is None else seed
        if shuffle and sampler is None:
            sampler = EpochShuffle(len(dataset), seed)
        if generator is None:
            generator = torch.Generator().manual_seed(seed)
        super().__init__(
            dataset, batch_size=batch_size, sampler=sampler, generator=generator, **kwargs
        )
        self.batches_yielded = 0

    def __iter__(self) -> Iterator[Any]:
        self.batches_yielded = 0
        for batch in super().__iter__():
            self.batches_yielded += 1
            yield batch

    def state_dict(self) -> dict[str, int]:
        epoch = self.sampler.epoch if isinstance(self.sampler, EpochShuffle) else 0
        return {"epoch": epoch, "batches": self.batches_yielded}

    def load_state_dict(self, state: dict[str, int]) -> None:
        if not isinstance(self.sampler, EpochShuffle):
            return
        epoch, batches = state["epoch"], state["batches"]
        if batches >= len(self):  # saved after the epoch's last batch: the next epoch follows
            epoch, batches = epoch + 1, 0
        self.sampler.epoch = epoch
        self.sampler.start = batches * (self.batch_size or 1)


def rng_states() -> dict[str, Any]:
    """Every global RNG state, as tensors and plain types (`weights_only` loading accepts them)."""
    _, keys, position, has_gauss, cached_gaussian = np.random.get_state()
    version, python_state, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": {
            "keys": torch.from_numpy(keys.astype(np.int64)),
            "position": int(position),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "python": {"version": version, "state": list(python_state), "gauss_next": gauss_next},
    }


def set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    if states["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])
    numpy = states["numpy"]
    np.random.set_state(
        (
            "MT19937",
            numpy["keys"].numpy().astype(np.uint32),
            numpy["position"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    python = states["python"]
    random.setstate((python["version"], tuple(python["state"]), python["gauss_next"]))


class ResumeState(L.Callback):
    """Saves the global RNG states and the train loaders' positions in each checkpoint.

    Both are put back in `on_train_start`, after the resumed process has built its loaders
    and run its sanity check, and before the first batch is drawn, so the first resumed
    step sees what the uninterrupted run saw after that checkpoint. Lightning would restore
    the positions itself, but a module that reads `trainer.estimated_stepping_batches` in
    `configure_optimizers` (as a warmup schedule does) makes it build the train loader
    before the checkpoint is loaded, and the saved positions are then never applied.
    """

    def __init__(self) -> None:
        self._trainer: L.Trainer | None = None
        self._to_restore: dict[str, Any] | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        loaders = _resumable_loaders(self._trainer) if self._trainer else []
        return {"rng": rng_states(), "loaders": [loader.state_dict() for loader in loaders]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._to_restore = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._to_restore is None:
            return
        for loader, state in zip(
            _resumable_loaders(trainer), self._to_restore.get("loaders", []), strict=False
        ):
            loader.load_state_dict(state)
        set_rng_states(self._to_restore["rng"])
        self._to_restore = None


def _resumable_loaders(trainer: L.Trainer) -> list[ResumableDataLoader]:
    loaders = trainer.train_dataloader
    if isinstance(loaders, dict):
        loaders = list(loaders.values())
    elif not isinstance(loaders, list | tuple):
        loaders = [loaders]
    return [loader for loader in loaders if isinstance(loader, ResumableDataLoader)]


class InterruptCheckpoint(L.Callback):
    """Writes `<checkpoint dir>/last.ckpt` when training stops on SIGTERM or Ctrl-C.

    Lightning's OnExceptionCheckpoint writes `on_exception.ckpt` on any error (which
    `--ckpt_path last` ignores) and deletes it at teardown; this one writes where a resume
    looks, and only on an interruption, not on a crash whose state may be broken.

    Args:
        dirpath: the checkpoint folder; defaults to `<trainer.default_root_dir>/checkpoints`.
    """

    def __init__(self, dirpath: str | None = None) -> None:
        self.dirpath = dirpath

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        interrupted = isinstance(exception, SIGTERMException | KeyboardInterrupt)
        if not interrupted or trainer.state.fn != TrainerFn.FITTING:
            return
        folder = (
            Path(self.dirpath) if self.dirpath else RunLayout(trainer.default_root_dir).checkpoints
        )
        trainer.save_checkpoint(folder / LAST_CHECKPOINT, weights_only=False)
