# Managed by the template; local edits are merged on update.
"""`export CKPT`: the weights to safetensors and the network to ONNX, both verified.

The model and data module are rebuilt from the classes and hyperparameters the checkpoint
records (any LightningModule trained through the CLI), and a sample batch is run three
ways: eager, from the reloaded safetensors weights, and through onnxruntime. The max abs difference
of each against eager is printed; the command exits non-zero above `--tolerance`.
The sample batch is the module's `example_input_array` or else the first validation
batch's inputs. ONNX needs the `export` extra: `pip install -e ".[export]"`.
"""

import argparse
import copy
import importlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch
from lightning.pytorch import LightningDataModule, LightningModule

from .inspect_ckpt import load_checkpoint
from .paths import project_path


def rebuild(path: Path, checkpoint: dict) -> tuple[LightningModule, LightningDataModule | None]:
    """The module (and data module, when recorded) of a CLI-trained checkpoint, with its weights."""
    for key in ("hyper_parameters", "datamodule_hyper_parameters"):
        class_path = checkpoint.get(key, {}).get("_class_path")
        if class_path:  # Lightning only builds classes that are already imported
            importlib.import_module(class_path.rsplit(".", 1)[0])
    model = LightningModule.load_from_checkpoint(path, map_location="cpu", weights_only=True)
    datamodule = None
    if checkpoint.get("datamodule_hyper_parameters", {}).get("_class_path"):
        datamodule = LightningDataModule.load_from_checkpoint(path, weights_only=True)
    return model, datamodule


def sample_inputs(model, datamodule) -> torch.Tensor:
    example = getattr(model, "example_input_array", None)
    if isinstance(example, torch.Tensor):
        return example
    if datamodule is None:
        sys.exit(
            "error: export needs a sample batch: set `self.example_input_array` in the "
            "module, or train with a DataModule so its validation data can be used."
        )
    datamodule.prepare_data()
    datamodule.setup("validate")
    batch = next(iter(datamodule.val_dataloader()))
    return batch[0] if isinstance(batch, list | tuple) else batch


def export_safetensors(model, checkpoint: dict, path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import save_file

    provenance = checkpoint.get("provenance") or {}
    metadata = {  # safetensors metadata holds strings only
        key: value if isinstance(value, str) else json.dumps(value, default=str)
        for key, value in provenance.items()
    }
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, path, metadata=metadata)
    return state


def export_onnx(model, inputs: torch.Tensor, path: Path) -> None:
    try:
        import onnxscript  # noqa: F401  (the dynamo exporter needs it)
    except ImportError:
        sys.exit('error: ONNX export needs the export extra: pip install -e ".[export]".')
    program = torch.onnx.export(
        model, (inputs,), dynamo=True, dynamic_shapes=({0: torch.export.Dim("batch")},)
    )
    program.save(str(path))


def onnx_outputs(path: Path, inputs: torch.Tensor) -> torch.Tensor:
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    name = session.get_inputs()[0].name
    return torch.from_numpy(session.run(None, {name: inputs.numpy()})[0])


def export(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="export", description=__doc__)
    parser.add_argument("checkpoint", type=Path, help="a .ckpt file")
    parser.add_argument("--output", type=Path, help="folder (default: next to the checkpoint)")
    parser.add_argument("--tolerance", type=float, default=1e-4, help="max abs difference")
    args = parser.parse_args(argv)
    path = project_path(args.checkpoint)
    model, datamodule = rebuild(path, load_checkpoint(path))
    checkpoint = load_checkpoint(path)
    model.eval()
    inputs = sample_inputs(model, datamodule).cpu()
    output = args.output or path.parent
    output.mkdir(parents=True, exist_ok=True)
    with torch.inference_mode():
        expected = model(inputs)

    weights_path = output / f"{path.stem}.safetensors"
    export_safetensors(model, checkpoint, weights_path)
    from safetensors.torch import load_file

    reloaded = copy.deepcopy(model)
    reloaded.load_state_dict(load_file(weights_path))
    onnx_path = output / f"{path.stem}.onnx"
    export_onnx(model, inputs, onnx_path)
    with torch.inference_mode():
        results = {
            weights_path: (reloaded(inputs) - expected).abs().max().item(),
            onnx_path: (onnx_outputs(onnx_path, inputs) - expected).abs().max().item(),
        }
    failed = False
    for file, diff in results.items():
        verdict = "ok" if diff <= args.tolerance else f"OVER tolerance {args.tolerance:g}"
        failed |= diff > args.tolerance
        print(f"{file}  max abs diff vs eager {diff:.3g}  {verdict}")
    return 1 if failed else 0
