"""Loader workers of a run of several processes start from a forkserver where a forked
worker can hang before it starts.

On CPython 3.11.0-3.11.9 (and 3.10 before 3.10.15) a process forked while another thread
holds the interpreter's list of threads waits for that lock forever, before any code of
its own runs (CPython gh-112275; fixed by python/cpython#112336 in the releases of
September 2024). The lock is held briefly, by a thread creating or ending its thread
state; a native thread takes it without the GIL each time it enters Python without one of
its own (`PyGILState_Ensure`, pybind11's `gil_scoped_acquire`). A DataLoader forks its
workers from the training process (Linux's default start method), so a worker can hang
as it starts, and its loader waits for it forever. That was seen in runs of several
processes (DDP and FSDP2 on CPU, 2 loader workers: the worker forked for the test loader
after `fit`; every other rank then waits in a collective), whose communication libraries
run native threads beside the training loop, and never in runs of one process, whose
own Python threads take the lock holding the GIL, as the fork does. A busy machine
stretches the holds: on 2 busy cores (Python 3.11.7) a loader with 2 workers made 200
times beside a native thread entering Python hung in 2 runs of 4, at its 33rd and 127th
start. Python 3.14 starts loader workers from a forkserver by default, for reasons of
this kind; `start_workers_safely` does so here for a run of several processes: it gives
each loader multiprocessing's forkserver, a single-threaded process that cannot hold the
lock when it forks. A run of one process keeps the fork, which costs nothing, where a
forkserver imports torch, Lightning and the dataset's code once per process before its
first worker starts (about 5 s here: benchmarks/worker_start.py).

A forkserver's worker gets what it needs (dataset, collate_fn, worker_init_fn) pickled,
where a forked one inherits it: an array the dataset holds is copied into each worker (a
tensor is moved to shared memory once), and what does not pickle cannot go. A loader
whose payload does not pickle, or is large, keeps the fork, and the run says once why,
with the fix; so does every loader of a script run without an `if __name__ == "__main__":`
guard, which each such worker would run again (multiprocessing imports the main module
in it, as "spawn" does). A loader given a `multiprocessing_context`, or a process whose
start method is not fork, is left as it is.
"""

import ast
import functools
import io
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import re
import shutil
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.multiprocessing import get_sharing_strategy

# Pickled bytes copied into each worker (a NumPy array's bytes included) above which a
# loader keeps the fork: 8 workers would hold 512 MiB more than forked ones share.
MAX_PAYLOAD_BYTES = 64 * 2**20
# A forkserver passes a started worker at most this many file descriptors, one for each
# tensor storage its payload holds (torch's "file_descriptor" sharing, Linux's default);
# more, and the worker cannot start ("too many fds"). Half of them leaves room for the
# loader's own queues and events.
MAX_STORAGES_SENT = multiprocessing.forkserver.MAXFDS_TO_SEND
MAX_STORAGES = MAX_STORAGES_SENT // 2
# The module the forkserver imports first: it leaves interrupt signals to the training
# process, and ends with it (forkserver_preload.py).
FORKSERVER_PRELOAD = f"{__package__}.forkserver_preload"
UPGRADE = "Python 3.11.10 or newer (3.10.15 on 3.10) forks them safely"


