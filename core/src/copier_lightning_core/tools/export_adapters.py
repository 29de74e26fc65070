"""`export` of a module that trains adapters with `peft`: the merged model and the adapters.

What users of adapters deploy is not the LightningModule's state_dict (every frozen base
weight, the adapters beside them, under Lightning's key names) but one of two things peft
makes: the base model with the adapters merged into its weights (`merge_and_unload`: it
runs without peft, at the base model's speed), or the adapters alone, the folder
`PeftModel.save_pretrained` writes (`adapter_config.json`, `adapter_model.safetensors`,
a few MB) that `PeftModel.from_pretrained(base, folder)` loads onto the base model.

For each `peft.PeftModel` the module holds (found by type, at any attribute), export
writes both beside its other files, then reads each back the way it is used and runs the
sample input through a copy of the module that holds it, for the same parity check as the
other exports: the adapters loaded by `PeftModel.from_pretrained` onto the base model
(the module's own, adapters removed), and the merged model reloaded from its files
(transformers' `from_pretrained` for a transformers model, else a safetensors file).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..platform.paths import follow_umask


@dataclass
class AdapterExport:
    """A file or folder written, and a copy of the module that runs what it holds."""

    path: Path
    module: torch.nn.Module


def adapter_exports(model: torch.nn.Module, output: Path, stem: str) -> list[AdapterExport]:
    """Write the adapters and the merged model of every PeftModel in `model` (none without
    peft installed or without a PeftModel), each with the module copy that checks it."""
    found = dict(_peft_models(model))
    exports = []
    for name, peft_model in found.items():
        label = stem if len(found) == 1 else f"{stem}-{name.replace('.', '-')}"
        adapters = output / f"{label}-adapters"
        peft_model.save_pretrained(str(adapters))
        follow_umask(adapters)
        loaded = _loaded(peft_model, adapters)
        exports.append(AdapterExport(adapters, _holding(model, name, loaded)))
        merged = copy.deepcopy(peft_model).merge_and_unload()
        path, reloaded = _write_merged(merged, output / f"{label}-merged")
        follow_umask(path)
        exports.append(AdapterExport(path, _holding(model, name, reloaded)))
    return exports


def _peft_models(model: torch.nn.Module) -> Iterator[tuple[str, Any]]:  # peft's untyped
    """(attribute path, module) of each outermost PeftModel inside `model`."""
    try:
        from peft import PeftModel
    except ImportError:  # peft not installed: no module can hold one
        return
    inside: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, PeftModel) and not any(name.startswith(f"{o}.") for o in inside):
            inside.append(name)
            yield name, module


def _loaded(peft_model: Any, adapters: Path) -> torch.nn.Module:
    """The adapters read from `adapters` by peft onto the base model without them."""
    from peft import PeftModel

    base = copy.deepcopy(peft_model).unload()  # the base weights, adapters taken out
    loaded: torch.nn.Module = PeftModel.from_pretrained(base, str(adapters))
    return loaded.eval()


def _write_merged(merged: Any, where: Path) -> tuple[Path, torch.nn.Module]:
    """Write the merged model: a transformers folder when it is a transformers model
    (config and weights, what `AutoModel...from_pretrained` loads), else a safetensors
    file of its state_dict; and the model read back from what was written."""
    if callable(getattr(merged, "save_pretrained", None)) and hasattr(merged, "config"):
        merged.save_pretrained(str(where))
        return where, type(merged).from_pretrained(str(where)).eval()
    from safetensors.torch import load_model, save_model

    path = where.with_suffix(".safetensors")
    save_model(merged, str(path))
    reloaded = copy.deepcopy(merged)
    load_model(reloaded, str(path))
    return path, reloaded.eval()


def _holding(model: torch.nn.Module, name: str, part: torch.nn.Module) -> torch.nn.Module:
    """A copy of `model` with the submodule at `name` replaced by `part`."""
    copied = copy.deepcopy(model)
    parent_name, _, attribute = name.rpartition(".")
    parent = copied.get_submodule(parent_name) if parent_name else copied
    setattr(parent, attribute, part)
    return copied.eval()
