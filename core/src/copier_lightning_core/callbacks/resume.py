"""Bit-exact resume: a resumed run ends with the same tensors as an uninterrupted one.

Lightning restores weights, optimizers, schedulers and loop counters, but not the random
number generators, and it restores a loader's position inside its epoch only when the
loader has `state_dict` / `load_state_dict`. Three pieces close the gap:

- The train loaders are torchdata's `StatefulDataLoader` (a drop-in for
  `torch.utils.data.DataLoader`, any map-style Dataset): your DataModule builds them, or
  returns plain DataLoaders, which `LoaderChecks` rebuilds as the equivalent
  StatefulDataLoader (loader_hooks.py). Its `state_dict()` holds how many batches the
  epoch has yielded, the shuffling sampler's generator state and position, the worker
  processes' base seed and each worker's dataset state; loading it replays the same order
  from the next batch. Samplers of your own resume exactly when they have `state_dict` /
  `load_state_dict` or draw nothing random; any other is fast-forwarded by torchdata (its
  order is drawn again). Random augmentation resumes exactly when it draws from torch's
  global RNG in the main process (e.g. in `on_after_batch_transfer`): a worker's RNG
  restarts from its seed when workers restart, not where it stood. What a resume could
  not replay (a DataLoader subclass, an IterableDataset or a sampler without state) is
  named in one warning when training starts.
- `ResumeState`: saves the torch (CPU and CUDA), numpy and python RNG states and the
  train loaders' states with every checkpoint and puts them back when training resumes.
- `InterruptCheckpoint`: on SIGTERM (preemption) or Ctrl-C, writes `last.ckpt`, the file
  `--ckpt_path last` resumes from. Lightning stops on SIGTERM after a finished batch, so
  that checkpoint resumes exactly; the CLI handles a first Ctrl-C the same way, and keeps
  loader workers alive for both (signals.py).

Checkpoints are written every `every_n_train_steps` by the `last.ckpt` ModelCheckpoint of
`configs/default.yaml` and at each epoch's end, so a kill loses at most the steps since.
"""

import random
from pathlib import Path
from typing import Any, NamedTuple

import lightning as L
import numpy as np
import torch
from lightning.pytorch.trainer.states import TrainerFn
from lightning.pytorch.utilities.exceptions import SIGTERMException
from torchdata.stateful_dataloader import StatefulDataLoader

from ..platform.paths import LAST_CHECKPOINT, RunLayout
from ..platform.private_apis import restart_train_iterator


