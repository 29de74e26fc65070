"""`export CKPT`: the weights to safetensors and the network to ONNX, both verified.

The model and data module are rebuilt from the classes and hyperparameters the checkpoint
records (any LightningModule trained through the CLI; an argument kept out of the
hyperparameters, such as an injected `net`, from the run's recorded config). The weights
are written first, and reloaded; then a sample input is run three ways: eager, from the
reloaded safetensors weights, and through onnxruntime (at the sample's batch size and at
twice it). The max abs difference of each against eager is printed; the command exits
non-zero above `--tolerance` + `--rtol` x the largest eager output magnitude (per output).
A sample input whose floating-point values are all equal gets a note: it checks little.

A module that trains `peft` adapters also gets the merged model (`<stem>-merged`) and the
adapters alone (`<stem>-adapters/`, what `PeftModel.from_pretrained` loads), each read
back and checked the same way (export_adapters.py).

ONNX that cannot be made (or checked) is one paragraph after the weights' line and exits
1, the safetensors file written and checked all the same; `--no-onnx` writes only the
weights (and needs no sample input: without one, the reloaded tensors are compared).

The sample input is the module's `example_input_array`, with Lightning's convention: a
tensor is `forward(x)`, a tuple or list `forward(*x)`, a dict `forward(**x)`. Without it,
a validation batch that is a tensor or an `(inputs, target)` pair gives `forward(inputs)`;
anything else needs `example_input_array`. ONNX inputs are named after the dict's keys
(`input_0`, `input_1`... otherwise). When every input shares the size of its first
dimension, that dimension is the dynamic `batch`; inputs that do not share it (a graph's
`x` (nodes, F), `edge_index` (2, edges)) have no batch dimension unless the module names
one. A module declares dynamic dimensions with an attribute naming them per input, e.g.
`self.export_dynamic_dims = {"tokens": {1: "length"}, "mask": {1: "length"}}` (one name,
one size; a dimension named `batch` is the one doubled for the check at twice the batch).
Export never resizes any other dimension. ONNX needs the `export` extra:
`pip install -e ".[export]"`.
"""

from __future__ import annotations

import argparse
import copy
import functools
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import yaml
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import instantiate_module
from lightning.pytorch.utilities.model_helpers import is_overridden

from ..checkpoints.consolidate import gathered_copy
from ..checkpoints.left_out import restore_left_out
from ..checkpoints.load import is_sharded, load_checkpoint
from ..checkpoints.trusted_classes import (
    DATA_SECTIONS,
    MODEL_SECTIONS,
    Trust,
    check_sections,
    named_in,
    taken_hyperparameters,
)
from ..platform.paths import default_config, follow_umask, project_path
from ..platform.refusal import Refusal
from ..run.checkpoint_hparams import recorded_arguments
from .export_adapters import adapter_exports


def rebuild(
    path: Path, checkpoint: dict[str, Any], trusted: Sequence[str] = (), trust_file: bool = False
) -> tuple[LightningModule, LightningDataModule | None]:
    """The module (and data module, when recorded) of a CLI-trained checkpoint, with its weights.

    Built from the hyperparameters as trusted_classes.py takes them (classes of the project,
    of torch/Lightning, named in `configs/default.yaml` or in `trusted`), never from the
    file's own values: Lightning's `load_from_checkpoint` would hand every one of them to
    jsonargparse. Arguments kept out of the hyperparameters (an injected `net`) come from
    the recorded config, taken the same way. `trust_file`: every value as the file holds
    it, for a file the user trusts as their own code.
    """
    defaults = default_config()
    config = yaml.safe_load(defaults.read_text()) if defaults.is_file() else {}
    trust = Trust(
        named=frozenset({*named_in(config), *trusted}),
        how="name each class it names with `--trust CLASS`, or take every value of it as "
        "the file holds it with `--trust-file`",
    )
    check_sections(checkpoint, path, (*MODEL_SECTIONS, *DATA_SECTIONS))
    # As load_from_checkpoint merges them: older Lightning's sections first.
    merged = {
        key: value
        for section in MODEL_SECTIONS
        for key, value in (checkpoint.get(section) or {}).items()
    }
    hparams = {**merged, **recorded_arguments(checkpoint)}
    _require_class(hparams, LightningModule)
    model_hparams = (
        hparams if trust_file else taken_hyperparameters(hparams, "model", path, trust)[0]
    )
    model = instantiate_module(LightningModule, _without_instantiator(model_hparams))
    if is_overridden("configure_model", model):
        model.configure_model()
    model.on_load_checkpoint(checkpoint)
    restore_left_out(checkpoint, model, path)  # frozen weights the checkpoint left out
    model.load_state_dict(checkpoint["state_dict"], strict=model.strict_loading)
    datamodule = None
    data = checkpoint.get(DATA_SECTIONS[0]) or {}
    if data.get("_class_path"):
        data = {**data, **recorded_arguments(checkpoint, DATA_SECTIONS[0])}
        data_hparams = data if trust_file else taken_hyperparameters(data, "data", path, trust)[0]
        datamodule = instantiate_module(LightningDataModule, _without_instantiator(data_hparams))
        state = checkpoint.get(type(datamodule).__qualname__)
        if state is not None:
            datamodule.load_state_dict(state)
    return model, datamodule


