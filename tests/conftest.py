"""Fixtures that render the template once per answer set and share the results.

Copier renders a local git template from its latest tag unless told `vcs_ref="HEAD"`,
and from committed files only, so the suite renders a throwaway committed copy of this
checkout: what is tested is exactly the working tree.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import copier
import pytest
import torch
from copier_lightning_core.testing import launch
from filelock import FileLock

REPO = Path(__file__).resolve().parents[1]
LIBRARY = REPO / "core"  # copier-lightning-core, installed editable by scripts/venv.sh
LIBRARY_TESTS = LIBRARY / "tests"
sys.path.insert(0, str(REPO / "benchmarks"))
from scaffold import (  # noqa: E402  (the benchmarks' scaffolding, shared with the suite)
    install_editable,
    package_name,
    snapshot_template,
    uninstall,
)

# One torch thread per process of the suite. scripts/test.sh runs a worker per core, and the
# workers start processes of their own (forked commands, DDP ranks, sweep trials): with
# torch's default of a thread per core in each, the threads of one operation spin-wait for
# each other on cores that are all taken. On 2 cores beside 2 busy processes the example's
# accuracy test took 66 s with 2 threads and 27 s with 1 (14 s either way on idle cores).
# The processes the tests start inherit the variable; one given its own count keeps it.
os.environ.setdefault("OMP_NUM_THREADS", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

PYTHON_THIS_MACHINE = f"{sys.version_info.major}.{sys.version_info.minor}"
# The conformance matrix's architectures (transformers, peft, torch_geometric, MONAI), which
# scripts/venv.sh installs into a folder of the virtualenv off the default path: installed
# where every process sees them, transformers adds about 1 s to each `import lightning`.
ZOO = Path(sys.prefix) / "zoo"
# The zoo as path entries: none in a virtualenv without the folder, which has the zoo's
# packages installed where it sees them, or not at all.
ZOO_PATH = [str(ZOO)] if ZOO.is_dir() else []

# One render per answer set, shared by the whole run (every worker of a parallel one). The
# INSTALLABLE renders are installed (--no-deps) into this interpreter and run their own
# test suites.
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


# Tests that a parallel run (`pytest -n`, scripts/test.sh) gives to one worker, one after
# the other: node id prefix -> group. Each module's fixture renders and installs a package
# of its own (or, for the benchmarks, runs them once for all its tests); two workers would
# do it twice, installing and uninstalling the same package in the one virtualenv.
ONE_WORKER = {
    "tests/test_own_model.py::": "own_model",
    "tests/test_conformance.py::": "conformance",
    "tests/test_benchmarks.py::": "benchmarks",
    "tests/test_update.py::test_update_brings_template_fixes_and_keeps_user_edits": "update",
    "tests/test_update.py::test_an_updated_projects_runs_default_resumes_": "update",
    # Two strict mypy runs over torch and Lightning (about 50 s cold each), both for Python
    # 3.10: one after the other, the second reads the first's analysis from mypy_cache.
    "tests/test_conventions.py::test_mypy_is_clean_on_what_it_is_given": "mypy",
    "tests/test_library.py::test_ruff_and_strict_mypy_are_clean_on_the_library": "mypy",
}


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist's scope scheduling, with the scopes of ONE_WORKER: the groups go first
    (the largest first), then every other test on its own, in collection order.

    (Not `--dist loadgroup` with `xdist_group` marks: with pytest 9.2, xdist 3.8 no longer
    sees the marks, pytest-xdist#1386.) Another `--dist` asked for is left to xdist."""
    if config.getvalue("dist") != "load":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class OneWorkerGroups(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            groups = (group for prefix, group in ONE_WORKER.items() if nodeid.startswith(prefix))
            return next(groups, nodeid)

    return OneWorkerGroups(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The slow tests first: a parallel run then ends on short tests, not on one worker busy
    with a long one while the others have nothing left to do."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


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
def shared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this run that every pytest-xdist worker sees (without xdist: the basetemp)."""
    basetemp = tmp_path_factory.getbasetemp()  # a worker's: <the run's basetemp>/popen-gwN
    return basetemp.parent if os.environ.get("PYTEST_XDIST_WORKER") else basetemp


@pytest.fixture(scope="session")
def mypy_cache(shared: Path) -> Path:
    """mypy's cache for this run: the library's check and a render's share it (ONE_WORKER)."""
    return shared / "mypy-cache"


@pytest.fixture(scope="session")
def rendered(template: Path, shared: Path):
    """Lazily render each answer set once per run: `rendered("defaults")` -> project path.

    The workers of a parallel run share the renders: the first to ask renders, under a lock.
    """

    def get(name: str) -> Path:
        folder = shared / "renders" / name
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / "lock"):
            if not (folder / "done").exists():
                shutil.rmtree(folder / "project", ignore_errors=True)  # a render cut short
                render(template, folder / "project", ANSWER_SETS[name])
                (folder / "done").touch()
        return folder / "project"

    return get


@pytest.fixture(scope="session")
def installed(rendered, shared: Path):
    """Install a render into this interpreter (--no-deps, editable); uninstall at the end.

    One install per render and run, shared by the workers of a parallel run: a count of the
    sessions using installs, in `shared`, tells the last one out to uninstall them.
    """
    lock, state_file = FileLock(shared / "installs.lock"), shared / "installs.json"

    def update(change) -> dict:
        with lock:
            state = json.loads(state_file.read_text()) if state_file.exists() else {}
            state.setdefault("sessions", 0)
            state.setdefault("installed", {})
            change(state)
            state_file.write_text(json.dumps(state))
            return state

    def join(state: dict) -> None:
        state["sessions"] += 1

    def leave(state: dict) -> None:
        state["sessions"] -= 1
        if state["sessions"] == 0 and state["installed"]:
            uninstall(*state["installed"].values())
            state["installed"] = {}

    def get(name: str) -> Path:
        project = rendered(name)

        def install(state: dict) -> None:
            if name not in state["installed"]:
                install_editable(project)
                state["installed"][name] = package_name(project)

        update(install)
        return project

    update(join)
    yield get
    update(leave)


def with_zoo(env: dict[str, str]) -> dict[str, str]:
    """`env` with the zoo (ZOO_PATH) first on PYTHONPATH, for processes that build its models."""
    if not ZOO_PATH:
        return env
    return {**env, "PYTHONPATH": os.pathsep.join(filter(None, [*ZOO_PATH, env.get("PYTHONPATH")]))}


def assert_project_tests_pass(project: Path, *pytest_args: str, zoo: bool = False) -> str:
    """Run a generated project's own test suite with this interpreter; it must pass. Its output.

    `zoo`: with the conformance matrix's architectures importable (with_zoo)."""
    env = {**os.environ, "WANDB_MODE": "offline"}
    # Forked, as project_command's commands are: a fresh interpreter would spend about 4 s of
    # CPU importing torch and Lightning before collecting a test, in each of the suite's
    # inner runs (3 to 7 s less each in paired whole-suite runs on 2 cores).
    result = launch.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *pytest_args],
        cwd=project,
        env=with_zoo(env) if zoo else env,
        timeout=None,
    )
    assert result.returncode == 0, what_failed(result.stdout) + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]
    return result.stdout


