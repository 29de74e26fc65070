"""What the default callbacks assume a batch is: tensors somewhere inside, and a sample count.

A batch may be a tensor; a tuple, list or dict of batches; a dataclass; or any other
object, whose attributes that are tensors (or tuples, lists, dicts, dataclasses of them)
are its parts: torch_geometric's `Batch`, which keeps them behind `to_dict()`, or a
class of your own. The health checks look at every tensor found this way.

Throughput (samples/s) and `tune` count the samples of a batch with a `count_samples`
method of the LightningModule, else of the LightningDataModule, when one defines it:

    def count_samples(self, batch) -> int:
        return batch.num_graphs

It should read sizes only (shapes, ints), never values on the device: it runs every step.
Without it, a batch holds as many samples as its `num_graphs` or `batch_size` int
attribute says (torch_geometric's batches have `num_graphs`), else as the first dimension
of the first tensor found (in order: elements, dict values, fields, attributes); 0 when
nothing is found, and the callback then says once what it does not measure.
"""

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import lightning as L
import torch

SIZE_ATTRIBUTES = ("num_graphs", "batch_size")  # an int a batch object declares its size with
HOOK = "count_samples"


def parts(batch: Any) -> Iterator[tuple[str, Any]]:
    """The named parts of a batch one level down: `[0]`, `['key']` or `.field`.

    Of an object that is no container, only the attributes that can hold tensors, so that
    a reference to a dataset or a module is not walked.
    """
    if isinstance(batch, torch.Tensor | str | bytes):
        return
    if isinstance(batch, Mapping):
        yield from ((f"[{key!r}]", value) for key, value in batch.items())
    elif isinstance(batch, list | tuple):
        yield from ((f"[{index}]", value) for index, value in enumerate(batch))
    elif dataclasses.is_dataclass(batch) and not isinstance(batch, type):
        yield from ((f".{f.name}", getattr(batch, f.name)) for f in dataclasses.fields(batch))
    else:
        to_dict = getattr(batch, "to_dict", None)
        found = to_dict() if callable(to_dict) else getattr(batch, "__dict__", None)
        for key, value in found.items() if isinstance(found, Mapping) else ():
            if _may_hold_tensors(value):
                yield f".{key}", value


def _may_hold_tensors(value: Any) -> bool:
    holders = (torch.Tensor, Mapping, list, tuple)
    return isinstance(value, holders) or dataclasses.is_dataclass(value)


def named_tensors(batch: Any, name: str = "batch") -> Iterator[tuple[str, torch.Tensor]]:
    """Each tensor of a batch, named as it is reached (`batch['x']`, `batch[0]`, `batch.x`)."""
    if isinstance(batch, torch.Tensor):
        yield name, batch
    for suffix, value in parts(batch):
        yield from named_tensors(value, name + suffix)


def default_count(batch: Any) -> int:
    """The samples in a batch as the module docstring says; 0: not found."""
    if isinstance(batch, torch.Tensor):
        return batch.shape[0] if batch.ndim else 1
    for attribute in SIZE_ATTRIBUTES:
        declared = getattr(batch, attribute, None)
        if isinstance(declared, int) and not isinstance(declared, bool) and declared > 0:
            return declared
    for _, value in parts(batch):
        if size := default_count(value):
            return size
    return 0


def sample_counter(
    pl_module: L.LightningModule, datamodule: L.LightningDataModule | None
) -> Callable[[Any], int]:
    """The module's `count_samples`, else the data module's, else `default_count`."""
    for owner in (pl_module, datamodule):
        hook: Callable[[Any], int] | None = getattr(owner, HOOK, None)
        if callable(hook):
            return hook
    return default_count


def uncounted_note(who: str, batch_type: str, skipped: str) -> str:
    """What a callback says, once, when it cannot count a batch's samples."""
    return (
        f"{who}: cannot count the samples in a batch of type {batch_type} (no "
        f"tensor, no int `num_graphs` or `batch_size` attribute), so {skipped}. Define "
        f"`{HOOK}(self, batch) -> int` on the LightningModule or the DataModule to count them."
    )