def _require_class(hparams: dict[str, Any], base: type) -> None:
    if not isinstance(hparams.get("_class_path"), str):
        raise Refusal(
            f"the checkpoint records no class for its {base.__name__} (no `_class_path` in its "
            "hyperparameters: it was not trained through this project's CLI), so export cannot "
            "rebuild it. Export it from the code that built it, or train it with the CLI."
        )


def _without_instantiator(hparams: dict[str, Any]) -> dict[str, Any]:
    """As LightningCLI's instantiator receives them from load_from_checkpoint."""
    return {key: value for key, value in hparams.items() if key != "_instantiator"}


@dataclass
class SampleInputs:
    """Named tensors to call the network with, by keyword (a dict example) or in order.

    `batch_dims` maps each input that has a batch dimension to it (batch_dimensions()).
    """

    tensors: dict[str, torch.Tensor]
    by_keyword: bool
    batch_dims: dict[str, int] = field(default_factory=dict)

    def args(self) -> tuple[torch.Tensor, ...]:
        return () if self.by_keyword else tuple(self.tensors.values())

    def kwargs(self) -> dict[str, torch.Tensor]:
        return self.tensors if self.by_keyword else {}

    def call(self, model: torch.nn.Module) -> list[torch.Tensor]:
        return _leaves(model(*self.args(), **self.kwargs()))

    def doubled(self) -> SampleInputs | None:
        """The same inputs at twice the batch size, to check that the batch dimension is
        dynamic: each input with a batch dimension repeated along it, the others as they
        are. None without a batch dimension: no other dimension is resized on a guess."""
        if not self.batch_dims:
            return None
        tensors = {
            name: torch.cat([t, t], dim=self.batch_dims[name]) if name in self.batch_dims else t
            for name, t in self.tensors.items()
        }
        return SampleInputs(tensors, self.by_keyword, self.batch_dims)


def sample_inputs(model: LightningModule, datamodule: LightningDataModule | None) -> SampleInputs:
    example = getattr(model, "example_input_array", None)
    if example is None:
        example = _validation_inputs(model, datamodule)
    if isinstance(example, dict):
        tensors, by_keyword = dict(example), True
    elif isinstance(example, list | tuple):
        tensors, by_keyword = {f"input_{i}": x for i, x in enumerate(example)}, False
    else:
        tensors, by_keyword = {"input_0": example}, False
    if not all(isinstance(t, torch.Tensor) for t in tensors.values()):
        raise Refusal(
            f"{type(model).__name__}.example_input_array must be a tensor, a tuple of "
            "tensors or a dict of tensors (names -> tensors, passed as forward(**inputs)); "
            f"it holds {sorted({type(t).__name__ for t in tensors.values()})}."
        )
    tensors = {name: t.detach().cpu() for name, t in tensors.items()}
    return SampleInputs(tensors, by_keyword, batch_dimensions(model, tensors))


def batch_dimensions(model: LightningModule, tensors: dict[str, torch.Tensor]) -> dict[str, int]:
    """Which dimension of each input is the batch: those `export_dynamic_dims` names
    `batch`; without such a name, dim 0 of every input when all inputs share its size
    and none declares dim 0 otherwise; else none (graph inputs: nodes, edges)."""
    declared = getattr(model, "export_dynamic_dims", {}) or {}
    named = {
        name: dim
        for name, dims in declared.items()
        for dim, label in dims.items()
        if label == "batch" and name in tensors
    }
    if named:
        return named
    batched = {name: t for name, t in tensors.items() if t.dim() > 0}
    shared = len({t.shape[0] for t in batched.values()}) == 1
    if shared and not any(0 in declared.get(name, {}) for name in batched):
        return dict.fromkeys(batched, 0)
    return {}


