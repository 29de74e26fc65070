"""What starting loader workers from a forkserver costs, against forking them.

In a run of several processes on a Python whose forked workers can hang as they start
(CPython gh-112275: 3.11.0-3.11.9), the library starts each loader's workers from
multiprocessing's forkserver (platform/worker_start.py); this measures what that costs
one process. Each repeat runs two fresh processes, in alternating order:
one forks its workers, one starts them from the forkserver; each builds a DataLoader
with 2 workers over 4,096 rows held in one tensor, reads its epoch, and does so
`--loaders` times (a loader without persistent workers starts its workers each epoch).
Reported, as ratios forkserver / fork with their spread: the first loader, which for the
forkserver includes starting it (an interpreter importing torch), and each later one.

Usage: python benchmarks/worker_start.py [--repeats 5] [--loaders 20]
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from stats import spread


def epochs(method: str, loaders: int) -> dict[str, float]:
    """Seconds for the first loader's epoch and the median of the later ones."""
    from copier_lightning_core.platform import worker_start

    worker_start.forks_can_hang = lambda: method == "forkserver"  # on any Python
    rows = TensorDataset(torch.randn(4096, 16), torch.randn(4096, 1))
    times = []
    for _ in range(loaders):
        start = time.perf_counter()
        loader = DataLoader(rows, batch_size=64, num_workers=2)
        worker_start.start_workers_safely(loader, processes=2)  # as a DDP rank
        assert (loader.multiprocessing_context is not None) == (method == "forkserver")
        for _ in loader:
            pass
        times.append(time.perf_counter() - start)
    return {"first": times[0], "later": statistics.median(times[1:])}


def measured(method: str, loaders: int) -> dict[str, float]:
    command = [sys.executable, __file__, "--method", method, "--loaders", str(loaders)]
    result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loaders", type=int, default=20)
    parser.add_argument("--method", choices=["fork", "forkserver"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.method:  # one measured process
        print(json.dumps(epochs(args.method, args.loaders)))
        return
    first, later, first_server, fork_times = [], [], [], []
    for repeat in range(args.repeats):
        order = ["fork", "forkserver"] if repeat % 2 == 0 else ["forkserver", "fork"]
        runs = {method: measured(method, args.loaders) for method in order}
        first.append(runs["forkserver"]["first"] / runs["fork"]["first"])
        later.append(runs["forkserver"]["later"] / runs["fork"]["later"])
        first_server.append(runs["forkserver"]["first"])
        fork_times.append(runs["fork"]["later"])
    print(f"Python {sys.version.split()[0]}, 2 workers, {args.loaders} loaders a process")
    print(f"first loader, forkserver / fork: {spread(first, 2)}")
    print(f"each later loader, forkserver / fork: {spread(later, 2)}")
    print(f"first loader from the forkserver, seconds: {spread(first_server, 2)}")
    print(f"a later loader's epoch, forked, seconds: {spread(fork_times, 3)}")


if __name__ == "__main__":  # the forkserver's workers import this module again
    main()
