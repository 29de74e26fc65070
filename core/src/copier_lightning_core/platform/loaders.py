"""DataLoader settings that fit the machine: `num_workers: auto`, pin_memory, prefetching.

A DataModule opts in with two lines; without them nothing changes:

    self.loader_options = LoaderOptions(num_workers, pin_memory, prefetch_factor)  # __init__
    StatefulDataLoader(dataset, batch_size=..., **self.loader_options.kwargs(self.trainer))

`StatefulDataLoader` (torchdata) takes DataLoader's arguments and also saves its position
in checkpoints (see resume.py); `torch.utils.data.DataLoader` accepts the same kwargs.
The arguments' types (jsonargparse's `NonNegativeInt`, `PositiveInt`) are the rules: a
DataModule whose signature uses them, as the example's does, has a bad value refused by
the parser, before anything is built; built in Python, `LoaderOptions` applies the same
types to what it is given.

A DataModule that builds `torch.utils.data.DataLoader` itself needs neither: the library
rebuilds each plain train and validation DataLoader as the equivalent StatefulDataLoader
(`as_stateful`), and names what a resumed run still could not replay (`resume_gaps`)
before training starts (callbacks/loader_hooks.py).
"""

import sys
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.fabric.utilities.data import suggested_max_num_workers
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    IterableDataset,
    RandomSampler,
    SequentialSampler,
)
from torchdata.stateful_dataloader import StatefulDataLoader
from torchdata.stateful_dataloader.sampler import BatchSampler as StatefulBatchSampler
from torchdata.stateful_dataloader.sampler import RandomSampler as StatefulRandomSampler

from .loader_rules import (
    Auto,
    checked_pin_memory,
    checked_prefetch,
    checked_workers,
    pins_memory,
    refuse_prefetch_without_workers,
)

MAX_AUTO_WORKERS = 8  # more rarely helps one process, and each worker holds a dataset copy


class LoaderOptions:
    """The DataLoader arguments a user rarely wants to tune by hand, resolved per machine.

    Args:
        num_workers: worker processes per DataLoader, or "auto": the CPUs this process may
            use (its affinity, not the machine's count) shared among the local training
            processes, one left for the main process, at most `MAX_AUTO_WORKERS`. On Windows
            "auto" means 0: workers are started with "spawn" there, re-importing the
            program for each loader; ask for them explicitly if the data needs them.
        pin_memory: page-locked host batches for faster copies to a CUDA device; "auto"
            turns it on only when training on CUDA (elsewhere it only costs memory).
        prefetch_factor: batches each worker loads ahead (torch's default: 2); only
            meaningful with workers.

    Workers are kept alive between epochs (`persistent_workers`) whenever there are any.
    Each loader gets a `generator` of its own, seeded from the run's seed: without one, a
    loader draws its shuffling and worker seeds from torch's global RNG each time it
    starts an epoch, and a resumed run (which builds and starts its loaders at other
    moments) would hand the model different dropout or augmentation draws.
    """

    def __init__(
        self,
        num_workers: NonNegativeInt | Auto = "auto",
        pin_memory: bool | Auto = "auto",
        prefetch_factor: PositiveInt | None = None,
    ) -> None:
        # What the parser checks for a DataModule typed like this, for callers in Python.
        num_workers = checked_workers(num_workers)
        pin_memory = checked_pin_memory(pin_memory)
        prefetch_factor = checked_prefetch(prefetch_factor)
        if num_workers != "auto":  # "auto" resolved to 0 is refused in `kwargs`
            refuse_prefetch_without_workers(prefetch_factor, num_workers, num_workers)
        self.num_workers: int | Auto = num_workers
        self.pin_memory = pin_memory
        self.prefetch_factor: int | None = prefetch_factor
        self._reported: dict[str, Any] | None = None

    def kwargs(self, trainer: L.Trainer | None = None) -> dict[str, Any]:
        """Keyword arguments for a DataLoader; logged and recorded once (not the generator).

        `trainer` (a DataModule's `self.trainer`) tells how many processes share this
        machine and whether batches go to CUDA; without it, one process is assumed.
        """
        workers = self.num_workers
        if workers == "auto":
            local_processes = trainer.num_devices if trainer is not None else 1
            workers = _auto_workers(local_processes)
        pin = self.pin_memory
        if pin == "auto":
            pin = pins_memory(_device(trainer))
        refuse_prefetch_without_workers(self.prefetch_factor, workers, self.num_workers)
        resolved: dict[str, Any] = {
            "num_workers": workers,
            "pin_memory": pin,
            "persistent_workers": workers > 0,
        }
        if self.prefetch_factor is not None:
            resolved["prefetch_factor"] = self.prefetch_factor
        if resolved != self._reported:
            self._report(resolved, trainer)
        # torch.initial_seed(): the seed `seed_everything` gave the global generator.
        return {**resolved, "generator": torch.Generator().manual_seed(torch.initial_seed())}

    def _report(self, resolved: dict[str, Any], trainer: L.Trainer | None) -> None:
        """Log the resolved values and record them with the run's hyperparameters."""
        self._reported = resolved
        settings = ", ".join(f"{key}={value}" for key, value in resolved.items())
        rank_zero_info(f"DataLoader settings (num_workers asked: {self.num_workers!r}): {settings}")
        for logger in trainer.loggers if trainer is not None else []:
            logger.log_hyperparams({"dataloader": resolved})