def _validation_inputs(
    model: LightningModule, datamodule: LightningDataModule | None
) -> torch.Tensor:
    """The first validation batch's inputs, when the batch says unambiguously what they are."""
    batch = None
    if datamodule is not None:
        datamodule.prepare_data()
        datamodule.setup("validate")
        batch = next(iter(datamodule.val_dataloader()))
    if isinstance(batch, torch.Tensor):
        return batch
    if isinstance(batch, list | tuple) and len(batch) == 2 and isinstance(batch[0], torch.Tensor):
        return batch[0]  # (inputs, target)
    if batch is None:
        found = "and the checkpoint records no DataModule to take a validation batch from"
    else:
        found = (
            f"and its validation batches are a {type(batch).__name__}, not a tensor or an "
            "(inputs, target) pair"
        )
    raise Refusal(
        "export needs a sample input to trace the network with; "
        f"{type(model).__name__} sets no `example_input_array`, {found}. Set it in the "
        "module's __init__, e.g. `self.example_input_array = torch.zeros(2, 8)`: a tensor, "
        "a tuple of tensors, or a dict of tensors passed as forward(**inputs), whose first "
        "dimension (2 or more) is exported as the dynamic batch size."
    )


def dynamic_shapes(
    model: LightningModule, inputs: SampleInputs
) -> dict[str, Any] | tuple[Any, ...]:
    """Each input's batch dimension is `batch`; `model.export_dynamic_dims` adds named ones."""
    declared = getattr(model, "export_dynamic_dims", {}) or {}
    unknown = sorted(set(declared) - set(inputs.tensors))
    if unknown:
        raise Refusal(
            f"{type(model).__name__}.export_dynamic_dims names inputs {unknown} that "
            f"the sample input does not have; its inputs are {sorted(inputs.tensors)}."
        )
    dims: dict[str, torch.export.Dim] = {}

    def dim(name: str) -> torch.export.Dim:
        return dims.setdefault(name, torch.export.Dim(name))

    shapes = {}
    for name in inputs.tensors:
        batch = {inputs.batch_dims[name]: "batch"} if name in inputs.batch_dims else {}
        named = {**batch, **declared.get(name, {})}
        shapes[name] = {i: dim(label) for i, label in named.items()} or None
    return shapes if inputs.by_keyword else tuple(shapes.values())


def _leaves(output: Any) -> list[torch.Tensor]:
    """A forward's output as a flat list: a tensor, or tuples, lists and dicts of tensors."""
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, dict) else output
    return [leaf for value in values for leaf in _leaves(value)]


def export_safetensors(model: torch.nn.Module, checkpoint: dict[str, Any], path: Path) -> None:
    """The module's weights, with the checkpoint's provenance as the file's metadata.

    Tied weights (one tensor under two names, as GPT-2's input and output embeddings) are
    written once, under one of their names: safetensors refuses to write shared memory
    twice. `safetensors.torch.load_model(module, path)` ties them again.
    """
    from safetensors.torch import save_model

    provenance = checkpoint.get("provenance") or {}
    metadata = {  # safetensors metadata holds strings only
        key: value if isinstance(value, str) else json.dumps(value, default=str)
        for key, value in provenance.items()
    }
    save_model(model, str(path), metadata=metadata)
    follow_umask(path)  # safetensors writes owner-only (0600)


def export_onnx(model: LightningModule, inputs: SampleInputs, path: Path) -> None:
    try:
        import onnxscript  # noqa: F401  (the dynamo exporter needs it)
    except ImportError:
        raise Refusal('ONNX export needs the export extra: pip install -e ".[export]".') from None
    program = torch.onnx.export(
        model,
        inputs.args(),
        kwargs=inputs.kwargs(),
        dynamo=True,
        dynamic_shapes=dynamic_shapes(model, inputs),
        input_names=list(inputs.tensors),
    )
    assert program is not None  # the dynamo exporter always returns its program
    program.save(str(path))


