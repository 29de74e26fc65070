"""Checkpoints that leave out the frozen weights the config rebuilds (LeaveOutFrozenWeights).

On toy.ToyFrozenBaseRegressor (a frozen first layer built from a seed, a trained head):
the checkpoint holds the head only; a resume is bit-exact against an uninterrupted run;
validate, the test after fit and export put the frozen weights back; a model whose frozen
weights differ from the run's is refused before anything loads.
"""

import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch.strategies import ModelParallelStrategy

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.frozen_weights import LeaveOutFrozenWeights
from copier_lightning_core.checkpoints.left_out import LEFT_OUT
from copier_lightning_core.cli import main
from copier_lightning_core.tools.inspect_ckpt import summarize
from harness import FAST, refusal_of_main

CALLBACK = "copier_lightning_core.callbacks.frozen_weights.LeaveOutFrozenWeights"
TOY = [
    "--model=toy.ToyFrozenBaseRegressor",
    "--data=toy.ToyTabularData",
    "--checkpoint.monitor=val/loss",
    "--checkpoint.mode=min",
    f"--trainer.callbacks+={CALLBACK}",
    "--seed_everything=3",
]
FROZEN = {"net.0.weight", "net.0.bias"}


def fit(root: Path, epochs: int, *extra: str) -> dict:
    args = [*FAST, *TOY, f"--trainer.default_root_dir={root}", f"--trainer.max_epochs={epochs}"]
    assert main(["fit", *args, *extra]) in (0, None)
    return torch.load(root / "checkpoints" / "last.ckpt", weights_only=True)


def trained_state(checkpoint: dict) -> list[torch.Tensor]:
    """Every tensor a resume must restore: weights saved, optimizer state."""
    tensors = list(checkpoint["state_dict"].values())
    for optimizer in checkpoint["optimizer_states"]:
        for state in optimizer["state"].values():
            tensors += [value for value in state.values() if isinstance(value, torch.Tensor)]
    return tensors


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return fit(tmp_path_factory.mktemp("whole"), 2, "--test_after_fit=true")


def test_the_checkpoint_holds_what_trains_and_a_resume_is_bit_exact(uninterrupted, tmp_path):
    assert FROZEN.isdisjoint(uninterrupted["state_dict"]) and uninterrupted["state_dict"]
    assert sorted(uninterrupted[LEFT_OUT]["names"]) == sorted(FROZEN)
    assert summarize(uninterrupted)["left_out_frozen_tensors"] == len(FROZEN)  # inspect-ckpt
    root = tmp_path / "run"
    fit(root, 1, "--test_after_fit=false")
    resumed = fit(root, 2, "--ckpt_path=last", "--test_after_fit=false")
    assert resumed["global_step"] == uninterrupted["global_step"]
    pairs = zip(trained_state(resumed), trained_state(uninterrupted), strict=True)
    assert all(torch.equal(mine, theirs) for mine, theirs in pairs)


def test_validate_and_export_put_the_frozen_weights_back(tmp_path, capsys):
    root = tmp_path / "run"
    fit(root, 1, "--test_after_fit=true")  # the test after fit loads the best checkpoint
    validate = ["validate", *FAST, *TOY, f"--trainer.default_root_dir={root}"]
    assert main([*validate, "--ckpt_path=last"]) in (0, None)
    trust = ["--trust=toy.ToyFrozenBaseRegressor", "--trust=toy.ToyTabularData"]
    last = root / "checkpoints" / "last.ckpt"
    assert main(["export", str(last), "--output", str(tmp_path), "--no-onnx", *trust]) == 0
    from safetensors.torch import load_file

    exported = load_file(tmp_path / "last.safetensors")
    assert set(exported) >= FROZEN  # the deployed weights are whole


def test_a_model_whose_frozen_weights_differ_from_the_runs_is_refused(tmp_path, capsys):
    root = tmp_path / "run"
    fit(root, 1, "--test_after_fit=false")
    validate = ["validate", *FAST, *TOY, f"--trainer.default_root_dir={root}", "--ckpt_path=last"]
    paragraph = refusal_of_main(capsys, *validate, "--model.base_seed=8")  # another base
    assert re.search(r"frozen weights .* other values in them", paragraph)


def test_a_strategy_that_saves_checkpoints_its_own_way_is_refused_at_the_start():
    trainer = SimpleNamespace(strategy=ModelParallelStrategy())
    with pytest.raises(Refusal, match="saves checkpoints its own way"):
        LeaveOutFrozenWeights().setup(trainer, None, "fit")
