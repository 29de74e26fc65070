"""Every DataLoader the Trainer takes from your code goes through the library once.

`LoaderChecks`, an entry of `trainer.callbacks` in configs/default.yaml, wraps the
`*_dataloader` methods your DataModule (or LightningModule) defines when the Trainer sets
up, so each loader they return, of any kind (DataLoader, StatefulDataLoader, a subclass;
built with `LoaderOptions` or not), is

- rebuilt, when it is a `torch.utils.data.DataLoader` (or a subclass that only sets its
  arguments, as PyG's does its collate_fn) returned for training or validation in a
  one-process `fit`, as the equivalent torchdata `StatefulDataLoader`
  (loaders.as_stateful), so a run killed mid-epoch resumes exactly where it stopped
  (resume.py); said once in the log (several processes: Lightning's DistributedSampler
  orders each epoch, and an epoch boundary resumes exactly);
- checked (bad_input.check_loader): worker count (with every training process on this
  machine), and a training set with batches;
- given workers that leave SIGTERM / Ctrl-C to the main process (signals.shield_workers),
  started from a forkserver in a run of several processes on a Python whose forked
  workers can hang as they start (worker_start.start_workers_safely);
- for training, read for what a resume could not replay (loaders.resume_gaps: a loader
  subclass, an IterableDataset or a sampler without saved state), named in one warning
  with its fix before the first batch, not discovered after a resume.

Why wrap the methods and not check in a later hook: Lightning starts a loader's workers
right after calling the method (the fit loop's `setup_data` iterates it), with no hook in
between; a callback's `setup` runs before any loader is asked for. And an attribute set
while Lightning calls the method is recorded and set again when Lightning rebuilds the
loader (to add a DistributedSampler), so it survives that.
"""

from typing import Any

import lightning as L
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from lightning.pytorch.utilities.model_helpers import is_overridden
from torch.utils.data import DataLoader, IterableDataset

from ..platform.bad_input import check_loader, refuse_empty_training_set
from ..platform.loaders import as_stateful, class_name, rebuildable, resume_gaps
from ..platform.private_apis import end_loader_recording
from ..platform.signals import shield_workers
from ..platform.worker_start import start_workers_safely

HOOKS = ("train_dataloader", "val_dataloader", "test_dataloader", "predict_dataloader")
# The loaders a fit draws from: a resumed run must replay the train loader's position and
# draw nothing from torch's global RNG that the uninterrupted run did not (a validation
# cut short runs again on resume; a validation loader without a generator draws its seed).
FIT_HOOKS = ("train_dataloader", "val_dataloader")


class LoaderChecks(L.Callback):
    """Checks every loader the run's DataModule and module return, and shields its workers.

    Without this entry in `trainer.callbacks`, loaders are used as returned: no worker
    count or empty-training-set check, and Ctrl-C / SIGTERM reach the workers too.
    """

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        # `datamodule` is set by Lightning's data connector; Trainer does not declare it.
        watch_loaders(trainer.datamodule, pl_module)  # type: ignore[attr-defined]


def watch_loaders(*owners: LightningModule | LightningDataModule | None) -> None:
    """Wrap the loader methods each owner overrides (an instance attribute per method)."""
    for owner in owners:
        if owner is None:
            continue
        base = LightningModule if isinstance(owner, LightningModule) else LightningDataModule
        for hook in HOOKS:
            if is_overridden(hook, owner, base) and not isinstance(getattr(owner, hook), Watched):
                setattr(owner, hook, Watched(owner, hook))


