"""worker_start.py: in a run of several processes on a Python whose forked loader workers
can hang as they start (CPython gh-112275), workers start from a forkserver when their data
can travel, and the run says why when it cannot.

Each test makes this interpreter count as affected (`affected` fixture), so the switch is
proven on any Python; the interpreter table itself is tested on its own. That a DDP fit
applies it: test_data_recipes.py's runs on two processes.
"""

import multiprocessing
import os
import signal
import subprocess
import sys
import time
import types
import warnings

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from copier_lightning_core.platform import worker_start
from copier_lightning_core.platform.signals import shield_workers
from copier_lightning_core.platform.worker_start import forks_can_hang, start_workers_safely
from payloads import ArrayRows, ParentPids


@pytest.fixture
def affected(monkeypatch):
    """This interpreter counts as one with gh-112275; each warning is said afresh."""
    monkeypatch.setattr(worker_start, "forks_can_hang", lambda: True)
    worker_start._warn_kept_fork.cache_clear()
    worker_start._unguarded_main.cache_clear()
    yield
    worker_start._warn_kept_fork.cache_clear()
    worker_start._unguarded_main.cache_clear()


def loader(dataset=None, **options) -> DataLoader:
    options.setdefault("num_workers", 2)
    generator = torch.Generator().manual_seed(7)
    return DataLoader(
        dataset or ParentPids(), batch_size=3, shuffle=True, generator=generator, **options
    )


def batches(data: DataLoader) -> list[tuple[list[int], set[int]]]:
    return [(indices.tolist(), set(parents.tolist())) for indices, parents in data]


def kept_fork_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "gh-112275" in str(w.message)]


@pytest.mark.parametrize(
    ("version", "hangs"),
    [
        ((3, 10, 14), True),
        ((3, 10, 15), False),
        ((3, 11, 0), True),
        ((3, 11, 9), True),
        ((3, 11, 10), False),
        ((3, 12, 0), False),
        ((3, 13, 5), False),
    ],
)
def test_the_interpreters_with_the_fork_deadlock_are_those_before_its_fix(version, hangs):
    assert forks_can_hang(version) is hangs


def test_workers_start_from_a_forkserver_not_the_training_process_and_yield_the_same(affected):
    forked, safe = loader(), loader()
    shield_workers(safe, rank=0)  # what loader_hooks.py does first: its worker_init_fn travels too
    start_workers_safely(safe, processes=2)
    assert forked.multiprocessing_context is None
    assert safe.multiprocessing_context.get_start_method() == "forkserver"
    from_fork, from_server = batches(forked), batches(safe)
    assert [order for order, _ in from_server] == [order for order, _ in from_fork]
    # A forked worker's parent is this (multithreaded) process; the forkserver's is not.
    assert set.union(*(parents for _, parents in from_fork)) == {os.getpid()}
    (server,) = set.union(*(parents for _, parents in from_server))
    assert server != os.getpid()
    # A SIGTERM to the process group reaches the forkserver too: it must outlive it, or the
    # run's next loader (and a clean stop's checkpoint) would find its workers gone.
    os.kill(server, signal.SIGTERM)
    time.sleep(0.5)
    os.kill(server, 0)  # still there (raises ProcessLookupError if not)
    again = loader()
    start_workers_safely(again, processes=2)
    assert [order for order, _ in batches(again)] == [order for order, _ in from_fork]


# A training process whose loader's workers started from the forkserver, and are running.
TRAINING = """
import time
from torch.utils.data import DataLoader
from copier_lightning_core.platform import worker_start
from payloads import WorkerPids
worker_start.forks_can_hang = lambda: True
loader = DataLoader(WorkerPids(), batch_size=1, num_workers=2, persistent_workers=True)
worker_start.start_workers_safely(loader, processes=2)
batches = iter(loader)
pids = {(int(worker), int(parent)) for worker, parent in (next(batches) for _ in range(4))}
(server,) = {parent for _, parent in pids}
print(server, *sorted(worker for worker, _ in pids), flush=True)
time.sleep(600)
"""


def running(pid: int) -> bool:
    """Whether `pid` is a live process (a zombie waiting to be reaped is not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_training_process_killed_outright_leaves_neither_forkserver_nor_workers():
    """torch's workers watch their parent, here the forkserver, which lives while they
    do: without forkserver_preload.py's request to end with the training process, both
    would outlive a `kill -9` of it for good."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    training = subprocess.Popen(
        [sys.executable, "-c", TRAINING], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        server, *workers = map(int, training.stdout.readline().split())
        assert len(workers) == 2 and all(map(running, [server, *workers]))
    finally:
        training.kill()
        training.wait()
    deadline = time.monotonic() + 30  # torch's workers look at their parent every 5 s
    while any(map(running, [server, *workers])) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(running, [server, *workers]))


