"""Checkpoints without the frozen weights the config rebuilds, and their restoration.

A model that trains adapters (LoRA) or a head on a frozen backbone changes a few MB of
weights, yet every checkpoint carries the whole frozen base, which the config builds
again identically (from the same pretrained file, or from a seed). `leave_out` takes the
frozen parameters (`requires_grad` False) out of a checkpoint's `state_dict` and records
their names and one SHA-256 over their bytes; `restore_left_out` puts the module's own
tensors back in their place when the checkpoint is loaded, after checking that they hash
the same, so a resume stays bit-exact or stops with one paragraph, never trains on other
weights. Opt in with the `LeaveOutFrozenWeights` callback (callbacks/frozen_weights.py);
every load through AtomicCheckpointIO, and `export`, restore them.

The hash is taken once per set of frozen names (frozen weights get no gradient, so no
optimizer changes them); a fine-tuning schedule that unfreezes layers makes a new set.
"""

import hashlib
from pathlib import Path
from typing import Any

import torch

from ..platform.refusal import Refusal

LEFT_OUT = "left_out_weights"  # the checkpoint's record: {"names": [...], "sha256": "..."}


def leave_out(
    checkpoint: dict[str, Any], module: torch.nn.Module, hashes: dict[tuple[str, ...], str]
) -> None:
    """Take `module`'s frozen parameters out of `checkpoint["state_dict"]`, and record them;
    `hashes` keeps the hash of each set of frozen names of this module between saves."""
    state = checkpoint["state_dict"]
    frozen = tuple(
        sorted(
            name
            for name, parameter in module.named_parameters(remove_duplicate=False)
            if not parameter.requires_grad and name in state
        )
    )
    if not frozen:
        return
    if frozen not in hashes:
        hashes[frozen] = _sha256({name: state[name] for name in frozen})
    for name in frozen:
        del state[name]
    checkpoint[LEFT_OUT] = {"names": list(frozen), "sha256": hashes[frozen]}


def left_out_names(checkpoint: dict[str, Any]) -> set[str]:
    """The names a checkpoint left out (none for a checkpoint that has every weight)."""
    record = checkpoint.get(LEFT_OUT)
    return set(record.get("names", [])) if isinstance(record, dict) else set()


def restore_left_out(checkpoint: dict[str, Any], module: torch.nn.Module, path: Path) -> None:
    """Put `module`'s own tensors into `checkpoint["state_dict"]` where it left them out,
    once they hash as those it was trained with; one paragraph otherwise."""
    record = checkpoint.pop(LEFT_OUT, None)
    if not isinstance(record, dict):
        return
    names = [str(name) for name in record.get("names", [])]
    state = module.state_dict()
    absent = [name for name in names if name not in state]
    if absent:
        raise Refusal(
            f"{path} was saved without its frozen weights ({len(names)} tensors, "
            "LeaveOutFrozenWeights), to be rebuilt by the config, but the model built here "
            f"has no {', '.join(absent[:5])}{' ...' if len(absent) > 5 else ''}: it is not "
            "the model that was trained. Build it with the run's config (its config.yaml)."
        )
    rebuilt = {name: state[name] for name in names}
    if _sha256(rebuilt) != record.get("sha256"):
        raise Refusal(
            f"{path} was saved without its {len(names)} frozen weights "
            "(LeaveOutFrozenWeights), to be rebuilt by the config, but the model built here "
            "has other values in them (their SHA-256 differs): a changed pretrained file, "
            "seed or base model. Loading would train or evaluate on other weights than the "
            "run's, so nothing was loaded. Build the model from the same files and seed as "
            "the run did, or use a checkpoint saved with every weight."
        )
    checkpoint["state_dict"].update(rebuilt)


def _sha256(tensors: dict[str, torch.Tensor]) -> str:
    """One hash over the names, dtypes, shapes and bytes of `tensors`, in name order."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().data)  # no copy of the bytes
    return digest.hexdigest()
