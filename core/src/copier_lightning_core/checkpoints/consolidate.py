"""`consolidate-ckpt FOLDER`: one ordinary checkpoint file from an FSDP2 checkpoint folder.

FSDP2 runs (configs/presets/fsdp2.yaml) save each checkpoint as a folder: every rank's
shards in torch distributed checkpoint (DCP) files, plus Lightning's `meta.pt` (loop
counters, callback states, hyperparameters). Only a run with the same strategy reads it.
This tool gathers the shards into full tensors (in this one process, through
`load_checkpoint`, so the model must fit in CPU memory) and writes a regular Lightning
checkpoint that `validate`, `test`, `predict`, `export`, `inspect-ckpt` and `fit --init_from`
read without gathering it again.

The optimizer states are left out: DCP keys them by parameter name, which a single
process cannot load into its optimizer. Resume training from the folder itself.
The output goes to `<checkpoints>/consolidated/`, out of the way of `--ckpt_path last`
(which takes the newest file named `last*` in the checkpoint folder).

`validate`, `test` and `predict` in one process also take the folder itself (`--ckpt_path
last` included): `gathered_copy` writes it to a temporary file for that command alone.
"""

import argparse
import atexit
import importlib
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch.strategies import FSDPStrategy, ModelParallelStrategy, StrategyRegistry
from lightning.pytorch.utilities import rank_zero_info

from ..platform.paths import project_path
from ..platform.project import program
from ..platform.refusal import Refusal
from .checkpoint_io import AtomicCheckpointIO
from .load import is_sharded, load_checkpoint

SHARD_READERS = (ModelParallelStrategy, FSDPStrategy)  # load_checkpoint reads a DCP folder


def consolidate(folder: Path, output: Path) -> Path:
    """Write the full checkpoint of the DCP `folder` to `output`; returns `output`."""
    if not is_sharded(folder):
        raise Refusal(
            f"{folder} is not a distributed checkpoint folder (no `.metadata` file in "
            "it). Pass a checkpoint folder of an FSDP2 run, e.g. runs/<run>/checkpoints/last.ckpt; "
            "a checkpoint file needs no consolidation."
        )
    AtomicCheckpointIO().save_checkpoint(load_checkpoint(folder), output)
    return output


def one_process_checkpoint(command: str, folder: Path, strategy: Any) -> Path | None:
    """What `--ckpt_path` naming the DCP `folder` loads from under the trainer's `strategy`.

    None (the folder itself) under a strategy that reads shards on every rank (FSDP2's
    ModelParallelStrategy, FSDP). Under any other strategy, a gathered copy for validate,
    test and predict; a fit is refused, since the copy lacks the optimizer states a
    resume restores.
    """
    if issubclass(_strategy_class(strategy), SHARD_READERS):
        return None
    if command == "fit":
        raise Refusal(
            f"--ckpt_path {folder} is a folder of shards (an FSDP2 checkpoint): only a "
            "fit with the strategy and process count that wrote it resumes from it (`fit "
            "--config configs/presets/fsdp2.yaml --trainer.devices N --ckpt_path ...`), since "
            "its optimizer states are sharded by parameter. To start a new run from its "
            f"weights in this setting, pass it as `--init_from {folder}` instead."
        )
    return gathered_copy(folder)


def _strategy_class(strategy: Any) -> type:
    """The class of a trainer `strategy` value: a registered name, a class_path, an object."""
    if isinstance(strategy, str):
        known = strategy in StrategyRegistry  # else "auto": never a shard reader
        return StrategyRegistry[strategy]["strategy"] if known else object
    class_path = strategy.get("class_path") if isinstance(strategy, Namespace | dict) else None
    if class_path:
        module, _, name = str(class_path).rpartition(".")
        found: type = getattr(importlib.import_module(module), name)
        return found
    return type(strategy)


def gathered_copy(folder: Path) -> Path:
    """The checkpoint of the DCP `folder` as a temporary file, deleted when this process exits.

    For a command whose strategy reads only files: the temporary folder is new, so no file
    of the user's is ever written over, and the run's checkpoint folder stays untouched.
    """
    scratch = Path(tempfile.mkdtemp(prefix="gathered-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    copy = scratch / folder.name
    torch.save(load_checkpoint(folder), copy)
    rank_zero_info(
        f"{folder} is a folder of shards (an FSDP2 checkpoint): gathered for this process into "
        f"{copy} (weights and run state; deleted at exit). `{program()} consolidate-ckpt {folder}` "
        "writes one file to reuse instead."
    )
    return copy


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
