"""The rules a DataLoader's settings must follow, each written once, with its message.

`LoaderOptions` (loaders.py) applies them to what a DataModule is given; the parse-time
and loader-time checks (bad_input.py), `doctor` (DR003, DR004) and `tune --workers` call
the same functions, so a value is refused with the same paragraph, at the same
threshold, wherever it comes in:

- `checked_workers`, `checked_prefetch`, `checked_pin_memory`: each argument's type and
  range (jsonargparse's `NonNegativeInt` / `PositiveInt`, what the parser checks for a
  DataModule typed with them);
- `refuse_prefetch_without_workers`: prefetching needs worker processes, a rule between
  two arguments that no type of either can state;
- `worker_ceiling`: the machine's limit, DataLoader workers of every training process
  on this machine together at most the CPUs this process may use;
- `pins_memory`: page-locked batches help copies to CUDA only.

Importing this module does not import torch: doctor's static mode imports the checks.
"""

import os
from typing import Literal

from jsonargparse.typing import NonNegativeInt, PositiveInt

Auto = Literal["auto"]

# What a restricted type raises for a value it refuses. A name, not a parenthesized tuple
# in the `except`: ruff's formatter drops those parentheses for Python 3.14 (PEP 758), so
# the file would format differently per target version.
REFUSED_BY_TYPE = (TypeError, ValueError)


def available_cpus() -> int:
    """Cores this process may run on (a SLURM job or `taskset` gets fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def checked_workers(value: object) -> int | Auto:
    """`num_workers` as a count, or "auto"; a ValueError naming the fix otherwise."""
    if value == "auto":
        return "auto"
    fix = (
        "use 0 (load in the main process), a positive number of worker processes, or "
        "'auto' to fit the machine."
    )
    return _typed("num_workers", value, NonNegativeInt, fix)


def checked_prefetch(value: object) -> int | None:
    """`prefetch_factor` as a count, or None (torch's default); a ValueError otherwise."""
    if value is None:
        return None
    fix = "use a positive number of batches per worker, or leave it unset for torch's default (2)."
    return _typed("prefetch_factor", value, PositiveInt, fix)


def checked_pin_memory(value: object) -> bool | Auto:
    """`pin_memory` as true, false or "auto"; a ValueError otherwise."""
    if isinstance(value, bool):
        return value
    if value == "auto":
        return "auto"
    raise ValueError(f"pin_memory={value!r} is not valid: use true, false or 'auto'.")


def refuse_prefetch_without_workers(
    prefetch_factor: int | None, workers: int, asked: object
) -> None:
    """A ValueError when batches are to be prefetched by workers there are none of.

    `asked` is the num_workers given: 0 itself, or "auto" resolved to 0 on this machine.
    """
    if prefetch_factor is None or workers != 0:
        return
    if asked == 0:
        given, more = "num_workers=0", "1 or more (or 'auto')"
    else:
        given, more = f"num_workers resolved to 0 (asked: {asked!r})", "1 or more"
    raise ValueError(
        f"prefetch_factor={prefetch_factor} needs worker processes, but {given}. Set "
        f"num_workers to {more}, or leave prefetch_factor unset."
    )


def worker_ceiling(workers: int, cpus: int, processes: int = 1) -> tuple[str, str] | None:
    """What is wrong and the fix when `workers` per training process exceed the machine.

    Each worker is a process with its own copy of the dataset; `processes` training
    processes on this machine (a DDP run's devices per node) each start their own. At
    parse time the Trainer is not built yet and one process is assumed; the loader-time
    check and doctor know the count. None when the workers fit.
    """
    if workers * processes <= cpus:
        return None
    shared = f" ({workers} in each of {processes} training processes)" if processes > 1 else ""
    problem = (
        f"more DataLoader worker processes than the {cpus} CPUs this process may use{shared}; "
        "each worker is a process with its own copy of the dataset, and too many run the "
        "machine out of memory"
    )
    return problem, f"Use at most {cpus // processes}, or `auto` (fits the machine)."


def pins_memory(device: str) -> bool:
    """Whether batches for `device` ("cuda", "cpu", ...) are worth page-locking: only a
    copy to a CUDA device is faster from pinned memory, elsewhere it only costs memory."""
    return device == "cuda"


def _typed(name: str, value: object, kind: type[int], fix: str) -> int:
    """`value` checked by jsonargparse's restricted type `kind` (as a plain int), or a
    ValueError naming it and the fix."""
    try:
        return int(kind(value))  # type: ignore[call-overload]
    except REFUSED_BY_TYPE:
        raise ValueError(f"{name}={value!r} is not valid: {fix}") from None
