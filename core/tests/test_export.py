"""`export` on both toys (tensor and dict inputs), its refusals, and `verify-determinism`."""

import copy
import os
from pathlib import Path

import onnxruntime
import pytest
import torch
from safetensors import safe_open

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.finetune import load_matching, read_weights
from copier_lightning_core.cli import main
from copier_lightning_core.tools.determinism import compare_checkpoints
from copier_lightning_core.tools.export import (
    SampleInputs,
    export_onnx,
    export_safetensors,
    onnx_outputs,
    sample_inputs,
)
from harness import FAST, FLAVOURS, toy_classes
from toy import (
    ToyLoRARegressor,
    ToyRegressor,
    ToySequenceClassifier,
    ToySequenceData,
    ToyTiedLM,
)

# flavour -> the ONNX inputs: names and shapes (dim 0 is the dynamic batch)
ONNX_INPUTS = {
    "tabular": {"input_0": ["batch", 8]},  # no example_input_array: a validation batch
    "sequence": {"tokens": ["batch", 12], "mask": ["batch", 12]},  # its dict example
}


@pytest.mark.slow
def test_export_writes_verified_safetensors_and_onnx(fitted, tmp_path, capsys):
    checkpoint = fitted.checkpoints / "last.ckpt"
    trust = [f"--trust={name}" for name in toy_classes(fitted.flavour)]  # toy.py is no package
    assert main(["export", str(checkpoint), "--output", str(tmp_path), *trust]) == 0
    report = capsys.readouterr().out
    assert report.count("max abs diff vs eager") == 2 and "OVER" not in report
    with safe_open(tmp_path / "last.safetensors", "pt") as weights:
        metadata = weights.metadata()
        state = torch.load(checkpoint, weights_only=True)["state_dict"]
        assert set(weights.keys()) == set(state)
    assert "available" in metadata["git"] and metadata["time"]  # provenance as strings
    session = onnxruntime.InferenceSession(str(tmp_path / "last.onnx"))
    inputs = {graph_input.name: graph_input.shape for graph_input in session.get_inputs()}
    assert inputs == ONNX_INPUTS[fitted.flavour]
    if fitted.flavour == "sequence":  # the same check, with a tolerance nothing can meet
        too_tight = ["--output", str(tmp_path), "--tolerance=-1", *trust]
        assert main(["export", str(checkpoint), *too_tight]) == 1
        assert "OVER tolerance" in capsys.readouterr().out


def test_a_peft_module_exports_the_merged_model_and_the_adapters_peft_loads(tmp_path, capsys):
    peft = pytest.importorskip("peft")
    root = tmp_path / "run"
    lora = ["--model=toy.ToyLoRARegressor", "--data=toy.ToyTabularData"]
    main(["fit", *FAST, *lora, f"--trainer.default_root_dir={root}", "--test_after_fit=false"])
    checkpoint = root / "checkpoints" / "last.ckpt"
    trust = ["--trust=toy.ToyLoRARegressor", "--trust=toy.ToyTabularData"]
    assert main(["export", str(checkpoint), "--output", str(tmp_path), "--no-onnx", *trust]) == 0
    report = capsys.readouterr().out
    for written in ("last.safetensors", "last-adapters", "last-merged.safetensors"):
        assert f"{tmp_path / written}  max abs diff vs eager" in report, report
    assert "OVER" not in report
    with safe_open(tmp_path / "last-adapters" / "adapter_model.safetensors", "pt") as file:
        adapter_keys = set(file.keys())
    assert adapter_keys and all("lora_" in key for key in adapter_keys)  # no base weight
    # Loaded as a user of peft loads it, the adapters change what the base model computes.
    model = ToyLoRARegressor()  # the same frozen base (seeded), untrained adapters
    inputs = model.example_input_array
    base = copy.deepcopy(model.net).unload().eval()
    with torch.no_grad():
        without_adapters = base(inputs)
    loaded = peft.PeftModel.from_pretrained(base, str(tmp_path / "last-adapters")).eval()
    trained_model = ToyLoRARegressor().eval()
    trained_model.load_state_dict(torch.load(checkpoint, weights_only=True)["state_dict"])
    with torch.no_grad():
        torch.testing.assert_close(loaded(inputs), trained_model(inputs))
        assert not torch.allclose(without_adapters, loaded(inputs))
    with safe_open(tmp_path / "last-merged.safetensors", "pt") as file:
        merged_keys = set(file.keys())
    assert merged_keys == {"0.weight", "0.bias", "2.weight", "2.bias"}  # plain, no peft
    umask = os.umask(0o022)
    os.umask(umask)
    written = [path for path in tmp_path.rglob("*") if path.is_file()]
    assert {path.stat().st_mode & 0o777 for path in written} == {0o666 & ~umask}