def rng_states() -> dict[str, Any]:
    """Every global RNG state, as tensors and plain types (`weights_only` loading accepts them)."""
    state = np.random.get_state(legacy=True)
    assert isinstance(state, tuple)  # legacy: the tuple form (numpy's stubs also allow a dict)
    _, keys, position, has_gauss, cached_gaussian = state
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
        # One tensor, not a list of 625 ints: torch's weights-only unpickler reads a list
        # item by item in Python, which made reading a checkpoint (compare) ~2x slower.
        "python": {
            "version": version,
            "state": torch.tensor(python_state, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
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
    state = python["state"]  # a list in checkpoints written before it was a tensor
    words = state.tolist() if isinstance(state, torch.Tensor) else state
    random.setstate((python["version"], tuple(words), python["gauss_next"]))


class ResumeState(L.Callback):
    """Saves the global RNG states and the train loaders' states in each checkpoint.

    Both are put back in `on_train_start`, after the resumed process has built its loaders
    and run its sanity check, and before the first batch is drawn, so the first resumed
    step sees what the uninterrupted run saw after that checkpoint. Lightning restores the
    loader states itself only mid-epoch, and not at all when `configure_optimizers` reads
    `trainer.estimated_stepping_batches` (as a warmup schedule does): that builds and
    iterates the train loader before the checkpoint is loaded (Lightning issue #20550).
    So this callback loads them into every loader that has `load_state_dict`, then starts
    the epoch's iterator again from them, whatever Lightning did.
    """

    def __init__(self) -> None:
        self._trainer: L.Trainer | None = None
        self._to_restore: dict[str, Any] | None = None
        self._next_epoch: _NextEpoch | None = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def state_dict(self) -> dict[str, Any]:
        if self._to_restore is not None:
            # Saved between loading a checkpoint and `on_train_start` (a second Ctrl-C while
            # the resumed run sets up): the loaded states are the run's; the current ones
            # are not yet.
            return self._to_restore
        loaders = _stateful(_train_loaders(self._trainer)) if self._trainer else []
        return {
            "rng": rng_states(),
            "loaders": [loader.state_dict() for loader in loaders],
            "generators": [_generator_states(loader) for loader in loaders],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._to_restore = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._to_restore is None:
            return
        stateful = _stateful(_train_loaders(trainer))
        states = self._to_restore.get("loaders", [])
        generators = self._to_restore.get("generators", [])
        epoch_done = _epoch_done(trainer)
        for loader, state in zip(stateful, states, strict=False):
            loader.load_state_dict(state)
            if isinstance(loader, StatefulDataLoader) and epoch_done:
                for _ in loader:  # saved at the epoch's end: step past it, so the next
                    pass  # iteration is the next epoch, in the order the saved RNG gives
        if epoch_done:  # the next iterator made starts the next epoch
            _set_generator_states(stateful, generators)
            self._next_epoch = _NextEpoch(trainer.current_epoch, trainer.global_step, generators)
        if states:
            # The fit loop's iterator was made before these states were loaded: make it
            # again (what Lightning's own fix for #20550 does).
            restart_train_iterator(trainer)
        if not epoch_done:  # that iterator replayed the epoch up to the saved position
            _set_generator_states(stateful, generators)
        set_rng_states(self._to_restore["rng"])  # last: starting workers draws from it
        self._to_restore = None

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        """Undo the draws of a next-epoch iterator that Lightning made anew instead of using.

        Resumed from the end of an epoch, the iterator `on_train_start` makes is the next
        epoch's, and Lightning trains on it, unless the saved epoch was still unfinished (a
        validation cut short, run again first): then Lightning makes its own when the next
        epoch starts, and that one must draw from the generators as saved.
        """
        pending = self._next_epoch
        if pending is None or trainer.current_epoch == pending.epoch:
            return
        self._next_epoch = None
        if trainer.global_step == pending.step:  # no batch drawn since: ours went unused
            _set_generator_states(_stateful(_train_loaders(trainer)), pending.generators)


class _NextEpoch(NamedTuple):
    """Where a resume from an epoch's end stood, and the loaders' generators as saved."""

    epoch: int
    step: int
    generators: list[list[torch.Tensor]]


def _generators(loader: Any) -> list[torch.Generator]:
    """The loader's own generator and its sampler's, each once (often one object)."""
    found: list[torch.Generator] = []
    for owner in (loader, getattr(loader, "sampler", None)):
        generator = getattr(owner, "generator", None)
        if isinstance(generator, torch.Generator) and all(generator is not g for g in found):
            found.append(generator)
    return found


def _generator_states(loader: Any) -> list[torch.Tensor]:
    return [generator.get_state() for generator in _generators(loader)]


def _set_generator_states(loaders: list[Any], states: list[list[torch.Tensor]]) -> None:
    """Put the loaders' generators where they stood when the checkpoint was saved.

    torchdata restores a shuffling sampler's generator to where it stood when the epoch's
    iterator was made, then draws the permutation again; but making an iterator also draws
    the base and shared seeds from `DataLoader(generator=...)`, which is often that same
    generator, and those two draws are not replayed. Without this, the next epoch's order
    differs from the uninterrupted run's whenever a loader is given a generator (with
    worker processes too; measured with `num_workers=0`).
    """
    for loader, saved in zip(loaders, states, strict=False):
        generators = _generators(loader)
        if len(generators) == len(saved):
            for generator, state in zip(generators, saved, strict=True):
                generator.set_state(state)


def _train_loaders(trainer: L.Trainer) -> list[Any]:
    loaders = trainer.train_dataloader
    if loaders is None:
        return []
    if isinstance(loaders, dict):
        return list(loaders.values())
    if isinstance(loaders, list | tuple):
        return list(loaders)
    return [loaders]


def _stateful(loaders: list[Any]) -> list[Any]:
    """The loaders that can save and restore their position (Lightning's test, too)."""
    return [
        loader
        for loader in loaders
        if callable(getattr(loader, "state_dict", None))
        and callable(getattr(loader, "load_state_dict", None))
    ]


def _epoch_done(trainer: L.Trainer) -> bool:
    started = trainer.fit_loop.epoch_loop.batch_progress.current.ready
    return started >= trainer.num_training_batches


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
        if trainer.validating:
            _validate_again_on_resume(trainer)
        folder = (
            Path(self.dirpath) if self.dirpath else RunLayout(trainer.default_root_dir).checkpoints
        )
        trainer.save_checkpoint(folder / LAST_CHECKPOINT, weights_only=False)


def _validate_again_on_resume(trainer: L.Trainer) -> None:
    """Record a validation cut short as one that has not finished its first batch.

    Lightning stops a validation after the batch in which SIGTERM arrived (a signal during
    an epoch's last training batch lands there too). Its resume logic then reads the
    counters of a checkpoint saved between batches as "validation done" and skips the rest,
    so that epoch's metrics, its best checkpoint and what they decide are lost. Counters
    that say "one batch started, none processed" are the state from which Lightning
    resumes a validation: it runs it again from the start (validation changes no weight,
    so the metrics are the uninterrupted run's), then goes on training.
    """
    progress = trainer.fit_loop.epoch_loop.val_loop.batch_progress
    progress.reset()
    progress.increment_ready()
    progress.increment_started()
