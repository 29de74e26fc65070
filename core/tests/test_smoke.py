"""Whatever `configs/default.yaml` names (the example, or your own model and data) trains.

The library's other tests run on the modules of `toy.py`; this one runs the project's, for
a few steps, through the same command as `python -m <package> fit`.
"""

import math

from copier_lightning_core import ProjectCLI


def test_the_default_config_fits_a_few_steps_and_validates(tmp_path):
    cli = ProjectCLI(
        args=[
            "fit",
            f"--trainer.default_root_dir={tmp_path / 'run'}",
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.max_steps=3",
            "--trainer.limit_train_batches=3",
            "--trainer.limit_val_batches=2",
            "--trainer.limit_test_batches=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--test_after_fit=false",
        ]
    )
    assert cli.trainer.global_step == 3
    monitor = cli.trainer.checkpoint_callback.monitor
    assert math.isfinite(cli.trainer.callback_metrics[monitor].item()), monitor
    assert (tmp_path / "run" / "checkpoints" / "last.ckpt").is_file()
