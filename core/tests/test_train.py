"""The Trainer commands end to end: fit, resume, validate, test, predict, plain-Python load."""

import csv
import json
import math
import re

import pytest
import torch
from lightning.pytorch.callbacks import ModelCheckpoint

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.monitor import MonitorNotLogged
from copier_lightning_core.cli import main
from harness import PREDICT_SIZES, refusal_of_main
from toy import ToyRegressor, ToySequenceClassifier


def test_fit_writes_everything_under_the_run_root(run):
    cli = run.cli("fit")
    assert (run.checkpoints / "last.ckpt").is_file()
    best = cli.trainer.checkpoint_callback.best_model_path
    assert best.startswith(str(run.checkpoints)) and best.endswith(".ckpt")
    saved_configs = list(run.root.rglob("config.yaml"))
    assert len(saved_configs) == 1
    # test_after_fit tested the best checkpoint
    test_metric = "test_nll" if run.flavour == "sequence" else "test/loss"
    assert math.isfinite(cli.trainer.callback_metrics[test_metric].item())
    every_file = [p for p in run.root.rglob("*") if p.is_file()]
    assert all(run.root in p.parents for p in every_file)


def test_the_summary_after_fit_lists_the_test_metrics_whatever_their_names(denoiser, capsys):
    denoiser.cli("fit")
    out = capsys.readouterr().out
    summary = out[out.index("run root") :]  # after Lightning's own table of test metrics
    assert re.search(r"^best val_snr_db +-?\d", summary, re.MULTILINE)
    assert re.search(r"^test_mse +\d", summary, re.MULTILINE)


def test_resume_with_ckpt_path_last_continues_the_run(fitted):
    steps_one_epoch = torch.load(fitted.checkpoints / "last.ckpt", weights_only=True)["global_step"]
    cli = fitted.cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--test_after_fit=false")
    assert cli.trainer.current_epoch == 2
    assert cli.trainer.global_step == 2 * steps_one_epoch
    # the first run's saved config is kept; the resumed run has its own
    assert len(list(fitted.root.rglob("config*.yaml"))) == 2


def test_validate_from_checkpoint_reproduces_the_validation_loss(fitted):
    last = torch.load(fitted.checkpoints / "last.ckpt", weights_only=True)
    cli = fitted.cli("validate", "--ckpt_path=last")
    monitor = cli.trainer.checkpoint_callback.monitor
    # last.ckpt was written after the only validation, whose score ModelCheckpoint kept
    checkpoint_state = next(
        state for key, state in last["callbacks"].items() if f"'monitor': '{monitor}'" in key
    )
    assert cli.trainer.callback_metrics[monitor].item() == pytest.approx(
        checkpoint_state["current_score"].item(), rel=1e-5
    )


def test_test_with_ckpt_path_best_in_a_fresh_process(fitted):
    cli = fitted.cli("test", "--ckpt_path=best")
    assert cli.trainer.ckpt_path != str(fitted.checkpoints / "last.ckpt")
    assert cli.trainer.ckpt_path.startswith(str(fitted.checkpoints))
    assert {"test/loss", "test_nll"} & set(cli.trainer.callback_metrics)


def test_ckpt_path_best_without_a_run_says_what_to_do(run):
    with pytest.raises(Refusal, match="no best checkpoint"):
        run.cli("test", "--ckpt_path=best")


def test_each_predict_writes_a_new_file_and_any_dataloader(fitted, capsys):
    fitted.cli("predict", "--ckpt_path=last")
    fitted.cli("predict", "--ckpt_path=last", "--dataloader=val_dataloader")
    folder = fitted.root / "predictions"
    assert sorted(p.name for p in folder.iterdir()) == ["predictions-1.pt", "predictions.pt"]
    assert f"Predictions written to {folder / 'predictions-1.pt'}" in capsys.readouterr().out
    first = torch.load(folder / "predictions.pt", weights_only=True)
    second = torch.load(folder / "predictions-1.pt", weights_only=True)
    size = PREDICT_SIZES[fitted.flavour]
    assert first.shape == ((size, 3) if fitted.flavour == "sequence" else (size, 1))
    if fitted.flavour == "tabular":  # its predict_dataloader is the test split, not val
        assert not torch.equal(first, second)