def _auto_workers(local_processes: int) -> int:
    if sys.platform == "win32":
        return 0
    return min(MAX_AUTO_WORKERS, suggested_max_num_workers(max(1, local_processes)))


def _device(trainer: L.Trainer | None) -> str:
    """Where the batches go: "cuda", or another kind (without a trainer: CUDA if any)."""
    if trainer is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    return "cuda" if isinstance(trainer.accelerator, CUDAAccelerator) else "other"


# How a DataLoader draws its batches; a subclass that keeps all of these as torch's is a
# DataLoader with other constructor arguments (PyG's sets a collate_fn that makes graph
# batches), fully described by the attributes as_stateful reads.
_HOW_IT_ITERATES = ("__iter__", "__len__", "_get_iterator", "_index_sampler", "_auto_collation")


def rebuildable(loader: Any) -> bool:
    """Whether `loader` is torch's DataLoader, or a subclass that only sets its arguments,
    and so can be rebuilt as a StatefulDataLoader that draws the same batches."""
    kind = type(loader)
    return (
        isinstance(loader, DataLoader)
        and not isinstance(loader, StatefulDataLoader)
        and all(getattr(kind, name) is getattr(DataLoader, name) for name in _HOW_IT_ITERATES)
    )


def class_name(loader: Any) -> str:
    """`torch_geometric.loader.dataloader.DataLoader`: whose DataLoader, not just its name."""
    return f"{type(loader).__module__}.{type(loader).__qualname__}"


def as_stateful(loader: DataLoader[Any]) -> StatefulDataLoader[Any]:
    """`loader`, a rebuildable DataLoader (rebuildable()), rebuilt as torchdata's
    StatefulDataLoader.

    Same dataset, batches (batch_size and drop_last, or its batch_sampler), collate_fn,
    workers (count, worker_init_fn, multiprocessing context, prefetching, persistence),
    pin_memory and timeout; torch's RandomSampler (what `shuffle=True` builds) becomes
    torchdata's, which saves its generator's state with its position, and any other sampler
    is kept (torchdata replays it by skipping the indices already used). A shuffle drawn
    from the loader's own generator comes out in another order than torch's, as
    reproducible (torchdata draws it before the workers' seed, torch after). A loader
    without a `generator` gets one seeded from the run's seed, as `LoaderOptions` gives:
    otherwise making each epoch's iterator draws the shuffling and worker seeds from
    torch's global RNG, and a resumed run (which makes its iterators at other moments)
    hands the model other random draws than the uninterrupted one.
    """
    # torch.initial_seed(): the seed `seed_everything` gave the global generator.
    generator = loader.generator or torch.Generator().manual_seed(torch.initial_seed())
    if loader.batch_size is not None:  # batches made by DataLoader from its sampler
        order = {
            "batch_size": loader.batch_size,
            "drop_last": loader.drop_last,
            **_sampler_args(loader, generator),
        }
    elif loader.batch_sampler is not None:  # the loader's own batch_sampler
        order = {"batch_sampler": loader.batch_sampler}
    else:  # no batching: the sampler's items one by one
        order = {"batch_size": None, **_sampler_args(loader, generator)}
    workers = loader.num_workers
    return StatefulDataLoader(
        loader.dataset,
        **order,
        num_workers=workers,
        collate_fn=loader.collate_fn,
        pin_memory=loader.pin_memory,
        timeout=loader.timeout,
        worker_init_fn=loader.worker_init_fn,
        multiprocessing_context=loader.multiprocessing_context,
        generator=generator,
        prefetch_factor=loader.prefetch_factor if workers else None,
        persistent_workers=loader.persistent_workers,
        pin_memory_device=loader.pin_memory_device,
        in_order=loader.in_order,
    )


