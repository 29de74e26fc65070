"""How long `python -m <package> fit` takes to its first training step.

Compared with `python -c "import lightning"`, the floor of any Lightning command: the
ratio of the medians says what the CLI, the config, the data module and the callbacks
add before training starts. A project is rendered from this checkout and installed; one
untimed run of each command first generates the example data and compiles the bytecode;
then the two commands alternate, each in a fresh process, from the project's root.
`--warmup 0` skips the untimed runs (report.py's --quick: it checks that the benchmark runs,
its figures are not kept).

Usage: python benchmarks/startup.py [--repeats 5] [--warmup 1] [--project DIR]
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from first_step_probe import MARKER

from scaffold import given_or_rendered, project_argument

HERE = Path(__file__).resolve().parent


def seconds_to(command: list[str], cwd: Path) -> float:
    """Wall seconds from launching `command` to the time it prints after MARKER.

    Both commands report the moment their work is done: the interpreter's teardown
    (~0.7 s once torch is imported) would otherwise count for one and not the other.
    """
    env = {**os.environ, "WANDB_MODE": "offline", "PYTHONPATH": str(HERE)}
    start = time.time()
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    done = re.search(f"{MARKER} ([0-9.]+)", result.stdout)  # may follow a progress bar
    if done and result.returncode == 0:
        return float(done.group(1)) - start
    sys.exit(
        f"error: {' '.join(command)} failed (exit {result.returncode}) before {MARKER!r}:\n"
        f"{result.stderr[-3000:]}"
    )


def measure(project: Path, package: str, workdir: Path, repeats: int, warmup: int) -> int:
    import_lightning = [
        sys.executable, "-c", f"import lightning, time; print({MARKER!r}, time.time())"
    ]  # fmt: skip

    def fit(run: int) -> list[str]:
        return [
            sys.executable, "-m", package, "fit",
            "--trainer.callbacks+=first_step_probe.ExitAfterFirstStep",
            f"--trainer.default_root_dir={workdir / f'run-{run}'}",
        ]  # fmt: skip

    for run in range(-warmup, 0):  # untimed: generates the data, compiles bytecode
        seconds_to(fit(run), project)
        seconds_to(import_lightning, project)
    fit_times, import_times = [], []
    for run in range(repeats):
        fit_times.append(seconds_to(fit(run), project))
        import_times.append(seconds_to(import_lightning, project))

    def line(label: str, values: list[float]) -> str:
        runs = " ".join(f"{value:.2f}" for value in values)
        return f"  {label:<40} {statistics.median(values):6.2f}   (runs: {runs})"

    print(
        f"wall seconds from launch to done (teardown excluded), median of {repeats} runs "
        "each, alternating, fresh processes"
    )
    print(line(f"python -m {package} fit, first step", fit_times))
    print(line('python -c "import lightning"', import_times))
    ratio = statistics.median(fit_times) / statistics.median(import_times)
    print(f"startup ratio: {ratio:.2f} (fit to first step / import lightning)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="untimed runs of each command first")
    project_argument(parser)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    if args.warmup < 0:
        parser.error("--warmup must be at least 0")
    with tempfile.TemporaryDirectory(prefix="startup-") as tmp:
        workdir = Path(tmp)
        with given_or_rendered(args.project, workdir, "Startup Bench") as (project, package):
            return measure(project, package, workdir, args.repeats, args.warmup)


if __name__ == "__main__":
    sys.exit(main())