def onnx_outputs(path: Path, inputs: SampleInputs) -> list[torch.Tensor]:
    """Runs the ONNX file in onnxruntime, feeding it every input by name."""
    import onnxruntime

    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    expected = {graph_input.name for graph_input in session.get_inputs()}
    if expected != set(inputs.tensors):
        raise Refusal(
            f"the ONNX graph takes inputs {sorted(expected)}, but the sample has "
            f"{sorted(inputs.tensors)}; an input the network ignores is dropped by the "
            "exporter: remove it from example_input_array."
        )
    feeds = {name: tensor.numpy() for name, tensor in inputs.tensors.items()}
    return [torch.from_numpy(output) for output in session.run(None, feeds)]


@dataclass
class Parity:
    """The largest difference of an exported copy's outputs from eager, and what is allowed:
    `atol + rtol x` the largest eager output magnitude, per output tensor (float32 rounding
    grows with the values computed, so a fixed bound is too strict for large outputs)."""

    diff: float
    allowed: float

    @property
    def ok(self) -> bool:
        return self.diff <= self.allowed

    def worst(self, other: Parity) -> Parity:
        return max(self, other, key=lambda p: p.diff - p.allowed)


def parity(
    outputs: list[torch.Tensor], expected: list[torch.Tensor], atol: float, rtol: float
) -> Parity:
    if len(outputs) != len(expected) or not expected:
        return Parity(float("inf"), atol)
    each = []
    for output, exp in zip(outputs, expected, strict=True):
        diff = (output.float() - exp.float()).abs().max().item() if exp.numel() else 0.0
        scale = exp.float().abs().max().item() if exp.numel() else 0.0
        each.append(Parity(diff, atol + rtol * scale))
    return functools.reduce(Parity.worst, each)  # the outputs' own, never a made-up 0


def constant_inputs(inputs: SampleInputs) -> list[str]:
    """The floating-point inputs whose values are all equal (all zeros, all ones...)."""
    return [
        f"{name} (every value {t.flatten()[0].item():g})"
        for name, t in inputs.tensors.items()
        if t.is_floating_point() and t.numel() > 1 and bool((t == t.flatten()[0]).all())
    ]


def report(results: dict[Path, Parity], inputs: SampleInputs, rtol: float) -> list[str]:
    """One line per exported file, and the hint when the sample input cannot tell much."""
    lines = [
        f"{file}  max abs diff vs eager {p.diff:.3g}  "
        + ("ok" if p.ok else f"OVER tolerance {p.allowed:.3g}")
        + f" (--tolerance + --rtol {rtol:g} x max |eager output|)"
        for file, p in results.items()
    ]
    constant = constant_inputs(inputs)
    if constant:
        lines.append(
            f"Note: the sample input is constant in {', '.join(constant)}: every position "
            "of the network then computes much the same thing, so the comparison checks "
            "little, and a difference it shows (a bias, a normalisation of a constant) need "
            "not appear on real data. Set `example_input_array` to values like the data's, "
            "e.g. `torch.randn(...)` of the same shape, and export again."
        )
    return lines