def _sampler_args(loader: DataLoader[Any], generator: torch.Generator) -> dict[str, Any]:
    """The StatefulDataLoader arguments that draw the indices `loader.sampler` draws."""
    sampler = loader.sampler
    if isinstance(loader.dataset, IterableDataset) or type(sampler) is SequentialSampler:
        return {}  # the default order
    if type(sampler) is not RandomSampler:
        return {"sampler": sampler}
    default = not sampler.replacement and sampler.num_samples == len(sampler.data_source)
    if default and sampler.generator is loader.generator:  # what `shuffle=True` built
        return {"shuffle": True}  # (Lightning reads `shuffle` to shuffle under DDP too)
    stateful = StatefulRandomSampler(
        sampler.data_source,
        sampler.replacement,
        sampler.num_samples,
        generator=sampler.generator or generator,
    )
    return {"sampler": stateful}


# Lightning's fit loop reads one batch ahead of a loader without a length, to know which
# batch is the epoch's last (lightning/pytorch/loops/fetchers.py, `_PrefetchDataFetcher`).
_PREFETCHED = (
    "its dataset, an IterableDataset ({}) with a saved position but no length: Lightning "
    "reads one batch ahead of training from a loader of unknown length, so the position a "
    "checkpoint saves is one batch past the last one trained, and a resumed run skips that "
    "batch. Give the dataset a `__len__` that is exact for the loader's batches (every "
    "worker's partial batch counted), as ParquetRows has once told its batch size"
)


def _has_length(loader: Any) -> bool:
    try:
        len(loader)
    except (TypeError, NotImplementedError):
        return False
    return True


def resume_gaps(loader: Any) -> list[str]:
    """What keeps a train loader from resuming exactly mid-epoch, each with its fix.

    Empty for a StatefulDataLoader over a map-style Dataset whose order is replayed from a
    saved state: torchdata's samplers, a sampler with `state_dict` / `load_state_dict`, or
    a fixed order (SequentialSampler). Read from the built loader, before the first batch,
    so a run names what it could not replay when it starts, not after a resume.
    """
    name = class_name(loader)
    if not _has_state(loader):
        # Rebuildable yet not rebuilt: a run of several processes (loader_hooks.py).
        why = (
            "left to Lightning's DistributedSampler in a run of several processes: an "
            "epoch boundary resumes exactly"
            if rebuildable(loader)
            else "torch's DataLoader, and a subclass that only sets its arguments such as "
            "PyG's, are rebuilt as one in a one-process fit; this one changes how it iterates"
        )
        return [
            f"the train loader, a {name}, cannot save its position in the epoch, nor "
            f"replay its shuffle: build it as torchdata's `StatefulDataLoader` (same "
            f"arguments as DataLoader; {why})"
        ]
    dataset = getattr(loader, "dataset", None)
    if isinstance(dataset, IterableDataset):
        if _has_state(dataset):
            return [] if _has_length(loader) else [_PREFETCHED.format(type(dataset).__name__)]
        return [
            f"its dataset, an IterableDataset ({type(dataset).__name__}), has no "
            "`state_dict()` / `load_state_dict()`: a resumed run reads the stream again "
            "from its start and skips the items already used, the same items only if every "
            "pass yields them in the same order. Give the dataset both methods (torchdata "
            "saves and restores each worker's copy), or use a map-style Dataset"
        ]
    sampler = _order_source(loader)
    if sampler is None:
        return []
    return [
        f"its sampler, a {type(sampler).__name__}, has no `state_dict()` / "
        "`load_state_dict()`: a resumed run draws its order again and skips the indices "
        "already used, the same order only if it draws nothing random. Give it both "
        "methods, or shuffle with `shuffle=True` and a `generator` (torchdata saves "
        "that sampler's state)"
    ]


def _order_source(loader: Any) -> Any:
    """The sampler whose order a resume cannot replay; None when every one can."""
    sampler = loader.batch_sampler
    if isinstance(sampler, StatefulBatchSampler):  # made by StatefulDataLoader from batch_size
        sampler = loader.sampler
    while not _has_state(sampler):
        fixed = isinstance(sampler, SequentialSampler | Sequence)  # a list of batches, too
        if fixed or isinstance(sampler, StatefulRandomSampler) or sampler is None:
            return None
        if type(sampler) is not BatchSampler:  # torch's groups its sampler's indices
            return sampler
        sampler = sampler.sampler
    return None


def _has_state(thing: Any) -> bool:
    """Whether torchdata saves and restores it (its `Stateful` test)."""
    return callable(getattr(thing, "state_dict", None)) and callable(
        getattr(thing, "load_state_dict", None)
    )
