"""How long `python -m <package> compare` takes over thousands of run folders.

Compared with a plain reader of the same files (a fresh `python -c` that imports torch and
PyYAML and, per run, loads last.ckpt weights-only, parses its recorded config with
libyaml's loader and reads metrics.csv and command.txt): the ratio of the medians says
what compare adds to reading what it must read. A project is rendered from this checkout
and installed; one short `fit` makes a run, copied into `--runs` folders, each copy's
recorded config given a value of its own (so each is a row) and one a 5,000-character
value (as a crashed run's message can be): the widest printed line shows the cell width.
Each copy's checkpoint is saved through the library's checkpoint IO, as a run saves it,
so it gets the JSON summary `compare` reads instead of unpickling the checkpoint; the
plain reader unpickles every checkpoint. The two commands alternate, each in a fresh
process.

Usage: python benchmarks/compare.py [--runs 2000] [--repeats 3]
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scaffold import installed_project
from stats import spread

PLAIN_READER = """
import csv, sys, torch, yaml
from pathlib import Path
for root in sorted(p for p in Path(sys.argv[1]).iterdir() if p.is_dir()):
    checkpoint = torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu",
                            weights_only=True, mmap=True)
    yaml.load(checkpoint["provenance"]["config"], Loader=yaml.CSafeLoader)
    for metrics in root.glob("*/version_*/metrics.csv"):
        with metrics.open(newline="") as file:
            list(csv.DictReader(file))
    (root / "command.txt").read_text()
"""


def make_runs(project: Path, package: str, folder: Path, count: int) -> None:
    """One real run, then `count` copies whose recorded configs differ (see the doc)."""
    import torch
    import yaml
    from copier_lightning_core.checkpoints.checkpoint_io import AtomicCheckpointIO

    # Saved as a run saves them (with the summary compare reads), not by torch.save alone.
    save = AtomicCheckpointIO().save_checkpoint
    first = folder.parent / "first"
    fit = [
        sys.executable, "-m", package, "fit", "--trainer.max_epochs=1",
        "--trainer.limit_train_batches=2", "--trainer.limit_val_batches=2",
        "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={first}",
    ]  # fmt: skip
    env = {**os.environ, "WANDB_MODE": "offline"}
    result = subprocess.run(fit, cwd=project, env=env, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: the run to copy failed:\n{result.stderr[-3000:]}")
    checkpoint = torch.load(first / "checkpoints" / "last.ckpt", weights_only=True)
    config = yaml.safe_load(checkpoint["provenance"]["config"])
    for number in range(count):
        root = folder / f"run-{number:04d}"
        shutil.copytree(first, root, ignore=shutil.ignore_patterns("*.ckpt", ".run.lock"))
        config["trainer"]["log_every_n_steps"] = 1 + number
        long = "Traceback (most recent call last):\n" + "  a frame of the stack\n" * 220
        config["trainer"]["max_time"] = long if number == count // 2 else None
        text = yaml.dump(config, Dumper=yaml.CSafeDumper).replace(str(first), str(root))
        checkpoint["provenance"]["config"] = text
        save(checkpoint, root / "checkpoints" / "last.ckpt")


def timed(command: list[str], cwd: Path) -> tuple[float, str]:
    """Wall seconds from launch to exit, and what it printed."""
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(command[:4])} failed:\n{result.stderr[-3000:]}")
    return seconds, result.stdout


def measure(project: Path, package: str, folder: Path, repeats: int) -> int:
    compare = [sys.executable, "-m", package, "compare", str(folder)]
    plain = [sys.executable, "-c", PLAIN_READER, str(folder)]
    timed(compare, project)  # untimed: compiles bytecode, warms the file cache
    compare_times, plain_times, widest = [], [], 0
    for _ in range(repeats):
        seconds, table = timed(compare, project)
        compare_times.append(seconds)
        widest = max(widest, *(len(line) for line in table.splitlines()))
        plain_times.append(timed(plain, project)[0])
    runs = sum(1 for path in folder.iterdir() if path.is_dir())

    def line(label: str, values: list[float]) -> str:
        text = " ".join(f"{value:.2f}" for value in values)
        return f"  {label:<44} {statistics.median(values):6.2f}   (runs: {text})"

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"wall seconds over {runs} run folders, fresh processes, alternating")
    print(line(f"python -m {package} compare (table)", compare_times))
    print(line("plain reader of the same files", plain_times))
    ratios = [c / p for c, p in zip(compare_times, plain_times, strict=True)]
    print(f"ratio compare / plain: {spread(ratios, digits=2)}")
    print(f"widest printed line: {widest} characters; load average (1 min) after {load:.2f}")
    print(f"compare seconds: {statistics.median(compare_times):.2f} ({runs} runs)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=2000, help="run folders to compare")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs of each command")
    args = parser.parse_args(argv)
    if args.runs < 2 or args.repeats < 1:
        parser.error("--runs must be at least 2 and --repeats at least 1")
    with tempfile.TemporaryDirectory(prefix="compare-") as tmp:
        workdir = Path(tmp)
        with installed_project(workdir, "Compare Bench") as (project, package):
            folder = workdir / "runs"
            make_runs(project, package, folder, args.runs)
            return measure(project, package, folder, args.repeats)


if __name__ == "__main__":
    sys.exit(main())
