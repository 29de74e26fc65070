"""Fixtures that render the template once per answer set and share the results.

Copier renders a local git template from its latest tag unless told `vcs_ref="HEAD"`,
and from committed files only, so the suite renders a throwaway committed copy of this
checkout: what is tested is exactly the working tree.
"""

import os
import subprocess
import sys
from pathlib import Path

import copier
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from scaffold import (  # noqa: E402  (the benchmarks' scaffolding, shared with the suite)
    install_editable,
    package_name,
    snapshot_template,
    uninstall,
)

PYTHON_THIS_MACHINE = f"{sys.version_info.major}.{sys.version_info.minor}"

# One render per answer set, shared by the whole session. `installable` renders are
# installed (--no-deps) into this interpreter and run their own test suites.
ANSWER_SETS = {
    "defaults": {"project_name": "Default Probe"},
    "all_loggers": {
        "project_name": "All Loggers",
        "loggers": ["csv", "tensorboard", "wandb", "mlflow"],
        "license": "Apache-2.0",
    },
    "no_ci": {"project_name": "No CI", "ci": "none", "license": "Proprietary"},
    **{
        f"py{version.replace('.', '')}": {
            "project_name": f"Py {version}",
            "python_version": version,
            "license": "BSD-3-Clause",
        }
        for version in ("3.10", "3.12", "3.13", "3.14")
    },
}
INSTALLABLE = ("defaults", "all_loggers", "no_ci")


@pytest.fixture(scope="session")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return snapshot_template(tmp_path_factory.mktemp("template"))


def render(template: Path, dest: Path, answers: dict, **kwargs) -> Path:
    copier.run_copy(
        str(template),
        str(dest),
        data=answers,
        defaults=True,
        unsafe=True,
        vcs_ref="HEAD",
        quiet=True,
        **kwargs,
    )
    return dest


@pytest.fixture(scope="session")
def rendered(template: Path, tmp_path_factory: pytest.TempPathFactory):
    """Lazily render each answer set once: `rendered("defaults")` -> project path."""
    cache: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in cache:
            dest = tmp_path_factory.mktemp(name) / "project"
            cache[name] = render(template, dest, ANSWER_SETS[name])
        return cache[name]

    return get


@pytest.fixture(scope="session")
def installed(rendered):
    """Install a render into this interpreter (--no-deps, editable); uninstall at the end."""
    done: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in done:
            project = rendered(name)
            install_editable(project)
            done[name] = project
        return done[name]

    yield get
    if done:
        uninstall(*(package_name(project) for project in done.values()))


def assert_project_tests_pass(project: Path, *pytest_args: str) -> str:
    """Run a generated project's own test suite with this interpreter; it must pass. Its output."""
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=project,
        env={**os.environ, "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]
    return result.stdout


def project_command(project: Path, package: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m <package> ARGS` in a generated project, as its user runs it (wandb offline)."""
    return subprocess.run(
        [sys.executable, "-m", package, *args],
        cwd=project,
        env={**os.environ, "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
        timeout=600,
    )
