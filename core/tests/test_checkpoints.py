"""Checkpoints: provenance, atomic saves, clear load errors, inspect-ckpt, fine-tuning."""

import json
import os
import pickle
import sys
from pathlib import Path

import pytest
import torch

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.finetune import load_matching
from copier_lightning_core.checkpoints import provenance
from copier_lightning_core.checkpoints.checkpoint_io import AtomicCheckpointIO
from copier_lightning_core.cli import main
from copier_lightning_core.tools.export import rebuild
from harness import FAST, FLAVOURS, PROJECT, Run, toy_classes


@pytest.fixture(scope="module", params=list(FLAVOURS))
def trained(request, tmp_path_factory) -> Run:
    """One epoch of fit per flavour, shared by this module's tests (which only read it)."""
    root = tmp_path_factory.mktemp(request.param) / "run"
    args = [*FAST, f"--trainer.default_root_dir={root}", *FLAVOURS[request.param]]
    run = Run(request.param, root, args)
    run.cli("fit", "--test_after_fit=false")
    return run


def load(path: Path) -> dict:
    return torch.load(path, map_location="cpu", weights_only=True)


def test_every_checkpoint_records_what_produced_it(trained):
    for path in trained.checkpoints.glob("*.ckpt"):
        record = load(path)["provenance"]
        assert record["versions"]["torch"] == str(torch.__version__)
        assert record["versions"]["lightning"] and record["versions"]["python"]
        assert record["git"]["available"] in (True, False)
        assert record["seed"] == 1234
        assert "seed_everything: 1234" in record["config"]
        assert record["host"] and record["time"]
        assert record["dataset"] is None  # the toys' DataModules have no fingerprint()


def test_the_logger_hyperparameters_carry_the_same_record(trained):
    hparams = list(trained.root.rglob("hparams.yaml"))
    if not hparams:
        pytest.skip("no file-based logger in this project's default config")
    text = hparams[0].read_text()
    assert "provenance" in text and str(torch.__version__) in text


def test_git_state_without_a_repository_or_without_git(tmp_path, monkeypatch):
    outside = provenance.git_state(tmp_path)
    assert outside["available"] is False and outside["reason"]
    monkeypatch.setenv("PATH", str(tmp_path))  # no git executable anywhere
    assert provenance.git_state(tmp_path) == {"available": False, "reason": "git is not installed"}


def test_loading_a_checkpoint_from_other_code_warns_naming_both(trained, tmp_path):
    checkpoint = load(trained.checkpoints / "last.ckpt")
    checkpoint["provenance"]["git"]["commit"] = "0" * 40
    checkpoint["provenance"]["versions"]["torch"] = "1.0.0"
    other = tmp_path / "other.ckpt"
    torch.save(checkpoint, other)
    with pytest.warns(UserWarning, match="git commit 0{40}; this run has") as warnings:
        trained.cli("validate", f"--ckpt_path={other}")
    assert any(f"torch 1.0.0; this run has {torch.__version__}" in str(w.message) for w in warnings)


def test_a_failed_save_leaves_the_previous_checkpoint_and_no_temporary_file(tmp_path):
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    with pytest.raises(
        (AttributeError, pickle.PicklingError)
    ):  # a lambda cannot be pickled: the write fails midway
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "bad": lambda: None}, path)
    assert torch.equal(load(path)["state_dict"]["w"], torch.ones(3))
    assert sorted(os.listdir(tmp_path)) == [".summary.json", "last.ckpt"]  # the first save's


def test_the_cli_saves_through_the_atomic_writer(trained):
    cli = trained.cli("validate", "--ckpt_path=last")
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)


def test_mismatched_weights_list_the_keys_with_a_hint(trained, tmp_path):
    checkpoint = load(trained.checkpoints / "last.ckpt")
    checkpoint["state_dict"] = {f"_orig_mod.{k}": v for k, v in checkpoint["state_dict"].items()}
    compiled = tmp_path / "compiled.ckpt"
    torch.save(checkpoint, compiled)
    with pytest.raises(Refusal, match=r"compiled\.ckpt do not fit the model") as error:
        trained.cli("validate", f"--ckpt_path={compiled}")
    message = str(error.value)
    assert "Missing in the checkpoint" in message and "Unexpected in the checkpoint" in message
    assert "_orig_mod." in message and "torch.compile" in message


def test_weights_of_another_shape_are_named_before_loading(trained, tmp_path):
    checkpoint = load(trained.checkpoints / "last.ckpt")
    name = next(iter(checkpoint["state_dict"]))
    checkpoint["state_dict"][name] = torch.zeros(99)
    reshaped = tmp_path / "reshaped.ckpt"
    torch.save(checkpoint, reshaped)
    with pytest.raises(Refusal, match=rf"Other shapes \(1\): {name} \(99,\) in the checkpoint"):
        trained.cli("test", f"--ckpt_path={reshaped}")


def test_inspect_ckpt_prints_provenance_and_config(trained, capsys):
    path = str(trained.checkpoints / "last.ckpt")
    assert main(["inspect-ckpt", path]) == 0
    facts = json.loads(capsys.readouterr().out)
    assert facts["provenance"]["versions"]["torch"] == str(torch.__version__)
    assert main(["inspect-ckpt", path, "--config"]) == 0
    assert "seed_everything: 1234" in capsys.readouterr().out


