"""Each installable render runs its own test suite with this interpreter: both tiers.

A generated project's plain `pytest` runs the owner's tests and the framework's contract on
the configured model (tests/test_contract.py); `pytest tests/framework` runs the
framework's deep tests. The template's CI runs both, so nothing the deep tier proves goes
unproven because a project's owner runs only the fast tier.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them.

What each render runs, and why (RUNS):

- `defaults` runs everything: its fast tier, and its whole deep tier in parts, each part a
  `pytest` of its own, so that a parallel run (`pytest -n`) runs the parts side by side.
  The last part is the deep tier less the files the others name: a new test file is run
  there without being listed, a renamed one fails its part (pytest finds no such file).
  test_resume.py is a part alone: its in-process resumed fits leave loader workers behind
  (torchdata's iterators, which Lightning's teardown does not shut down), and a garbage
  collection later in the same process waits 10 s for each of them.
- `all_loggers` runs the deep tests where the loggers answer reaches: the files whose tests
  read what the loggers wrote (metrics, hyperparameters, a logger's run continued on
  resume, `compare`) or fit, resume, kill and sweep through every configured logger, with
  `-m "not slow"` (the slow tests do not depend on the answers). Not its fast tier: every
  run of the fast tier sets `--trainer.logger=false`, so it is the same on every render.
- `no_ci` differs from `defaults` only in files no test reads (the CI workflow, the
  license): after proving that its pyproject installs, it runs the tests of its
  configuration and commands.
"""

import subprocess
import sys

import pytest

from conftest import assert_project_tests_pass

DEEP = "tests/framework"
# defaults: the deep tier's parts (files of tests/framework), the slowest first; the
# remaining files are the last part. Each part takes about 1-2 minutes on 2 CPU cores.
DEEP_PARTS = {
    "resume": ["test_resume.py"],
    "sweep": ["test_sweep.py"],
    "presets": ["test_presets.py"],
    "bad_input-sharding": ["test_bad_input.py", "test_sharding.py"],
    "precommit-resolver-export": ["test_precommit.py", "test_resolver.py", "test_export.py"],
    "tune-train-checkpoints-health": [
        "test_tune.py",
        "test_train.py",
        "test_checkpoints.py",
        "test_health.py",
    ],
}
NAMED = [name for names in DEEP_PARTS.values() for name in names]
ALL_LOGGERS = [
    "test_checkpoints.py",
    "test_compare.py",
    "test_health.py",
    "test_private_apis.py",
    "test_resume.py",
    "test_run_folders.py",
    "test_run_root.py",
    "test_signals.py",
    "test_smoke.py",
    "test_sweep.py",
    "test_throughput.py",
    "test_train.py",
]
# id -> (render, the pytest arguments of one run in it, which must pass)
RUNS = {
    "defaults-fast": ("defaults", []),
    **{
        f"defaults-deep-{part}": ("defaults", [f"{DEEP}/{name}" for name in names])
        for part, names in DEEP_PARTS.items()
    },
    "defaults-deep-rest": ("defaults", [DEEP, *(f"--ignore={DEEP}/{name}" for name in NAMED)]),
    "all_loggers-deep": ("all_loggers", ["-m", "not slow", *(f"{DEEP}/{n}" for n in ALL_LOGGERS)]),
    "no_ci": (
        "no_ci",
        [
            "-m",
            "not slow",
            f"{DEEP}/test_smoke.py",
            f"{DEEP}/test_cli.py",
            f"{DEEP}/test_checklist.py",
            "tests/test_model.py",
        ],
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("run", list(RUNS))
def test_generated_project_passes_its_own_tests(installed, run):
    name, selection = RUNS[run]
    assert_project_tests_pass(installed(name), *selection)


def test_plain_pytest_runs_the_owners_tests_and_the_contract_not_the_deep_tier(installed):
    """The fast tier is what `pytest` collects; the deep tier only when asked by path."""

    def collected(*args: str) -> set[str]:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
             *args],
            cwd=installed("defaults"),
            capture_output=True,
            text=True,
        )  # fmt: skip
        return {line.split("::")[0] for line in result.stdout.splitlines() if "::" in line}

    fast = collected()
    assert "tests/test_contract.py" in fast and "tests/test_model.py" in fast
    assert not any(path.startswith("tests/framework/") for path in fast), sorted(fast)
    deep = collected("tests/framework")
    assert "tests/framework/test_resume.py" in deep and "tests/test_contract.py" not in deep
