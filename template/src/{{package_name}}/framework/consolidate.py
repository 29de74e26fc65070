# Managed by the template; local edits are merged on update.
"""`consolidate-ckpt FOLDER`: one ordinary checkpoint file from an FSDP2 checkpoint folder.

FSDP2 runs (configs/presets/fsdp2.yaml) save each checkpoint as a folder: every rank's
shards in torch distributed checkpoint (DCP) files, plus Lightning's `meta.pt` (loop
counters, callback states, hyperparameters). Only a run with the same strategy reads it.
This tool gathers the shards into full tensors (`dcp_to_torch_save`, in this one process,
so the model must fit in CPU memory) and writes a regular Lightning checkpoint that
`validate`, `test`, `predict`, `export`, `inspect-ckpt` and `fit --init_from` read.

The optimizer states are left out: DCP keys them by parameter name, which a single
process cannot load into its optimizer. Resume training from the folder itself.
The output goes to `<checkpoints>/consolidated/`, out of the way of `--ckpt_path last`
(which takes the newest file named `last*` in the checkpoint folder).
"""

import argparse
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from .checkpoint_io import AtomicCheckpointIO
from .paths import project_path

METADATA = "meta.pt"  # Lightning's name for the non-tensor part of a distributed checkpoint


def consolidate(folder: Path, output: Path) -> Path:
    """Write the full checkpoint of the DCP `folder` to `output`; returns `output`."""
    if not (folder / ".metadata").is_file():
        sys.exit(
            f"error: {folder} is not a distributed checkpoint folder (no `.metadata` file in "
            "it). Pass a checkpoint folder of an FSDP2 run, e.g. runs/<run>/checkpoints/last.ckpt; "
            "a checkpoint file needs no consolidation."
        )
    output.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=output.parent) as tmp:  # gathered on the same disk
        gathered = Path(tmp) / "gathered.pt"
        dcp_to_torch_save(folder, gathered)
        checkpoint = torch.load(gathered, map_location="cpu", weights_only=True)
    metadata = folder / METADATA
    if metadata.is_file():
        checkpoint.update(torch.load(metadata, map_location="cpu", weights_only=True))
    for key in [key for key in checkpoint if key.startswith("optimizer_")]:
        del checkpoint[key]
    AtomicCheckpointIO().save_checkpoint(checkpoint, output)
    return output


def consolidate_checkpoint(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="consolidate-ckpt", description=__doc__)
    parser.add_argument("folder", type=Path, help="an FSDP2 checkpoint folder (e.g. last.ckpt/)")
    parser.add_argument(
        "--output", type=Path, help="the file to write (default: <checkpoints>/consolidated/NAME)"
    )
    args = parser.parse_args(argv)
    folder = project_path(args.folder)
    output = folder.parent / "consolidated" / folder.name
    output = project_path(args.output) if args.output else output
    print(f"wrote {consolidate(folder, output)} (weights and run state; no optimizer states)")
    return 0