def forks_can_hang(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """Whether this interpreter has CPython gh-112275 (the releases before its fix)."""
    return version < (3, 10, 15) or (3, 11) <= version < (3, 11, 10)


def start_workers_safely(loader: Any, processes: int) -> None:
    """Give `loader` a forkserver to start its workers from, in a run of several
    `processes` on an interpreter whose forked workers can hang at start (forks_can_hang),
    when its payload can travel; else keep the fork and warn once. A no-op without
    workers, with a context chosen, in a run of one process, or elsewhere."""
    if processes < 2 or not (forks_can_hang() and _forks_its_workers(loader)):
        return
    payload = (loader.dataset, loader.collate_fn, loader.worker_init_fn)
    probe = PayloadProbe.of(payload)
    problem = _unguarded_main() or probe.problem()
    if problem:
        _warn_kept_fork(problem)
        return
    context = multiprocessing.get_context("forkserver")
    # Read once, when the forkserver starts: it imports what unpickling needs, so each
    # worker forked from it starts without importing torch and the dataset's code again.
    context.set_forkserver_preload([FORKSERVER_PRELOAD, "torch", *sorted(probe.modules)])
    loader.multiprocessing_context = context
    _tell_forkserver()


def _forks_its_workers(loader: Any) -> bool:
    if not getattr(loader, "num_workers", 0) or loader.multiprocessing_context is not None:
        return False
    # The first start method listed is the platform's default (multiprocessing's docs).
    method = multiprocessing.get_start_method(allow_none=True)
    return (method or multiprocessing.get_all_start_methods()[0]) == "fork"


class _Counter(io.RawIOBase):
    """A file that keeps only how many bytes were written to it."""

    def __init__(self) -> None:
        self.written = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.written += len(data)
        return len(data)


@dataclass
class PayloadProbe:
    """What pickling a loader's payload for a forkserver worker would cost, found by
    pickling it with each array's bytes counted instead of written (nothing is shared or
    copied)."""

    copied_bytes: int = 0  # pickled into each worker: the pickle, NumPy arrays' bytes
    shared_bytes: int = 0  # tensors' storages, moved to shared memory once
    storages: int = 0  # tensors' storages, each sent to each worker as a file descriptor
    modules: set[str] = field(default_factory=set)  # the modules unpickling imports
    error: str | None = None  # why it does not pickle

    @classmethod
    def of(cls, payload: Any) -> "PayloadProbe":
        probe = cls()
        counter = _Counter()
        try:
            _ProbingPickler(counter, probe).dump(payload)
        except Exception as error:  # any failure to pickle (objects raise what they like)
            # Without objects' addresses: the same reason reads the same for each loader
            # (said once: _warn_kept_fork), and an address tells a reader nothing.
            probe.error = re.sub(r" at 0x[0-9a-f]+", "", f"{type(error).__name__}: {error}")
        probe.copied_bytes += counter.written
        return probe

    def problem(self) -> str | None:
        """Why the payload should not go to forkserver workers, or None."""
        if self.error is not None:
            return (
                f"its dataset, collate_fn or worker_init_fn does not pickle ({self.error}); "
                "define functions at a module's top level (not lambdas or nested "
                "functions), and open files or connections in the worker (in "
                "`__getitem__`, or a worker_init_fn) rather than in `__init__`"
            )
        lost = sorted(name for name in self.modules if not _importable(name))
        if lost:
            return (
                f"a started worker could not import {', '.join(lost)}, where its dataset, "
                "collate_fn or worker_init_fn is defined (a module loaded by its path, as "
                "pytest's importlib mode loads test files, is not importable by its name); "
                "define them in a module on the import path"
            )
        if self.copied_bytes > MAX_PAYLOAD_BYTES:
            return (
                f"its dataset would be copied into each worker ({_mib(self.copied_bytes)}, "
                "NumPy arrays included); hold large arrays as torch tensors (shared "
                "once) or read them from files in `__getitem__`"
            )
        if self.storages > MAX_STORAGES and _sharing_strategy() == "file_descriptor":
            return (
                f"its dataset holds {self.storages} tensors, and each would be sent to each "
                f"worker as a file descriptor (multiprocessing sends at most "
                f"{MAX_STORAGES_SENT}); hold the rows as slices of a few large tensors"
            )
        free = _free_shared_memory()
        if free is not None and self.shared_bytes > free // 2:
            return (
                f"its tensors ({_mib(self.shared_bytes)}) would move to shared memory "
                f"(/dev/shm, {_mib(free)} free); give the container more (`--shm-size`)"
            )
        return None


class _ProbingPickler(pickle.Pickler):
    """A pickler that counts arrays' bytes and notes the modules named, writing neither."""

    def __init__(self, file: Any, probe: PayloadProbe) -> None:
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.probe = probe
        self._storages: set[int] = set()

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            storage = obj.untyped_storage()
            if storage.data_ptr() not in self._storages:
                self._storages.add(storage.data_ptr())
                self.probe.storages += 1
                self.probe.shared_bytes += 0 if storage.is_shared() else storage.nbytes()
            return (tuple, ())
        numpy = sys.modules.get("numpy")
        if numpy is not None and isinstance(obj, numpy.ndarray) and obj.dtype != object:
            self.probe.copied_bytes += obj.nbytes
            return (tuple, ())
        if isinstance(obj, type | types.FunctionType):
            self._note_module(obj)
        return NotImplemented

    def _note_module(self, obj: type | types.FunctionType) -> None:
        module = getattr(obj, "__module__", None) or "builtins"
        if module == "__main__" and not _main_is_importable():
            # A class or function of a notebook or `python -c`: a worker cannot find it.
            raise pickle.PicklingError(f"{obj.__qualname__} is defined in an interactive session")
        if module not in ("__main__", "builtins"):
            self.probe.modules.add(module)


@functools.cache  # the main module does not change
def _unguarded_main() -> str | None:
    """Why a worker would run the program again, or None: the main module a started
    worker imports (a script, or `python -m` of a module other than a package's
    `__main__`, which multiprocessing skips) runs code outside an `if __name__ ==
    "__main__":` block."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    path = getattr(main, "__file__", None)
    if path is None or name == "__main__" or name.endswith(".__main__"):
        return None
    try:
        with open(path, "rb") as source:
            tree = ast.parse(source.read())
    except (OSError, SyntaxError, ValueError):
        return None  # not Python source (a frozen or compiled entry point): nothing re-run
    if any(_is_main_guard(statement) for statement in tree.body):
        return None
    return (
        f'the program\'s main module ({path}) has no `if __name__ == "__main__":` block, '
        "and each worker would run it again; put the code that trains under one"
    )


def _is_main_guard(statement: ast.stmt) -> bool:
    """`if __name__ == "__main__":`, either way round."""
    test = statement.test if isinstance(statement, ast.If) else None
    if not (isinstance(test, ast.Compare) and len(test.comparators) == 1):
        return False
    sides = {ast.dump(test.left), ast.dump(test.comparators[0])}
    return isinstance(test.ops[0], ast.Eq) and sides == {
        ast.dump(ast.Name(id="__name__", ctx=ast.Load())),
        ast.dump(ast.Constant(value="__main__")),
    }


def _importable(module: str) -> bool:
    """Whether a fresh process with this `sys.path` imports `module` from the file this one
    did: asked of the import system's finders, package by package, since `sys.modules`
    also holds modules that were loaded by their file path."""
    parts = module.split(".")
    spec, path = None, None
    for depth in range(1, len(parts) + 1):
        spec = _find(".".join(parts[:depth]), path)
        if spec is None:
            return False
        path = spec.submodule_search_locations
        if depth < len(parts) and path is None:
            return False
    loaded = getattr(sys.modules.get(module), "__file__", None)
    found = getattr(spec, "origin", None)
    return not (loaded and found and os.path.realpath(loaded) != os.path.realpath(found))


def _find(name: str, path: Any) -> Any:
    """The spec the first finder of `sys.meta_path` gives for `name`, or None."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, path) if find is not None else None
        if spec is not None:
            return spec
    return None


def _main_is_importable() -> bool:
    """Whether a started worker can import `__main__` again (multiprocessing does, by its
    file or its module name)."""
    main = sys.modules.get("__main__")
    return bool(getattr(main, "__file__", None) or getattr(main, "__spec__", None))


def _sharing_strategy() -> str:
    """How torch sends a tensor to another process: "file_descriptor" (Linux's default),
    one descriptor per storage, or "file_system", by name."""
    strategy: str = get_sharing_strategy()  # type: ignore[no-untyped-call]  # torch: untyped
    return strategy


def _free_shared_memory() -> int | None:
    try:
        return shutil.disk_usage("/dev/shm").free
    except OSError:
        return None


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


@functools.cache  # once a process
def _tell_forkserver() -> None:
    rank_zero_info(
        f"DataLoader workers start from a forkserver, not by fork: in a run of several "
        f"processes on Python {_version()} a forked worker can hang forever as it starts "
        f"(CPython gh-112275). {UPGRADE}."
    )


@functools.cache  # once a process for each reason
def _warn_kept_fork(problem: str) -> None:
    rank_zero_warn(
        f"In a run of several processes, Python {_version()} can leave a forked DataLoader "
        "worker hanging forever as it starts, and every rank waiting for it (CPython "
        f"gh-112275). A loader's workers are started from a forkserver instead when it can "
        f"send them their data; this one keeps the fork: {problem}. Or upgrade: {UPGRADE}."
    )


def _version() -> str:
    return ".".join(map(str, sys.version_info[:3]))
