"""Runs the four benchmarks and writes `benchmarks/RESULTS.md` from what they print.

The file is never edited by hand: it records the machine, the versions, the date and the
commit next to each benchmark's full output, and checks each figure against its target.

Usage: python benchmarks/report.py [--quick] [--output benchmarks/RESULTS.md]
  --quick   one short repetition of each benchmark: checks that they run; the figures
            of such a run are noise, and the file says so.

A full run also counts instructions per training step under valgrind's callgrind
(`overhead.py --instructions`, a few minutes more) when valgrind is installed: a figure
that other work on the machine does not move. Without valgrind those rows say so.
"""

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from scaffold import installed_project

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_OUTPUT = HERE / "RESULTS.md"
# Benchmark -> its arguments in a full run and in a --quick one.
COUNTS_INSTRUCTIONS = ["--instructions"] if shutil.which("valgrind") else []
BENCHMARKS = {
    "overhead": (COUNTS_INSTRUCTIONS, ["--repeats", "1", "--warmup", "2", "--steps", "3"]),
    "startup": ([], ["--repeats", "1", "--warmup", "0"]),
    "render": ([], ["--repeats", "1"]),
    "memory": (
        ["--keep-copy"],
        ["--width", "256", "--layers", "2", "--steps", "2", "--repeats", "1"],
    ),
}
# The benchmarks that measure a rendered project: they share one render (--project), made
# and installed once here. render.py measures the rendering itself.
ON_THE_PROJECT = ("overhead", "startup", "memory")
PACKAGES = (
    "copier-lightning-core",  # the projects' run library: most of what a generated fit adds
    "torch",
    "lightning",
    "torchmetrics",
    "jsonargparse",
    "numpy",
    "copier",
)


@dataclass(frozen=True)
class Figure:
    """One headline number: where it is printed, and the target it is held to."""

    label: str
    benchmark: str
    pattern: str  # its first group is the value
    target: str
    met: Callable[[str], bool]
    optional: bool = False  # printed only when measured (instruction counts: valgrind)

    def read(self, output: str) -> str | None:
        found = re.search(self.pattern, output, re.MULTILINE)
        if not found and not self.optional:
            sys.exit(f"error: {self.benchmark}.py printed no {self.label!r} line:\n{output}")
        return found.group(1) if found else None


FIGURES = (
    Figure(
        "template ratio (generated fit / plain Lightning)",
        "overhead",
        r"^template ratio: ([0-9.]+) ",
        "<= 1.03",
        lambda value: float(value) <= 1.03,
    ),
    Figure(
        "overhead ratio (generated fit / vanilla loop)",
        "overhead",
        r"^overhead ratio: ([0-9.]+) ",
        "<= 1.10",
        lambda value: float(value) <= 1.10,
    ),
    Figure(
        "instruction ratio (generated fit / plain Lightning)",
        "overhead",
        r"^instruction ratio c / b: ([0-9.]+)$",
        "-",
        lambda value: True,
        optional=True,
    ),
    Figure(
        "instruction ratio (generated fit / vanilla loop)",
        "overhead",
        r"^instruction ratio c / a: ([0-9.]+)$",
        "-",
        lambda value: True,
        optional=True,
    ),
    Figure(
        "losses of (a) and (c) equal to 5 decimals",
        "overhead",
        r"losses equal: (yes|no)$",
        "yes",
        lambda value: value == "yes",
    ),
    Figure(
        "startup ratio (fit to first step / import lightning)",
        "startup",
        r"^startup ratio: ([0-9.]+) ",
        "<= 1.5",
        lambda value: float(value) <= 1.5,
    ),
    Figure(
        "copier copy, s",
        "render",
        r"^render: copy ([0-9.]+) s",
        "<= 3",
        lambda value: float(value) <= 3,
    ),
    Figure("copier update, s", "render", r", update ([0-9.]+) s$", "-", lambda value: True),
    Figure(
        "memory ratio (generated fit / plain Lightning, peak RSS)",
        "memory",
        r"^memory ratio: ([0-9.]+) ",
        "<= 1.05",
        lambda value: float(value) <= 1.05,
    ),
    Figure(
        "memory overhead, bytes per parameter",
        "memory",
        r"^memory ratio: .*, (-?[0-9.]+) bytes per parameter$",
        "-",
        lambda value: True,
    ),
)


