"""`verify-determinism`: same code + same seed must give the same tensors.

Trains N steps twice, each in a fresh process (so nothing cached in one run can leak
into the other), then compares every parameter, buffer, optimizer and scheduler tensor of
the two final checkpoints with `torch.equal`. Prints `identical` or the first difference
and exits non-zero when the runs differ. Any further arguments go to both `fit` runs, e.g.
`verify-determinism --steps 20 -- --config configs/presets/deterministic.yaml`.
"""

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from ..platform.refusal import refusals_exit

COMPARED = ("state_dict", "optimizer_states", "lr_schedulers")


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """Where two nested checkpoint structures first differ (None when they are equal)."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (
            isinstance(a, torch.Tensor)
            and isinstance(b, torch.Tensor)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and torch.equal(a, b)
        )
        return None if same else where
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where} (keys differ: {sorted(map(str, a.keys() ^ b.keys()))})"
        for key in a:
            found = first_difference(a[key], b[key], f"{where}.{key}" if where else str(key))
            if found:
                return found
        return None
    if isinstance(a, list | tuple) and isinstance(b, list | tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            found = first_difference(x, y, f"{where}[{i}]")
            if found:
                return found
        return None
    return None if a == b else where


def compare_checkpoints(a: dict[str, Any], b: dict[str, Any]) -> str | None:
    for key in COMPARED:
        found = first_difference(a.get(key), b.get(key), key)
        if found:
            return found
    return None


def _train(steps: int, root: Path, fit_args: Sequence[str]) -> Path:
    final = root / "final.ckpt"
    command = [sys.executable, "-m", __name__, str(steps), str(root), *fit_args]
    # A fresh process inherits no seed: seed_everything would reuse PL_GLOBAL_SEED.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PL_")}
    subprocess.run(command, check=True, env=env)
    return final


def verify_determinism(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="verify-determinism", description=__doc__, allow_abbrev=False
    )
    parser.add_argument("--steps", type=int, default=20, help="training steps per run")
    parser.add_argument(
        "fit_args", nargs="*", help="arguments for both fit runs (`--experiment X`, `--config F`)"
    )
    # Options it does not know are fit's (`--experiment X`), with or without a `--` before.
    args, fit_options = parser.parse_known_args(argv)
    fit_args = [*args.fit_args, *fit_options]
    with tempfile.TemporaryDirectory(prefix="verify-determinism-") as tmp:
        paths = [_train(args.steps, Path(tmp) / name, fit_args) for name in "ab"]
        a, b = (torch.load(path, map_location="cpu", weights_only=True) for path in paths)
    difference = compare_checkpoints(a, b)
    if difference:
        print(f"NOT deterministic: the two runs differ first at {difference}")
        return 1
    print(f"identical: {args.steps} steps twice, every model/optimizer/scheduler tensor equal")
    return 0


def _child(steps: int, root: Path, fit_args: Sequence[str]) -> None:
    """One fresh-process run: fit `steps` steps, then save the final state."""
    from ..run.lightning_cli import ProjectCLI

    cli = ProjectCLI(
        args=[
            "fit",
            *fit_args,
            f"--trainer.max_steps={steps}",
            "--trainer.max_epochs=-1",
            f"--trainer.default_root_dir={root}",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--test_after_fit=false",
        ]
    )
    cli.trainer.save_checkpoint(root / "final.ckpt", weights_only=False)


if __name__ == "__main__":
    with refusals_exit():  # the run's refusal as the command line ends one
        _child(int(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:])
