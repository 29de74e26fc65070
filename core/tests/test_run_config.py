"""What runs is what the config says: every callback and plugin of a run is named in
`fit --print_config`, and each entry the library ships can be removed there."""

from collections import Counter

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint, ModelSummary, ProgressBar
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.profilers import PassThroughProfiler
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from copier_lightning_core import cli
from copier_lightning_core.callbacks.loader_hooks import Watched
from copier_lightning_core.callbacks.monitor import MonitorNotLogged
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.paths import default_config
from harness import FAST, FLAVOURS

# What the Trainer holds without the config's list naming it, and the flag or argument
# that decides it: Lightning's model summary (`trainer.enable_model_summary`; Rich's when
# rich is installed) and the config LightningCLI saves next to the logs (its
# `save_config_callback`, here RunConfigSaver, which needs the parser: no config entry).
OUTSIDE_THE_LIST = (ModelSummary, SaveConfigCallback)
# A short fit with the progress bar and the model summary left at their defaults (on).
FLAGS_LEFT_ON = ("--trainer.enable_progress_bar", "--trainer.enable_model_summary")
SHORT = [
    *(arg for arg in FAST if not arg.startswith(FLAGS_LEFT_ON)),
    *FLAVOURS["tabular"],
    "--trainer.limit_train_batches=2",
    "--trainer.limit_val_batches=1",
    "--test_after_fit=false",
]


def printed_config(capsys, *words: str) -> dict:
    """The `fit` section `fit --print_config` prints for `words`, as parsed YAML."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *words, "--print_config"])
    assert exit_info.value.code == 0
    return yaml.safe_load(capsys.readouterr().out)


def class_name(entry) -> str:
    return (entry["class_path"] if isinstance(entry, dict) else entry).rsplit(".", 1)[-1]


def without(name: str, tmp_path) -> str:
    """`--config` of a file whose `trainer.callbacks` is configs/default.yaml's minus one entry."""
    callbacks = yaml.safe_load(default_config().read_text())["trainer"]["callbacks"]
    kept = [entry for entry in callbacks if class_name(entry) != name]
    assert len(kept) == len(callbacks) - 1, f"{name} is not in configs/default.yaml"
    path = tmp_path / f"without-{name}.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": kept}}))
    return f"--config={path}"


def fit(root, *extra: str) -> ProjectCLI:
    """The short fit into `root`, with `extra` options."""
    return ProjectCLI(args=["fit", *SHORT, f"--trainer.default_root_dir={root}", *extra])


def test_the_trainer_holds_exactly_the_callbacks_plugins_and_profiler_the_config_prints(
    tmp_path, capsys
):
    printed = printed_config(capsys, *SHORT, f"--trainer.default_root_dir={tmp_path}")
    trainer = fit(tmp_path).trainer

    named = Counter(class_name(entry) for entry in printed["trainer"]["callbacks"])
    named["ModelCheckpoint"] += 1  # the `checkpoint:` section
    outside = [c for c in trainer.callbacks if isinstance(c, OUTSIDE_THE_LIST)]
    assert len(outside) == 2  # the summary, the saved config
    held = Counter(type(c).__name__ for c in trainer.callbacks if c not in outside)
    assert held == named
    assert {"MonitoredMetricCheck", "LoaderChecks", "ThrottledProgressBar"} <= set(named)

    assert type(trainer.profiler).__name__ == class_name(printed["trainer"]["profiler"])
    plugins = {class_name(entry) for entry in printed["trainer"]["plugins"]}
    assert plugins == {"AtomicCheckpointIO"}
    assert type(trainer.strategy.checkpoint_io).__name__ in plugins
    # the precision plugin is Lightning's own for `trainer.precision` (32-true here)
    assert type(trainer.strategy.precision_plugin).__name__ == "Precision"


def test_the_best_checkpoints_callback_is_found_by_its_monitor_in_the_configs_order(tmp_path):
    trainer = fit(tmp_path).trainer
    first, second = (c for c in trainer.callbacks if isinstance(c, ModelCheckpoint))
    assert first.monitor is None and second.monitor == "val/loss"  # not reordered
    assert trainer.checkpoint_callback is second
    assert second.best_model_path.startswith(str(tmp_path / "checkpoints"))


def test_a_run_without_the_monitor_check_stops_only_when_modelcheckpoint_does(tmp_path):
    wrong = "--checkpoint.monitor=val_loss"
    with pytest.raises(MonitorNotLogged):  # the entry on: stops after the sanity check
        fit(tmp_path / "a", wrong)
    removed = without("MonitoredMetricCheck", tmp_path)
    with pytest.raises(MisconfigurationException, match="val_loss"):  # after an epoch
        fit(tmp_path / "b", wrong, removed)


def test_a_run_without_loader_checks_trains_on_the_loaders_as_returned(tmp_path):
    assert isinstance(fit(tmp_path / "a").datamodule.train_dataloader, Watched)
    cli_run = fit(tmp_path / "b", without("LoaderChecks", tmp_path))
    assert "train_dataloader" not in vars(cli_run.datamodule)  # the class's own method
    assert cli_run.trainer.global_step == 2


def test_a_run_without_the_throttled_bar_gets_lightnings_bar(tmp_path):
    trainer = fit(tmp_path, without("ThrottledProgressBar", tmp_path)).trainer
    assert type(trainer.progress_bar_callback).__name__ in ("TQDMProgressBar", "RichProgressBar")
    assert trainer.global_step == 2


def test_the_progress_bar_flag_turns_the_configs_bar_off(tmp_path):
    trainer = fit(tmp_path, "--trainer.enable_progress_bar=false").trainer
    assert trainer.progress_bar_callback is None
    assert not any(isinstance(c, ProgressBar) for c in trainer.callbacks)


def test_a_run_without_the_profiler_entry_gets_lightnings_default(tmp_path):
    trainer = fit(tmp_path, "--trainer.profiler=null").trainer
    assert type(trainer.profiler) is PassThroughProfiler
    assert trainer.global_step == 2


def test_a_run_without_the_checkpoint_plugin_saves_through_lightnings_own(tmp_path):
    trainer = fit(tmp_path, "--trainer.plugins=null").trainer
    assert type(trainer.strategy.checkpoint_io) is TorchCheckpointIO
    last = torch.load(tmp_path / "checkpoints" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 2
