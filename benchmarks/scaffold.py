"""Render a project from this checkout and install it into the running interpreter.

Shared by the benchmarks and the template's test suite (tests/conftest.py).

Copier renders a local git template from its latest tag, and from committed files only,
so the benchmarks (like the test suite) render a throwaway committed copy of the working
tree: what is measured is exactly the checkout, uncommitted edits included.
"""

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "Benchmark",
    "GIT_AUTHOR_EMAIL": "benchmark@example.com",
    "GIT_COMMITTER_NAME": "Benchmark",
    "GIT_COMMITTER_EMAIL": "benchmark@example.com",
}


def git(cwd: Path, *args: str) -> str:
    result = subprocess.run(
        ["git", *args],
        cwd=cwd,
        env={**os.environ, **GIT_IDENTITY},
        capture_output=True,
        text=True,
        check=True,
    )
    return result.stdout


def snapshot_template(dest: Path, tag: str = "v0.1.0") -> Path:
    """Copy the tracked and untracked-but-not-ignored files of this checkout; commit; tag."""
    listed = git(REPO, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            target = dest / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    git(dest, "init", "-q", "-b", "main")
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "snapshot")
    git(dest, "tag", tag)
    return dest


def copier_command(*args: str) -> list[str]:
    """`copier ...` with the copier of this interpreter, whatever is on PATH."""
    return [sys.executable, "-m", "copier", *args]


def render(template: Path, dest: Path, project_name: str) -> Path:
    """`copier copy` with default answers, tasks skipped (no git init: not needed here)."""
    subprocess.run(
        copier_command(
            "copy", "--quiet", "--defaults", "--trust", "--skip-tasks",
            "-d", f"project_name={project_name}", str(template), str(dest),
        ),
        check=True,
    )  # fmt: skip
    return dest


def package_name(project: Path) -> str:
    for line in (project / ".copier-answers.yml").read_text().splitlines():
        key, _, value = line.partition(":")
        if key == "package_name":
            return value.strip().strip("'\"")
    raise ValueError(f"no package_name in {project / '.copier-answers.yml'}")


@contextmanager
def installed_project(workdir: Path, project_name: str) -> Iterator[tuple[Path, str]]:
    """Render this checkout under `workdir`, install it (editable, --no-deps); uninstall after.

    Editable, because the project finds its `configs/` next to its sources. The running
    interpreter sees the package at once: its `src/` is also put on `sys.path`.
    """
    template = snapshot_template(workdir / "template")
    project = render(template, workdir / "project", project_name)
    package = package_name(project)
    install_editable(project)
    sys.path.insert(0, str(project / "src"))
    try:
        yield project, package
    finally:
        sys.path.remove(str(project / "src"))
        uninstall(package)


@contextmanager
def given_or_rendered(
    project: Path | None, workdir: Path, project_name: str
) -> Iterator[tuple[Path, str]]:
    """`project` (a rendered project already installed here) and its package, as it is; or,
    without one, a render of this checkout installed for the time of the `with`
    (installed_project). report.py renders once for the benchmarks it runs."""
    if project is not None:
        yield project, package_name(project)
        return
    with installed_project(workdir, project_name) as rendered:
        yield rendered


def project_argument(parser: argparse.ArgumentParser) -> None:
    """The benchmarks' `--project DIR`: what given_or_rendered takes."""
    parser.add_argument(
        "--project",
        type=Path,
        help="a rendered project installed in this Python (default: render this checkout)",
    )


def install_editable(project: Path) -> None:
    """pip install --no-deps -e: the project joins this interpreter's environment as it is."""
    with environment_lock():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
             "-e", str(project)],
            check=True,
        )  # fmt: skip


def uninstall(*packages: str) -> None:
    with environment_lock():
        subprocess.run(
            [sys.executable, "-m", "pip", "uninstall", "-q", "-y", *packages], check=False
        )


def environment_lock() -> FileLock:
    """One pip at a time in this interpreter's environment: the test suite's parallel
    workers (pytest-xdist) install and uninstall renders in the one virtualenv."""
    key = hashlib.sha256(sys.prefix.encode()).hexdigest()[:16]
    return FileLock(Path(tempfile.gettempdir()) / f"copier-lightning-pip-{key}.lock")
