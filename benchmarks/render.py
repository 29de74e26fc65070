"""How long `copier copy` (tasks skipped) and `copier update` take on this template.

The checkout is snapshotted as a git template tagged v0.1.0, then again, with one change
to a template-owned file, as v0.2.0. `copy` renders v0.1.0 into a fresh folder;
`update` takes a committed v0.1.0 project to v0.2.0 (copier replays the old version and
merges). Each runs as the `copier` command a user types, in a fresh process.

Usage: python benchmarks/render.py [--repeats 5]
"""

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scaffold import copier_command, git, snapshot_template

# The v0.2.0 change: a line appended to a file the template owns.
CHANGED_FILE = "template/src/{{package_name}}/framework/platform/paths.py"
CHANGE = "# Changed in v0.2.0 (render benchmark).\n"


def seconds(command: list[str], cwd: Path | None = None) -> float:
    start = time.perf_counter()
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        sys.exit(f"error: {' '.join(command)} failed:\n{result.stderr[-3000:]}")
    return elapsed


def copy_command(template: Path, dest: Path, *extra: str) -> list[str]:
    return copier_command(
        "copy", "--quiet", "--defaults", "--trust", "--skip-tasks",
        "-d", "project_name=Render Bench", *extra, str(template), str(dest),
    )  # fmt: skip


def measure(workdir: Path, repeats: int) -> int:
    template = snapshot_template(workdir / "template")
    base = workdir / "base"
    # The project to update: v0.1.0, committed (copier updates clean git projects only).
    subprocess.run(copy_command(template, base, "--vcs-ref", "v0.1.0"), check=True)
    git(base, "init", "-q", "-b", "main")
    git(base, "add", "-A")
    git(base, "commit", "-q", "-m", "v0.1.0")
    with open(template / CHANGED_FILE, "a") as handle:
        handle.write(CHANGE)
    git(template, "commit", "-q", "-am", "v0.2.0")
    git(template, "tag", "v0.2.0")

    copy_times, update_times = [], []
    for run in range(repeats):
        copy_times.append(seconds(copy_command(template, workdir / f"copy-{run}")))
        project = workdir / f"update-{run}"
        shutil.copytree(base, project, symlinks=True)
        update = copier_command("update", "--quiet", "--defaults", "--trust")
        update_times.append(seconds(update, cwd=project))
        updated = next((project / "src").glob("*/framework/platform/paths.py")).read_text()
        if not updated.endswith(CHANGE):
            sys.exit(f"error: copier update did not bring the v0.2.0 change into {project}")

    def line(label: str, values: list[float]) -> str:
        runs = " ".join(f"{value:.2f}" for value in values)
        return f"  {label:<36} {statistics.median(values):6.2f}   (runs: {runs})"

    print(f"wall seconds, median of {repeats} runs each, fresh processes")
    print(line("copier copy (tasks skipped)", copy_times))
    print(line("copier update v0.1.0 -> v0.2.0", update_times))
    print(
        f"render: copy {statistics.median(copy_times):.2f} s (target <= 3 s), "
        f"update {statistics.median(update_times):.2f} s"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed runs of each command")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="render-") as tmp:
        return measure(Path(tmp), args.repeats)


if __name__ == "__main__":
    sys.exit(main())
