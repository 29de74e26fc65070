"""Each installable render runs its own test suite with this interpreter.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them. The slow tests (full
trainings, several processes) run on the default render only: they do not depend on
the answers that tell the other renders apart (loggers, CI, license).
"""

import os
import subprocess
import sys

import pytest

from conftest import INSTALLABLE


@pytest.mark.slow
@pytest.mark.parametrize("name", INSTALLABLE)
def test_generated_project_passes_its_own_tests(installed, name):
    project = installed(name)
    markers = [] if name == "defaults" else ["-m", "not slow"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *markers],
        cwd=project,
        env={**os.environ, "WANDB_MODE": "offline"},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]
