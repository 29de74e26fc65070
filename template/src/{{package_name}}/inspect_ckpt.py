# Managed by the template; local edits are merged on update.
"""`inspect-ckpt PATH`: what a checkpoint holds, without building the model."""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path

import torch


def load_checkpoint(path: Path) -> dict:
    """`torch.load(weights_only=True)` with a one-paragraph error for a bad file."""
    if not path.is_file():
        sys.exit(
            f"error: checkpoint {path} does not exist. Check the path (runs keep them in <root>/checkpoints/)."
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch raises several types for truncated or foreign files
        sys.exit(
            f"error: {path} is not a readable checkpoint ({type(error).__name__}: {error}). "
            "It may be truncated (an interrupted copy or a full disk) or not a Lightning/torch "
            "checkpoint; use another file, e.g. last.ckpt or an earlier epoch's."
        )
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        sys.exit(f"error: {path} holds no `state_dict`: it is not a Lightning checkpoint.")
    return checkpoint


def summarize(checkpoint: dict) -> dict:
    """The plain-data facts of a checkpoint: counters, versions, hyperparameters, tensors."""
    state = checkpoint["state_dict"]
    return {
        "epoch": checkpoint.get("epoch"),
        "global_step": checkpoint.get("global_step"),
        "lightning_version": checkpoint.get("pytorch-lightning_version"),
        "hyper_parameters": checkpoint.get("hyper_parameters", {}),
        "datamodule_hyper_parameters": checkpoint.get("datamodule_hyper_parameters", {}),
        "callbacks": sorted(checkpoint.get("callbacks", {})),
        "tensors": len(state),
        "parameters": sum(t.numel() for t in state.values() if isinstance(t, torch.Tensor)),
    }


def inspect_checkpoint(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="inspect-ckpt", description=__doc__)
    parser.add_argument("path", type=Path, help="a .ckpt file")
    args = parser.parse_args(argv)
    print(json.dumps(summarize(load_checkpoint(args.path)), indent=2, default=str))
    return 0
