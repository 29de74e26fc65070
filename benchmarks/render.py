"""How long `copier copy` (tasks skipped) and `copier update` take on this template.

The checkout is snapshotted as a git template tagged as a release, then again, with one
change to a template-owned file, as the next release. `copy` renders the first into a fresh
folder; `update` takes a committed project of the first to the second (copier replays the
old version and merges). Each runs as the `copier` command a user types, in a fresh
process. The two tags come after every release that copier.yml's `_migrations` name: what
is timed is an update between two releases of this checkout, and a migration written for
projects of an older release has nothing to do in it.

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

import yaml
from packaging.version import Version

from scaffold import REPO, copier_command, git, snapshot_template

# The second release's change: a line appended to a file the template owns (the project's
# entry point).
CHANGED_FILE = "template/src/{{package_name}}/__main__.py"
CHANGE = "# Changed in the next release (render benchmark).\n"


def releases_after_migrations() -> tuple[str, str]:
    """Two consecutive release tags newer than every `_migrations` version in copier.yml."""
    settings = yaml.safe_load((REPO / "copier.yml").read_text(encoding="utf-8"))
    versions = [Version(entry["version"]) for entry in settings.get("_migrations") or []]
    newest = max(versions, default=Version("0.0.0"))
    return f"v{newest.major}.{newest.minor + 1}.0", f"v{newest.major}.{newest.minor + 2}.0"


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
    first, second = releases_after_migrations()
    template = snapshot_template(workdir / "template", tag=first)
    base = workdir / "base"
    # The project to update: the first release, committed (copier updates clean git
    # projects only).
    subprocess.run(copy_command(template, base, "--vcs-ref", first), check=True)
    git(base, "init", "-q", "-b", "main")
    git(base, "add", "-A")
    git(base, "commit", "-q", "-m", first)
    with open(template / CHANGED_FILE, "a") as handle:
        handle.write(CHANGE)
    git(template, "commit", "-q", "-am", second)
    git(template, "tag", second)

    copy_times, update_times = [], []
    for run in range(repeats):
        copy_times.append(seconds(copy_command(template, workdir / f"copy-{run}")))
        project = workdir / f"update-{run}"
        shutil.copytree(base, project, symlinks=True)
        update = copier_command("update", "--quiet", "--defaults", "--trust")
        update_times.append(seconds(update, cwd=project))
        updated = next((project / "src").glob("*/__main__.py")).read_text()
        if not updated.endswith(CHANGE):
            sys.exit(f"error: copier update did not bring the {second} change into {project}")

    def line(label: str, values: list[float]) -> str:
        runs = " ".join(f"{value:.2f}" for value in values)
        return f"  {label:<36} {statistics.median(values):6.2f}   (runs: {runs})"

    print(f"wall seconds, median of {repeats} runs each, fresh processes")
    print(line("copier copy (tasks skipped)", copy_times))
    print(line(f"copier update {first} -> {second}", update_times))
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