# Module-level lambdas: pickle's error names each by its address; one reason all the same.
TWO_LAMBDAS = (lambda items: items, lambda items: list(items))


def test_a_payload_that_does_not_pickle_keeps_the_fork_said_once_with_the_fix(affected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for collate in TWO_LAMBDAS:
            data = loader(collate_fn=collate)
            start_workers_safely(data, processes=2)
            assert data.multiprocessing_context is None
    (said,) = kept_fork_warnings(caught)
    assert "does not pickle" in said and "<lambda>" in said and " at 0x" not in said
    assert f"Python {'.'.join(map(str, sys.version_info[:3]))}" in said
    assert "3.11.10 or newer" in said


def test_large_arrays_keep_the_fork_numpy_copied_tensors_shared(affected, monkeypatch):
    monkeypatch.setattr(worker_start, "MAX_PAYLOAD_BYTES", 4096)
    small, large = ArrayRows(np.zeros((8, 8))), ArrayRows(np.zeros((8, 1024)))
    assert worker_start.PayloadProbe.of(small).problem() is None
    assert "copied into each worker (0.1 MiB" in worker_start.PayloadProbe.of(large).problem()
    tensors = ArrayRows(torch.zeros(8, 1024))  # counted apart: moved to shared memory once
    probe = worker_start.PayloadProbe.of(tensors)
    assert probe.shared_bytes == 8 * 1024 * 4 and probe.copied_bytes < 4096
    monkeypatch.setattr(worker_start, "_free_shared_memory", lambda: 16 * 1024)
    assert "/dev/shm" in probe.problem()
    # Each storage travels as a file descriptor; a forkserver sends a worker only so many.
    many = worker_start.PayloadProbe.of(ArrayRows(list(torch.zeros(300, 2))))
    assert many.storages == 1  # views of one tensor share its storage
    many = worker_start.PayloadProbe.of(ArrayRows([torch.zeros(2) for _ in range(300)]))
    assert many.storages == 300 and "300 tensors" in many.problem()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = loader(large)
        start_workers_safely(data, processes=2)
    assert data.multiprocessing_context is None and kept_fork_warnings(caught)


def test_the_unpickling_modules_are_what_the_forkserver_imports_first(affected):
    probe = worker_start.PayloadProbe.of((ParentPids(), torch.utils.data.default_collate))
    assert {"payloads", "torch.utils.data._utils.collate"} <= probe.modules
    assert probe.problem() is None


class DefinedInATestFile(ParentPids):
    """Pickled by reference to this module, which pytest loaded by its path."""


def test_a_dataset_from_a_module_no_worker_can_import_keeps_the_fork(affected):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = loader(DefinedInATestFile())
        start_workers_safely(data, processes=2)
    assert data.multiprocessing_context is None
    (said,) = kept_fork_warnings(caught)
    assert f"could not import {__name__}" in said
    assert [order for order, _ in batches(data)]  # and it still loads, forked


@pytest.mark.parametrize(
    ("source", "kept"),
    [
        ("import torch\nfit()\n", True),
        ("def main():\n    fit()\n\nif __name__ == '__main__':\n    main()\n", False),
    ],
)
def test_a_script_without_a_main_guard_keeps_the_fork(
    affected, monkeypatch, tmp_path, source, kept
):
    script = tmp_path / "train.py"
    script.write_text(source)
    main = types.ModuleType("__main__")
    main.__file__ = str(script)
    monkeypatch.setitem(sys.modules, "__main__", main)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        data = loader()
        start_workers_safely(data, processes=2)
    assert (data.multiprocessing_context is None) is kept
    assert bool([said for said in kept_fork_warnings(caught) if "train.py" in said]) is kept


def test_a_chosen_context_one_process_and_an_unaffected_python_are_left_alone(
    affected, monkeypatch
):
    chosen = loader(multiprocessing_context="fork")
    start_workers_safely(chosen, processes=2)
    assert chosen.multiprocessing_context is multiprocessing.get_context("fork")
    no_workers = loader(num_workers=0)
    start_workers_safely(no_workers, processes=2)
    assert no_workers.multiprocessing_context is None
    one_process = loader()  # no communication threads entering Python: the fork is safe
    start_workers_safely(one_process, processes=1)
    assert one_process.multiprocessing_context is None
    monkeypatch.setattr(worker_start, "forks_can_hang", lambda: False)
    fixed = loader()
    start_workers_safely(fixed, processes=2)
    assert fixed.multiprocessing_context is None
