"""Manual optimization with several optimizers, on toy.ToyGAN: two optimizers, two
`manual_backward` per batch, the generator's gradient only in the second, no loss returned
by `training_step`, and `trainer.global_step` counting two optimizer steps per batch."""

import logging
import math
import os
import sys
from pathlib import Path

import pytest
from lightning import Trainer

from copier_lightning_core.callbacks.compile import TorchCompile
from copier_lightning_core.callbacks.health import (
    GradientHealth,
    HealthCheckFailed,
    NonFiniteGuard,
)
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing import launch
from harness import FAST, PROJECT
from toy import ToyGAN, ToyPoints

PRESETS = project_root() / "configs" / "presets"
TESTS = Path(__file__).parent

GAN = [
    "--model=toy.ToyGAN",
    "--model.dim=4",
    "--model.latent=4",
    "--model.hidden=16",
    "--model.lr=0.001",
    "--data=toy.ToyPoints",
    "--data.dim=4",
    "--data.num_samples=256",
    "--data.batch_size=32",
    "--data.num_workers=0",
    "--checkpoint.monitor=val_gap",
    "--checkpoint.mode=min",
]


def tiny_trainer(tmp_path, callbacks, **kwargs) -> Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "limit_val_batches": 0,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        **kwargs,
    }
    return Trainer(callbacks=callbacks, **options)


def test_ddp_preset_trains_a_module_with_two_optimizers_on_two_cpu_processes(tmp_path):
    """Each backward uses half the parameters: the preset's strategy turns DDP's search for
    unused parameters on for such a module, and says so once."""
    args = [sys.executable, "-m", PROJECT, "fit", f"--config={PRESETS / 'ddp.yaml'}"]
    args += [*FAST, *GAN, "--trainer.devices=2", "--trainer.logger=false"]
    args += ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
    args += [f"--trainer.default_root_dir={tmp_path}", "--test_after_fit=false"]
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]),
    }
    result = launch.run(args, cwd=project_root(), env=env)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    assert output.count("find_unused_parameters=True, as ToyGAN optimizes manually") == 1, output


class GANWithUnusedHead(ToyGAN):
    def __init__(self) -> None:
        super().__init__()
        self.unused_head = ToyGAN().generator[0]  # in no loss, in no optimizer


def test_unused_parameters_are_judged_over_every_backward_of_the_batch(tmp_path):
    """The generator gets its gradient in the batch's second backward only: not unused."""
    with pytest.warns(UserWarning, match="got no gradient") as warned:
        tiny_trainer(tmp_path, [GradientHealth()], limit_train_batches=2).fit(
            GANWithUnusedHead(), datamodule=ToyPoints()
        )
    (message,) = [str(w.message) for w in warned if "got no gradient" in str(w.message)]
    assert "2 parameter(s)" in message and "unused_head.weight, unused_head.bias." in message
    assert "generator" not in message


class NaNDiscriminatorLossAt(ToyGAN):
    """The GAN, with a NaN discriminator loss at one global step (its first backward)."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.bad_step = bad_step

    def manual_backward(self, loss, *args, **kwargs) -> None:
        if self.global_step == self.bad_step:
            loss = loss * math.nan
        super().manual_backward(loss, *args, **kwargs)


def test_a_nan_loss_under_manual_optimization_is_named_with_its_step_batch_and_value(tmp_path):
    """`training_step` returns no loss; what `manual_backward` received is checked, and the
    generator's finite loss later in the batch does not hide the bad one."""
    guard = NonFiniteGuard(check_every_n_steps=5)
    trainer = tiny_trainer(tmp_path, [guard])
    with pytest.raises(HealthCheckFailed) as failure:
        trainer.fit(NaNDiscriminatorLossAt(bad_step=6), datamodule=ToyPoints())
    message = failure.value.message
    assert "at global step 6 (batch 3 of epoch 0), loss = nan" in message, message
    assert "another process" not in message


def test_the_contract_counts_optimizer_steps_per_batch_and_kills_where_the_run_goes(
    tmp_path, monkeypatch
):
    """The contract run on the GAN: 2 epochs of 4 batches make 16 optimizer steps, and the
    mid-epoch kill pauses at a step the run reaches (6, before batch 3), then resumes exactly."""
    from copier_lightning_core.testing import contract  # what tests/test_contract.py runs

    monkeypatch.setattr(contract, "CUT_SHORT", [*contract.CUT_SHORT, *GAN])
    toys = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", toys)  # the killed run's process imports toy.ToyGAN
    config = contract.every_2_steps_config(tmp_path)
    root = tmp_path / "uninterrupted"
    cli = ProjectCLI(args=contract.fit_args(root, config))
    assert cli.trainer.global_step == 16
    fitted = (cli, root / "checkpoints")
    contract.test_fit_trains_the_configured_model_and_checkpoints_it(fitted)
    killed = tmp_path / "killed"
    killed.mkdir()
    contract.test_a_killed_run_resumes_bit_identical("mid_epoch", fitted, config, killed)


def test_compile_says_once_which_module_it_compiled_and_how(tmp_path, caplog):
    compiled = TorchCompile(submodule="generator", backend="eager")
    with caplog.at_level(logging.INFO):
        tiny_trainer(tmp_path, [compiled], limit_train_batches=2).fit(
            ToyGAN(), datamodule=ToyPoints()
        )
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("TorchCompile")]
    assert said == [
        "TorchCompile: compiled the forward of ToyGAN.generator (Sequential) with mode "
        "default, backend eager, fullgraph false, dynamic auto."
    ]