class Watched:
    """`owner.<hook>()`, with every loader it returns checked and its workers shielded.

    A class, not a closure: the owner still pickles (the `ddp_spawn` strategy pickles it).
    `__wrapped__` is the method of the owner's class, which Lightning's `is_overridden`
    follows, so the hook still counts as defined by your class. It is the method the hook
    calls when wrapped: another of the owner's methods set in its place stays in place
    (`predict --dataloader val_dataloader` sets `predict_dataloader` before setup).
    """

    def __init__(self, owner: Any, hook: str) -> None:
        self.owner, self.hook = owner, hook
        current = getattr(owner, hook)
        name = current.__func__.__name__ if getattr(current, "__self__", None) is owner else hook
        self.__wrapped__ = getattr(type(owner), name)
        self._told = False  # the rebuild and what cannot resume exactly: said once a run

    def __call__(self) -> Any:
        try:
            return self._checked_loaders()
        except BaseException:
            # Lightning calls this inside a context that patches every DataLoader class and
            # restores them only when it returns: a refusal here would leave each later
            # loader of this process keeping its iterators and their workers alive.
            end_loader_recording()
            raise

    def _checked_loaders(self) -> Any:
        try:
            loaders = self.__wrapped__(self.owner)
        except ValueError as error:
            # torch's RandomSampler refuses an empty dataset while a shuffled loader is
            # built, with a traceback; it is the mistake check_loader reports for others.
            if self.hook == "train_dataloader" and "num_samples=0" in str(error):
                refuse_empty_training_set(0, "?", "?")
            raise
        rebuilt: list[DataLoader[Any]] = []
        # Only a fit gets the rebuild: `validate` alone has no position to resume (nor
        # anything to say about it). With several processes, Lightning rebuilds a map-style
        # loader around its DistributedSampler, which orders each epoch from its seed and
        # epoch (an epoch boundary resumes exactly); a rebuilt StatefulDataLoader would
        # fast-forward that sampler before Lightning sets its epoch. So there only a loader
        # over an IterableDataset, which Lightning leaves as it is, is rebuilt.
        trainer = _trainer(self.owner)
        world_size = trainer.world_size if trainer is not None else 1
        fitting = trainer is None or trainer.state.fn == "fit"
        if self.hook in FIT_HOOKS and fitting:
            loaders = _replace_plain(loaders, rebuilt, streams_only=world_size > 1)
        rank = trainer.global_rank if trainer is not None else 0  # what workers are seeded with
        processes = trainer.num_devices if trainer is not None else 1  # on this machine
        for loader in _each(loaders):
            check_loader(loader, self.hook, processes)
            shield_workers(loader, rank)
            start_workers_safely(loader, world_size)  # after shield_workers: it pickles that
            tell_batching(loader)
        if not self._told:
            self._told = True
            self._tell(loaders, rebuilt)
        return loaders

    def _tell(self, loaders: Any, rebuilt: list[DataLoader[Any]]) -> None:
        if rebuilt:
            kinds = sorted({class_name(loader) for loader in rebuilt})
            rank_zero_info(
                f"{self.hook}(): {len(rebuilt)} DataLoader(s) ({', '.join(kinds)}) rebuilt as "
                "torchdata's StatefulDataLoader, same arguments (a generator seeded from the "
                "run's seed where none was given), so that a resumed run continues exactly."
            )
        if self.hook != "train_dataloader":
            return
        gaps = [gap for loader in _each(loaders) for gap in resume_gaps(loader)]
        if gaps:
            rank_zero_warn(RESUME_GAPS_SAID + "; ".join(gaps) + ".")


RESUME_GAPS_SAID = (
    "A run resumed from a mid-epoch checkpoint will not be bit-identical to an uninterrupted one: "
)


def resume_gaps_said(output: str) -> str | None:
    """What a run's output (`doctor --try`) said keeps its train loader from resuming
    exactly, or None."""
    for line in output.splitlines():
        said = line.partition(RESUME_GAPS_SAID)[2]
        if said:
            return said
    return None


def tell_batching(loader: Any) -> None:
    """Tell a dataset that splits its rows among the workers itself (an IterableDataset
    with `batched_by`, such as ParquetRows) the loader's batch size, so that each worker
    reads whole batches and the loader's length is exact."""
    batched_by = getattr(loader.dataset, "batched_by", None)
    if callable(batched_by) and loader.batch_size is not None:
        batched_by(loader.batch_size, loader.drop_last)


def _trainer(owner: Any) -> Any:
    """The owner's Trainer; None outside one (your tests). A LightningModule without a
    Trainer raises instead of answering None."""
    try:
        return owner.trainer
    except RuntimeError:
        return None


def _replace_plain(loaders: Any, rebuilt: list[DataLoader[Any]], streams_only: bool) -> Any:
    """`loaders` with each rebuildable DataLoader (torch's, or a subclass that only sets its
    arguments, such as PyG's) rebuilt as a StatefulDataLoader; `streams_only`: only those
    over an IterableDataset."""
    if isinstance(loaders, dict):
        return {k: _replace_plain(v, rebuilt, streams_only) for k, v in loaders.items()}
    if isinstance(loaders, list | tuple):
        items = [_replace_plain(value, rebuilt, streams_only) for value in loaders]
        return type(loaders)(*items) if hasattr(loaders, "_fields") else type(loaders)(items)
    stream = isinstance(getattr(loaders, "dataset", None), IterableDataset)
    if rebuildable(loaders) and (stream or not streams_only):
        rebuilt.append(loaders)
        return as_stateful(loaders)
    return loaders


def _each(loaders: Any) -> list[Any]:
    """The loaders in what a hook returns: one, or a list / tuple / dict of them."""
    if isinstance(loaders, dict):
        return [loader for value in loaders.values() for loader in _each(value)]
    if isinstance(loaders, list | tuple):
        return [loader for value in loaders for loader in _each(value)]
    return [loaders] if hasattr(loaders, "worker_init_fn") else []
