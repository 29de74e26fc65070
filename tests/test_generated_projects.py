"""Each installable render runs its own test suite with this interpreter.

The renders share this virtualenv (installed with --no-deps): one environment, many
projects, as the generated projects' own CI would run them.
"""

import os
import subprocess
import sys

import pytest
from conftest import INSTALLABLE


@pytest.mark.slow
@pytest.mark.parametrize("name", INSTALLABLE)
def test_generated_project_passes_its_own_tests(installed, name, tmp_path_factory):
    project = installed(name)
    # One pre-commit cache for every render: the hooks' environments are built once.
    shared = tmp_path_factory.getbasetemp() / "pre-commit-home"
    pre_commit_home = os.environ.get("PRE_COMMIT_HOME") or str(shared)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=project,
        env={**os.environ, "WANDB_MODE": "offline", "PRE_COMMIT_HOME": pre_commit_home},
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    assert " passed" in result.stdout.splitlines()[-1]
