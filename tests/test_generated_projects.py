"""Each installable render runs its own test suite with this interpreter.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them. The slow tests (full
trainings, several processes) run on the default render only: they do not depend on
the answers that tell the other renders apart. The loggers do reach most tests (every
fit logs through the configured loggers), so the render with every logger runs all the
fast ones; no test reads the CI or license answers, so the render without CI runs only
the tests of its configuration and commands, after proving that its pyproject installs.
"""

import pytest

from conftest import INSTALLABLE, assert_project_tests_pass

SELECTION = {
    "defaults": [],
    "all_loggers": ["-m", "not slow"],
    "no_ci": [
        "-m",
        "not slow",
        "tests/framework/test_smoke.py",
        "tests/framework/test_cli.py",
        "tests/framework/test_checklist.py",
        "tests/test_model.py",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", INSTALLABLE)
def test_generated_project_passes_its_own_tests(installed, name):
    assert_project_tests_pass(installed(name), *SELECTION[name])
