"""Each installable render runs its own test suite with this interpreter.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them. The slow tests (full
trainings, several processes) run on the default render only: they do not depend on
the answers that tell the other renders apart (loggers, CI, license).
"""

import pytest

from conftest import INSTALLABLE, assert_project_tests_pass


@pytest.mark.slow
@pytest.mark.parametrize("name", INSTALLABLE)
def test_generated_project_passes_its_own_tests(installed, name):
    project = installed(name)
    markers = [] if name == "defaults" else ["-m", "not slow"]
    assert_project_tests_pass(project, *markers)
