"""`tune` recommends the smallest batch near the best throughput, not the largest that fits.

    .venv/bin/python benchmarks/tune_batch_size.py [--repeats 5] [--project PATH]

Renders this checkout with the default answers (or uses `--project`, a rendered project
whose dependencies are installed) and runs `tune` on the library's paced toy
(core/tests/toy.py, `ToyPacedRegressor`): a step of n samples sleeps ceil(n / 32) x 0.1 s,
so samples/s grow up to 32 and stay flat beyond, as on a device whose cores are all busy
from 32 samples on. 2048 samples let tune time 16, 32, 64 and 128. Which size wins depends on timings, so
this is a benchmark and not a test (the template's test holds tune to its rule on the
rates it reports, and the rule's own test checks the choice on given rates). Each run's
rates are measured in that run: 128, the largest, is the baseline the others are divided
by, so a busy machine slows all sizes alike. Prints each run's rates and choice, the
ratios' median and spread, and how often each size was recommended.
"""

import argparse
import logging
import re
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

import yaml
from copier_lightning_core import cli
from copier_lightning_core.platform.project import serve

from scaffold import REPO, installed_project, package_name
from stats import spread

SIZES = (16, 32, 64, 128)
SATURATES_AT = 32
TOLERANCE = 0.1
LIBRARY_TESTS = REPO / "core" / "tests"


def tune_once(fast: list[str], workdir: Path) -> tuple[int, dict[int, float]]:
    """One `tune` on the paced toy: the size it recommends and the samples/s it measured."""
    output = workdir / "tuned.yaml"
    args = [
        "tune", "--min-batch-size=16", "--steps=2", "--workers=", "--lr-steps=0",
        f"--tolerance={TOLERANCE}", f"--output={output}", *fast,
        f"--trainer.default_root_dir={workdir / 'run'}",
        "--model=toy.ToyPacedRegressor", "--model.chunk_seconds=0.1",
        f"--model.saturates_at={SATURATES_AT}", "--data=toy.ToyPacedData",
        "--data.num_samples=2048", "--data.item_seconds=0.0", "--checkpoint.monitor=val/loss",
    ]  # fmt: skip
    if cli.main(args) != 0:
        sys.exit(f"error: tune failed: {' '.join(args)}")
    text = output.read_text()
    chosen = yaml.safe_load(text)["data"]["init_args"]["batch_size"]
    words = " ".join(text.replace("#", " ").split())
    # "16: 155, 32: 310, ...", up to the first word that is no "size: rate" pair
    by_size = re.search(r"samples/s by size: (\d+: \d+(?:, \d+: \d+)*)", words)[1]
    rates = {int(size): float(rate) for size, rate in re.findall(r"(\d+): (\d+)", by_size)}
    return chosen, rates


def measure(project: Path, package: str, repeats: int) -> None:
    sys.path.insert(0, str(project / "src"))  # importable even when not installed
    serve(package)  # the library's CLI (and its tests' harness) read this project's configs
    sys.path.insert(0, str(LIBRARY_TESTS))  # toy, harness (the library's pytest pythonpath)
    fast = __import__("harness").FAST
    runs = []
    for repeat in range(repeats):
        with tempfile.TemporaryDirectory(prefix="tune-bench-") as workdir:
            chosen, rates = tune_once(fast, Path(workdir))
        runs.append((chosen, rates))
        shown = "  ".join(f"{size}: {rates.get(size, 0):5.0f}" for size in SIZES)
        print(f"run {repeat + 1}: samples/s  {shown}   recommended {chosen}")
    complete = [rates for _, rates in runs if all(size in rates for size in SIZES)]
    for size in (16, 32, 64):
        ratios = [rates[size] / rates[128] for rates in complete]
        print(f"rate {size:>3} / rate 128: {spread(ratios)}")
    chosen = Counter(size for size, _ in runs)
    counts = ", ".join(f"{size} in {n}" for size, n in sorted(chosen.items()))
    print(
        f"recommended: {counts} of {repeats} runs (the toy saturates at {SATURATES_AT}; "
        f"the largest tried, 128, in {chosen[128]})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--project", type=Path, help="a rendered project (default: render one)")
    options = parser.parse_args()
    sys.argv = sys.argv[:1]
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    if options.project:
        measure(options.project, package_name(options.project), options.repeats)
        return
    with (
        tempfile.TemporaryDirectory(prefix="tune-bench-") as workdir,
        installed_project(Path(workdir), "Tune Bench") as (project, package),
    ):
        measure(project, package, options.repeats)


if __name__ == "__main__":
    main()
