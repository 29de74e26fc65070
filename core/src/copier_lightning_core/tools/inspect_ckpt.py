"""`inspect-ckpt PATH`: what a checkpoint holds, without building the model.

It prints the counters, versions, hyperparameters and the provenance record (commit,
versions, seed, dataset, config: see provenance.py); `--config` prints the resolved config
the run was started with, as YAML. A checkpoint is data from elsewhere: its text is shown
with terminal control characters escaped (`\\x1b`, `\\r`, ...), since printed raw they
could clear the screen, move the cursor over earlier lines or set the window title.

It reads the file through `checkpoints/load.py`, as every command does, so a folder of
shards (an FSDP2 run's) is read too.
"""

import argparse
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..checkpoints.left_out import left_out_names
from ..checkpoints.load import load_checkpoint
from ..platform.project import program


def summarize(checkpoint: dict[str, Any]) -> dict[str, Any]:
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
        # Frozen weights saved without (LeaveOutFrozenWeights): not counted above.
        "left_out_frozen_tensors": len(left_out_names(checkpoint)),
        "provenance": {
            key: value
            for key, value in (checkpoint.get("provenance") or {}).items()
            if key != "config"
        },
    }


def printable(text: str) -> str:
    """`text` with every character a terminal would act on, not show, written as an escape.

    Line breaks and tabs stay; ESC, BEL, CR, backspace, DEL, the C1 controls and the other
    characters Python does not count as printable become `\\x1b`, `\\x07`, `\\r`, ... (the
    JSON summary is escaped by json.dumps already).
    """
    return "".join(
        char if char.isprintable() or char in "\n\t" else char.encode("unicode_escape").decode()
        for char in text
    )


def inspect_checkpoint(argv: Sequence[str]) -> int:
    prog = f"{program()} inspect-ckpt"
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("path", type=Path, help="a .ckpt file (or an FSDP2 run's folder)")
    parser.add_argument("--config", action="store_true", help="print the run's resolved config")
    args = parser.parse_args(argv)
    checkpoint = load_checkpoint(args.path)
    if args.config:
        config = (checkpoint.get("provenance") or {}).get("config")
        if config:
            print(printable(str(config)))
        else:
            print(f"{args.path} records no config (no CheckpointProvenance record).")
    else:
        print(json.dumps(summarize(checkpoint), indent=2, default=str))
    return 0
