"""Shared fixtures: each test runs the real CLI on CPU, in its own run root under tmp_path.

Importing harness finds the project the tests run in (harness.PROJECT) or ends pytest with
how to run them.
"""

import os
from pathlib import Path

import pytest

from harness import DENOISER, FAST, FLAVOURS, Run

os.environ.setdefault("WANDB_MODE", "offline")  # never needs an account or the network
os.environ.pop("MLFLOW_TRACKING_URI", None)  # MLflow: each run root's own store, no server


@pytest.fixture(params=list(FLAVOURS))
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Run:
    flavour = request.param
    root = tmp_path / "run"
    args = [*FAST, f"--trainer.default_root_dir={root}", *FLAVOURS[flavour]]
    return Run(flavour, root, args)


@pytest.fixture
def fitted(run: Run) -> Run:
    """A run that has been through one epoch of `fit`."""
    run.cli("fit", "--test_after_fit=false")
    return run


@pytest.fixture
def denoiser(tmp_path: Path) -> Run:
    """A run root for toy.ToyDenoiser (harness.DENOISER), not yet fitted."""
    root = tmp_path / "run"
    return Run("denoiser", root, [*FAST, f"--trainer.default_root_dir={root}", *DENOISER])
