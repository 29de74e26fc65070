"""Datasets that test_worker_start.py sends to loader workers started from a forkserver.

Here, not in the test file: a started worker imports a dataset's module by its name, and
pytest loads test files by their path (`--import-mode=importlib`), under a name no other
process can import; this folder is on the import path (`pythonpath` in pyproject.toml).
"""

import os

from torch.utils.data import Dataset


class ParentPids(Dataset):
    """Item i: (i, the pid of the process that started the worker reading it)."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> tuple[int, int]:
        return index, os.getppid()


class ArrayRows(Dataset):
    """The rows of an array (NumPy's or a tensor), one per item."""

    def __init__(self, rows) -> None:
        self.rows = rows

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int):
        return self.rows[index]


class WorkerPids(Dataset):
    """Each item: (the pid of the worker reading it, that worker's parent's pid)."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> tuple[int, int]:
        return os.getpid(), os.getppid()