def test_inspect_ckpt_prints_a_recorded_config_with_control_characters_escaped(
    trained, tmp_path, capsys
):
    """A checkpoint is data from elsewhere: its text reached the terminal raw, where ESC
    sequences set the window title, clear the screen or rewrite lines already shown."""
    checkpoint = load(trained.checkpoints / "last.ckpt")
    hostile = "\x1b]0;owned\x07\x1b[2J\rseed_everything: 7\x08\x7f\x9b"
    checkpoint["provenance"]["config"] = f"model:\n\tlr: 0.1\n{hostile}\n"
    path = tmp_path / "hostile.ckpt"
    torch.save(checkpoint, path)
    assert main(["inspect-ckpt", str(path), "--config"]) == 0
    out = capsys.readouterr().out
    assert not any(char in out for char in "\x1b\x07\r\x08\x7f\x9b")
    assert "\\x1b]0;owned\\x07\\x1b[2J\\rseed_everything: 7\\x08\\x7f\\x9b" in out
    assert "model:\n\tlr: 0.1\n" in out  # line breaks and tabs stay as they are


@pytest.mark.parametrize("fmt", ["ckpt", "safetensors"])
def test_init_from_loads_the_weights_and_freezes(trained, tmp_path, fmt):
    source = trained.checkpoints / "last.ckpt"
    weights = load(source)["state_dict"]
    if fmt == "safetensors":
        from safetensors.torch import save_file

        source = tmp_path / "weights.safetensors"
        save_file(weights, source)
    frozen = "embed" if trained.flavour == "sequence" else "net"
    cli = trained.cli(
        "fit",
        f"--trainer.default_root_dir={tmp_path / 'fresh'}",
        "--trainer.limit_train_batches=0",  # set up only: no training step changes the weights
        f"--init_from={source}",
        f"--freeze=[{frozen}]",
        "--test_after_fit=false",
    )
    for name, tensor in cli.model.state_dict().items():
        assert torch.equal(tensor, weights[name]), name
    assert not any(p.requires_grad for p in cli.model.get_submodule(frozen).parameters())


def test_a_network_left_out_of_the_hyperparameters_is_rebuilt_as_it_was_trained(denoiser):
    # ToyDenoiser keeps its required `net` out of its hyperparameters; the run trains it
    # with a flag the config does not have. export and --ckpt_path rebuild that network.
    denoiser.cli("fit", "--model.net.bias=false", "--test_after_fit=false")
    path = denoiser.checkpoints / "last.ckpt"
    checkpoint = load(path)
    assert "net" not in checkpoint["hyper_parameters"]
    module, _ = rebuild(path, checkpoint, trusted=toy_classes("denoiser"))
    assert module.net.bias is None
    torch.testing.assert_close(module.state_dict(), checkpoint["state_dict"])
    cli = denoiser.cli("validate", "--ckpt_path=last")  # the config's net has a bias
    assert cli.model.net.bias is None and "val_snr_db" in cli.trainer.callback_metrics


def test_classes_of_the_recorded_config_are_imported_only_when_trusted(denoiser, tmp_path):
    denoiser.cli("fit", "--test_after_fit=false")
    checkpoint = load(denoiser.checkpoints / "last.ckpt")
    config = checkpoint["provenance"]["config"].replace("torch.nn.Linear", "elsewhere.Net")
    checkpoint["provenance"] = {**checkpoint["provenance"], "config": config}
    path = tmp_path / "foreign.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(Refusal, match=r"elsewhere\.Net"):
        rebuild(path, load(path), trusted=toy_classes("denoiser"))
    # The command line names the network (harness.DENOISER): the recorded one is not read.
    cli = denoiser.cli("validate", f"--ckpt_path={path}")
    assert isinstance(cli.model.net, torch.nn.Linear) and "elsewhere" not in sys.modules


def test_init_from_reports_missing_unexpected_and_mismatched(trained):
    path = trained.checkpoints / "last.ckpt"
    weights = load(path)["state_dict"]
    module, _ = rebuild(path, load(path), trusted=toy_classes(trained.flavour))
    first, second, *_ = weights
    changed = {**weights, "extra.weight": torch.ones(1)}
    del changed[first]
    changed[second] = torch.zeros(99)
    report = load_matching(module, changed)
    assert report["missing"] == [first]
    assert report["unexpected"] == ["extra.weight"]
    assert [entry.split(":")[0] for entry in report["shape_mismatched"]] == [second]
    assert len(report["matched"]) == len(weights) - 2


def test_resuming_continues_the_same_wandb_run(run):
    pytest.importorskip("wandb")  # a project that logs to W&B depends on it
    names = ["CSVLogger", "WandbLogger"]
    loggers = [{"class_path": f"copier_lightning_core.run.loggers.{name}"} for name in names]
    loggers[1]["init_args"] = {"project": PROJECT, "offline": True}
    logger = f"--trainer.logger={json.dumps(loggers)}"
    run.cli("fit", logger, "--test_after_fit=false")
    recorded = load(run.checkpoints / "last.ckpt")["provenance"]["loggers"]["WandbLogger"]
    cli = run.cli(
        "fit", logger, "--trainer.max_epochs=2", "--ckpt_path=last", "--test_after_fit=false"
    )
    versions = [lg.version for lg in cli.trainer.loggers if type(lg).__name__ == "WandbLogger"]
    assert versions == [recorded]