def export(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="export", description=__doc__)
    parser.add_argument("checkpoint", type=Path, help="a .ckpt file (or an FSDP2 run's folder)")
    parser.add_argument("--output", type=Path, help="folder (default: next to the checkpoint)")
    parser.add_argument(
        "--tolerance", type=float, default=1e-4, help="allowed max abs difference (plus --rtol's)"
    )
    parser.add_argument(
        "--rtol", type=float, default=1e-4, help="allowed more per unit of output magnitude"
    )
    parser.add_argument(
        "--onnx",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also write ONNX (--no-onnx: the safetensors weights only)",
    )
    parser.add_argument(
        "--trust",
        action="append",
        default=[],
        metavar="CLASS",
        help="a class path the checkpoint names that may be imported and built, for a file "
        "you trust (see trusted_classes.py)",
    )
    parser.add_argument(
        "--trust-file",
        action="store_true",
        help="take every value the checkpoint holds as it is, for a file you trust as your own "
        "code (its strings may name classes, modules or YAML files to load)",
    )
    args = parser.parse_args(argv)
    path = project_path(args.checkpoint)
    # Lightning's load_from_checkpoint reads files only: an FSDP2 folder is gathered first.
    source = gathered_copy(path) if is_sharded(path) else path
    checkpoint = load_checkpoint(source)
    model, datamodule = rebuild(source, checkpoint, args.trust, args.trust_file)
    model.eval()
    output = args.output or path.parent
    output.mkdir(parents=True, exist_ok=True)

    # The weights first: they need no sample input and no exporter.
    weights_path = output / f"{path.stem}.safetensors"
    export_safetensors(model, checkpoint, weights_path)
    from safetensors.torch import load_model

    reloaded = copy.deepcopy(model)
    load_model(reloaded, weights_path)
    adapters = adapter_exports(model, output, path.stem)  # none unless it trains peft adapters
    try:
        inputs = sample_inputs(model, datamodule)
    except Refusal as refusal:
        same = _same_weights(model, reloaded)
        print(f"{weights_path}  reloaded weights {'identical' if same else 'DIFFER'}")
        for written in adapters:
            print(f"{written.path}  written, not checked (no sample input)")
        if not args.onnx:
            return 0 if same else 1
        raise Refusal(
            f"{refusal.message} The weights are written ({weights_path.name}); "
            "`--no-onnx` exports only them."
        ) from None

    doubled = inputs.doubled()
    with torch.inference_mode():
        expected = inputs.call(model)
        expected_doubled = None if doubled is None else doubled.call(model)
        results = {weights_path: parity(inputs.call(reloaded), expected, args.tolerance, args.rtol)}
        for written in adapters:
            results[written.path] = parity(
                inputs.call(written.module), expected, args.tolerance, args.rtol
            )
    onnx_failure = None
    if args.onnx:
        onnx_path = output / f"{path.stem}.onnx"
        try:
            export_onnx(model, inputs, onnx_path)
            with torch.inference_mode():
                found = parity(onnx_outputs(onnx_path, inputs), expected, args.tolerance, args.rtol)
                if doubled is not None and expected_doubled is not None:
                    outputs = onnx_outputs(onnx_path, doubled)
                    found = found.worst(
                        parity(outputs, expected_doubled, args.tolerance, args.rtol)
                    )
            results[onnx_path] = found
        # The exporter fails in many ways (torch.export's guards on data-dependent shapes,
        # operators ONNX lacks, onnxruntime's own errors): each ends as the paragraph below,
        # after the weights, which are complete.
        except Exception as error:  # our Refusals too: the export extra missing, inputs dropped
            onnx_path.unlink(missing_ok=True)  # no unverified (or earlier run's) file left
            onnx_failure = onnx_paragraph(onnx_path, error)
    for line in report(results, inputs, args.rtol):
        print(line)
    if doubled is None and args.onnx:
        shapes = ", ".join(f"{name} {tuple(t.shape)}" for name, t in inputs.tensors.items())
        print(
            f"Note: no batch dimension: the sample inputs do not share their first dimension "
            f"({shapes}) and `export_dynamic_dims` names none `batch`, so ONNX was not run "
            "at twice the batch, and only the dimensions `export_dynamic_dims` declares are "
            "dynamic in the ONNX graph; the others keep the sample's sizes."
        )
    if onnx_failure:
        print(f"error: {onnx_failure}", file=sys.stderr)
    return 1 if onnx_failure or not all(p.ok for p in results.values()) else 0


def onnx_paragraph(path: Path, error: Exception) -> str:
    """Why the ONNX file could not be made, in one paragraph (an exporter's message can run
    to pages: its first line)."""
    if isinstance(error, Refusal):
        reason = error.message
    else:
        first = next((line for line in str(error).splitlines() if line.strip()), "")
        reason = f"{type(error).__name__}: {first[:400]}"
    reason = reason.rstrip().rstrip(".") + "."
    return (
        f"ONNX: {path.name} was not made: {reason} The safetensors weights are written and "
        "checked above. torch.export traces `forward` at the sample's shapes: shapes that "
        "depend on tensor values, or Python branching on them, are the usual cause "
        "(`torch.export.export(model, args, kwargs)` shows the full error); `--no-onnx` "
        "exports only the weights."
    )


def _same_weights(model: torch.nn.Module, reloaded: torch.nn.Module) -> bool:
    theirs = reloaded.state_dict()
    return all(torch.equal(t, theirs[name]) for name, t in model.state_dict().items())