def what_failed(output: str) -> str:
    """What a failed pytest run printed about its failures: the end of its FAILURES and
    ERRORS sections, then its last lines. Its last lines alone are mostly the warnings
    summary, which hid the inner traceback of a failed library part."""
    sections = re.search(
        r"^=+ (?:FAILURES|ERRORS) =+$.*?(?=^=+ (?:warnings summary|short test summary info) =+$)",
        output,
        re.MULTILINE | re.DOTALL,
    )
    return (sections.group(0)[-8000:] + "\n...\n" if sections else "") + output[-2000:]


def library_tests_pass(project: Path, *pytest_args: str, zoo: bool = False) -> str:
    """Run the library's suite (core/tests) with a generated project as its working folder,
    which is how it finds the project's configs; it must pass. Its output."""
    settings = ["-c", str(LIBRARY / "pyproject.toml"), "--rootdir", str(LIBRARY)]
    return assert_project_tests_pass(project, *settings, *pytest_args, zoo=zoo)


def project_command(project: Path, package: str, *args: str) -> subprocess.CompletedProcess:
    """`python -m <package> ARGS` in a generated project, as its user runs it (wandb offline).

    Forked from an interpreter that imported torch and Lightning once (the library's
    testing.launch), not a fresh one: the same `__main__`, folder, environment and import
    path, without 3.5 s of imports per command. `scripts/demo.sh` starts the example's fit
    in a fresh interpreter, in CI as on a user's machine."""
    return launch.run(
        [sys.executable, "-m", package, *args],
        cwd=project,
        env={**os.environ, "WANDB_MODE": "offline"},
        timeout=600,
    )