@pytest.mark.parametrize("run", ["tabular"], indirect=True)
def test_predictions_format_on_the_command_line_writes_a_table_for_that_call(fitted):
    fitted.cli("predict", "--ckpt_path=last", "--predictions_format=csv")
    fitted.cli("predict", "--ckpt_path=last")  # the config's format again: pt
    folder = fitted.root / "predictions"
    assert sorted(p.name for p in folder.iterdir()) == ["predictions.csv", "predictions.pt"]
    with (folder / "predictions.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert len(rows) == PREDICT_SIZES["tabular"]
    assert [int(row["index"]) for row in rows] == list(range(len(rows)))


@pytest.mark.parametrize("run", ["tabular"], indirect=True)
def test_predictions_format_without_a_writer_says_how_to_add_it_back(fitted):
    with pytest.raises(Refusal, match="no PredictionWriter in trainer"):
        fitted.cli(
            "predict", "--ckpt_path=last", "--predictions_format=csv", "--trainer.callbacks=[]"
        )
    assert not (fitted.root / "predictions").exists()


@pytest.mark.parametrize("sanity_steps", [2, 0], ids=["sanity-check", "no-sanity-check"])
def test_an_unlogged_monitor_stops_before_training_naming_the_logged_keys(run, sanity_steps):
    sanity = f"--trainer.num_sanity_val_steps={sanity_steps}"
    with pytest.raises(MonitorNotLogged) as error:
        run.cli("fit", "--checkpoint.monitor=val_loss", sanity)
    message = str(error.value)
    logged = "valid_nll" if run.flavour == "sequence" else "val/loss"
    assert "'val_loss'" in message and logged in message
    assert "--checkpoint.monitor <one of them>" in message and "--checkpoint.mode" in message
    assert ("the sanity check" if sanity_steps else "the first validation") in message
    assert "\n" not in message


def test_load_from_checkpoint_in_plain_python(fitted):
    module_class = ToySequenceClassifier if fitted.flavour == "sequence" else ToyRegressor
    model = module_class.load_from_checkpoint(fitted.checkpoints / "last.ckpt", map_location="cpu")
    state = torch.load(fitted.checkpoints / "last.ckpt", weights_only=True)["state_dict"]
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, state[name]), name


def test_checkpoint_loads_with_weights_only(fitted):
    for path in fitted.checkpoints.glob("*.ckpt"):
        checkpoint = torch.load(path, weights_only=True)
        assert {"state_dict", "optimizer_states", "lr_schedulers", "epoch"} <= checkpoint.keys()


def test_only_one_best_model_checkpoint_callback(fitted):
    cli = fitted.cli("validate", "--ckpt_path=last")
    best = [c for c in cli.trainer.callbacks if isinstance(c, ModelCheckpoint) and c.monitor]
    assert len(best) == 1


def test_inspect_ckpt_prints_the_checkpoint_facts(fitted, capsys):
    assert main(["inspect-ckpt", str(fitted.checkpoints / "last.ckpt")]) == 0
    facts = json.loads(capsys.readouterr().out)
    # last.ckpt is rewritten when training ends: one epoch completed
    assert facts["epoch"] == 1 and facts["global_step"] > 0
    assert facts["parameters"] > 0


@pytest.mark.parametrize("content", [b"", b"not a checkpoint at all", None])
def test_inspect_ckpt_refuses_a_bad_file_with_its_name(tmp_path, content, capsys):
    path = tmp_path / "broken.ckpt"
    if content is not None:
        path.write_bytes(content)
    assert "broken.ckpt" in refusal_of_main(capsys, "inspect-ckpt", str(path))


def test_truncated_checkpoint_is_refused_with_its_name(fitted, tmp_path, capsys):
    data = (fitted.checkpoints / "last.ckpt").read_bytes()
    truncated = tmp_path / "truncated.ckpt"
    truncated.write_bytes(data[: len(data) // 2])
    assert "truncated.ckpt" in refusal_of_main(capsys, "inspect-ckpt", str(truncated))