def run_benchmark(name: str, args: list[str]) -> str:
    command = [sys.executable, str(HERE / f"{name}.py"), *args]
    print("$", " ".join(command), file=sys.stderr, flush=True)
    result = subprocess.run(command, cwd=REPO, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"error: {name}.py failed (exit {result.returncode}):\n{result.stderr[-5000:]}")
    return result.stdout


def machine() -> list[str]:
    cpu = platform.processor() or "unknown"
    memory = "unknown"
    if Path("/proc/cpuinfo").is_file():
        names = re.findall(r"^model name\s*: (.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        cpu = names[0] if names else cpu
        total_kib = re.search(r"^MemTotal:\s+(\d+) kB", Path("/proc/meminfo").read_text(), re.M)
        memory = f"{int(total_kib.group(1)) / 2**20:.1f} GiB" if total_kib else memory
    return [
        f"- CPU: {cpu}, {os.cpu_count()} logical cores visible",
        f"- memory: {memory}",
        f"- OS: {platform.platform()}",
    ]


def versions() -> str:
    def installed(package: str) -> str:
        try:
            return f"{package} {version(package)}"
        except PackageNotFoundError:
            return f"{package} (not installed)"

    return ", ".join([f"Python {platform.python_version()}", *map(installed, PACKAGES)])


def commit(output: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=REPO, capture_output=True, text=True, check=True
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD")
    # An earlier RESULTS.md being rewritten is not a change to what is measured.
    rewritten = os.path.relpath(output.resolve(), REPO)
    changed = [line for line in git("status", "--porcelain").splitlines() if line[3:] != rewritten]
    return f"{head} with uncommitted changes" if changed else head


def load() -> str:
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def write_report(output: Path, quick: bool) -> None:
    started, load_before = datetime.now(UTC), load()
    with (
        tempfile.TemporaryDirectory(prefix="report-") as workdir,
        installed_project(Path(workdir), "Report Bench") as (project, _),
    ):
        outputs = {}
        for name, (full_args, quick_args) in BENCHMARKS.items():
            on_project = ["--project", str(project)] if name in ON_THE_PROJECT else []
            outputs[name] = run_benchmark(
                name, [*(quick_args if quick else full_args), *on_project]
            )
    load_after = load()
    lines = [
        "# Benchmark results",
        "",
        f"Written by `python benchmarks/report.py{' --quick' if quick else ''}`; "
        "do not edit by hand: rerun it.",
    ]
    if quick:
        lines += ["", "**Quick run: one short repetition each. These figures are noise.**"]
    lines += [
        "",
        "## Run",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC",
        f"- template commit: {commit(output)}",
        *machine(),
        f"- load average (1 / 5 / 15 min) before: {load_before}; after: {load_after} "
        "(well above 0 means other work shared the CPU: the figures are noisier)",
        f"- versions: {versions()}",
        "",
        "## Figures",
        "",
        "| figure | value | target | met |",
        "|---|---|---|---|",
    ]
    for figure in FIGURES:
        value = figure.read(outputs[figure.benchmark])
        if value is None:
            lines.append(f"| {figure.label} | not measured (no valgrind, or --quick) | - | - |")
            continue
        met = "yes" if figure.met(value) else "**no**"
        lines.append(f"| {figure.label} | {value} | {figure.target} | {met} |")
    for name, text in outputs.items():
        lines += ["", f"## `python benchmarks/{name}.py`", "", "```text", text.rstrip(), "```"]
    output.write_text("\n".join(lines) + "\n")
    print(f"wrote {output}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="one short repetition each")
    parser.add_argument("--output", type=Path, default=DEFAULT_OUTPUT, help="file to write")
    args = parser.parse_args(argv)
    write_report(args.output, args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
