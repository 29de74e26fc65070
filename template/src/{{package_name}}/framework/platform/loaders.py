# Managed by the template; local edits are merged on update.
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
"""

import sys
from typing import Any, Literal

import lightning as L
import torch
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.fabric.utilities.data import suggested_max_num_workers
from lightning.pytorch.accelerators import CUDAAccelerator
from lightning.pytorch.utilities import rank_zero_info

MAX_AUTO_WORKERS = 8  # more rarely helps one process, and each worker holds a dataset copy

Auto = Literal["auto"]


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
        if num_workers != "auto":
            num_workers = _typed(
                "num_workers",
                num_workers,
                NonNegativeInt,
                "use 0 (load in the main process), a positive number of worker processes, "
                "or 'auto' to fit the machine.",
            )
        if pin_memory != "auto" and not isinstance(pin_memory, bool):
            raise ValueError(f"pin_memory={pin_memory!r} is not valid: use true, false or 'auto'.")
        if prefetch_factor is not None:
            prefetch_factor = _typed(
                "prefetch_factor",
                prefetch_factor,
                PositiveInt,
                "use a positive number of batches per worker, or leave it unset for torch's "
                "default (2).",
            )
            # The one rule between two arguments, which no type of either can state; the
            # same with num_workers "auto" resolved to 0 is refused in `kwargs`.
            if num_workers == 0:
                raise ValueError(
                    f"prefetch_factor={prefetch_factor} needs worker processes, but "
                    "num_workers=0. Set num_workers to 1 or more (or 'auto'), or leave "
                    "prefetch_factor unset."
                )
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
            pin = _trains_on_cuda(trainer)
        if self.prefetch_factor is not None and workers == 0:  # "auto" resolved to 0 here
            raise ValueError(
                f"prefetch_factor={self.prefetch_factor} needs worker processes, but "
                f"num_workers resolved to 0 (asked: {self.num_workers!r}). Set num_workers "
                "to 1 or more, or leave prefetch_factor unset."
            )
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


# What a restricted type raises for a value it refuses. A name, not a parenthesized tuple
# in the `except`: ruff's formatter drops those parentheses for Python 3.14 (PEP 758), so
# the file would format differently per target version.
REFUSED_BY_TYPE = (TypeError, ValueError)


def _typed(name: str, value: object, kind: type[int], fix: str) -> int:
    """`value` checked by jsonargparse's restricted type `kind` (as a plain int), or a
    ValueError naming it and the fix."""
    try:
        return int(kind(value))  # type: ignore[call-overload]
    except REFUSED_BY_TYPE:
        raise ValueError(f"{name}={value!r} is not valid: {fix}") from None


def _auto_workers(local_processes: int) -> int:
    if sys.platform == "win32":
        return 0
    return min(MAX_AUTO_WORKERS, suggested_max_num_workers(max(1, local_processes)))


def _trains_on_cuda(trainer: L.Trainer | None) -> bool:
    if trainer is None:
        return torch.cuda.is_available()
    return isinstance(trainer.accelerator, CUDAAccelerator)
