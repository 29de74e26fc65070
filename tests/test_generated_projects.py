"""Each installable render runs its own test suite with this interpreter: both tiers.

A generated project's plain `pytest` runs the owner's tests and the framework's contract on
the configured model (tests/test_contract.py); `pytest tests/framework` runs the
framework's deep tests. The template's CI runs both, so nothing the deep tier proves goes
unproven because a project's owner runs only the fast tier.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them. The slow tests (full
trainings, several processes) run on the default render only: they do not depend on
the answers that tell the other renders apart. The loggers do reach most tests (every
fit logs through the configured loggers), so the render with every logger runs all the
fast ones; no test reads the CI or license answers, so the render without CI runs only
the tests of its configuration and commands, after proving that its pyproject installs.
"""

import subprocess
import sys

import pytest

from conftest import INSTALLABLE, assert_project_tests_pass

# render -> the pytest invocations it runs (each must pass)
SELECTION = {
    "defaults": [[], ["tests/framework"]],
    "all_loggers": [["-m", "not slow"], ["-m", "not slow", "tests/framework"]],
    "no_ci": [
        [
            "-m",
            "not slow",
            "tests/framework/test_smoke.py",
            "tests/framework/test_cli.py",
            "tests/framework/test_checklist.py",
            "tests/test_model.py",
        ]
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", INSTALLABLE)
def test_generated_project_passes_its_own_tests(installed, name):
    for selection in SELECTION[name]:
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