def test_tied_weights_are_written_once_and_tied_again_when_loaded(tmp_path):
    """GPT-2's output layer shares its input embedding's tensor: safetensors refused it."""
    from safetensors.torch import load_model

    model, path = ToyTiedLM(), tmp_path / "tied.safetensors"
    export_safetensors(model, {"provenance": {"seed": 1}}, path)
    loaded = ToyTiedLM()  # other initial weights
    load_model(loaded, path)
    assert loaded.head.weight is loaded.wte.weight
    assert torch.equal(loaded.wte.weight, model.wte.weight)
    report = load_matching(ToyTiedLM(), read_weights(path))  # fit --init_from the file
    assert report["missing"] == [] and report["unexpected"] == []


def test_dynamic_dims_a_module_declares_are_exported_by_name(tmp_path):
    model = ToySequenceClassifier().eval()
    model.export_dynamic_dims = {"tokens": {1: "length"}, "mask": {1: "length"}}
    export_onnx(model, sample_inputs(model, None), tmp_path / "model.onnx")
    tokens, mask = torch.randint(0, 30, (5, 19)), torch.arange(19).expand(5, 19) < 11
    longer = SampleInputs({"tokens": tokens, "mask": mask}, by_keyword=True)
    (onnx,) = onnx_outputs(tmp_path / "model.onnx", longer)
    (eager,) = longer.call(model)
    torch.testing.assert_close(onnx, eager.detach())


def test_a_module_without_example_input_array_or_datamodule_is_refused_with_the_fix():
    with pytest.raises(Refusal, match="sets no `example_input_array`, and the checkpoint"):
        sample_inputs(ToyRegressor(), None)


def test_dict_validation_batches_are_not_guessed_at():
    model = ToySequenceClassifier()
    model.example_input_array = None
    with pytest.raises(Refusal, match="validation batches are a dict"):
        sample_inputs(model, ToySequenceData())


def test_compare_checkpoints_names_the_first_difference(fitted):
    a = torch.load(fitted.checkpoints / "last.ckpt", weights_only=True)
    b = copy.deepcopy(a)
    assert compare_checkpoints(a, b) is None
    state = b["optimizer_states"][0]["state"][0]
    key = next(key for key, value in state.items() if value.dim() > 0)  # Adam or SGD's
    state[key].view(-1)[0] += 1.0
    assert compare_checkpoints(a, b) == f"optimizer_states[0].state.0.{key}"


VERIFY_ARGS = [  # fit's options, as the README shows them (no `--` needed)
    *FLAVOURS["sequence"],
    "--data.train_size=128",
    "--data.num_workers=2",
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
]


@pytest.fixture
def toy_importable(monkeypatch):
    """verify-determinism trains in fresh processes: they import the toys from here too."""
    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))


@pytest.mark.slow
def test_verify_determinism_passes_with_a_fixed_seed(capsys, toy_importable):
    assert main(["verify-determinism", "--steps=6", *VERIFY_ARGS]) == 0
    assert "identical" in capsys.readouterr().out


@pytest.mark.slow
def test_verify_determinism_fails_without_a_seed(capsys, toy_importable):
    args = ["--", *VERIFY_ARGS, "--seed_everything=false"]  # a `--` before them works too
    assert main(["verify-determinism", "--steps=2", *args]) == 1
    assert "NOT deterministic: the two runs differ first at state_dict." in capsys.readouterr().out
