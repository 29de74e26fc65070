"""Peak memory of the generated project's `fit` against plain Lightning, on the same module.

Renders a project from this checkout, then trains, on CPU, an MLP of `--layers` x
Linear(`--width`, `--width`) (6 x 4096: 100.7M parameters) with AdamW on random data for
`--steps` steps:

  (b) plain Lightning: a bare `Trainer`, no logger, no callbacks, no checkpointing;
  (c) the generated project's `fit` (`--model`/`--data` naming the classes below), with
      every callback and logger of its default config, the non-finite guard included;
  (k) with `--keep-copy`: (c) with `NonFiniteGuard(keep_copy=True)`, what that costs.

Each run is a fresh process, one at a time (a 100M-parameter run holds about 2 GB), the
variants alternating, `--repeats` times. A process's peak resident memory is the kernel's
`ru_maxrss`, read by `os.wait4` when it ends: nothing in the measured process measures.
Prints each variant's median and runs, the ratio c / b of each repeat (median, min-max),
and the overhead in bytes per parameter. Target: c / b <= 1.05.

Usage: python benchmarks/memory.py [--width 4096] [--layers 6] [--steps 4] [--repeats 3]
    [--keep-copy] [--project DIR]
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from scaffold import given_or_rendered, project_argument

BATCH = 8
LABELS = {
    "b": "(b) plain Lightning Trainer",
    "c": "(c) generated project's fit",
    "k": "(k) fit, NonFiniteGuard keep_copy",
}


class WideMLP(L.LightningModule):
    """`layers` x Linear(width, width) with ReLU between, MSE against random targets, AdamW."""

    def __init__(self, width: int = 4096, layers: int = 6, lr: float = 1e-4) -> None:
        super().__init__()
        self.save_hyperparameters()
        blocks = [m for _ in range(layers) for m in (nn.Linear(width, width), nn.ReLU())]
        self.net = nn.Sequential(*blocks[:-1])

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        inputs, targets = batch
        return nn.functional.mse_loss(self.net(inputs), targets)

    def validation_step(self, batch, batch_idx: int) -> None:
        inputs, targets = batch
        self.log("val/loss", nn.functional.mse_loss(self.net(inputs), targets))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)


class RandomData(L.LightningDataModule):
    """`samples` random (input, target) pairs of `width` features; no workers."""

    def __init__(self, width: int = 4096, samples: int = 64) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(0)
        self.pairs = TensorDataset(
            torch.randn(samples, width, generator=generator),
            torch.randn(samples, width, generator=generator),
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.pairs, batch_size=BATCH)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.pairs, batch_size=BATCH)


def child(variant: str, package: str, root: Path, args: argparse.Namespace) -> int:
    """One run of one variant, in this (fresh) process; its parameter count on stdout."""
    size = [f"--model.width={args.width}", f"--model.layers={args.layers}"]
    if variant == "b":
        model, data = WideMLP(args.width, args.layers), RandomData(args.width)
        L.Trainer(
            accelerator="cpu",
            devices=1,
            max_steps=args.steps,
            limit_val_batches=1,
            num_sanity_val_steps=0,
            default_root_dir=root,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
        ).fit(model, datamodule=data)
    else:
        # Imported here: (b)'s process never loads the library, whose imports take memory too.
        from copier_lightning_core.callbacks.health import NonFiniteGuard
        from copier_lightning_core.cli import ProjectCLI
        from copier_lightning_core.platform.project import serve

        serve(package)  # the library's CLI reads this project's configs

        class MeasuredCLI(ProjectCLI):
            def instantiate_trainer(self, **kwargs):
                trainer = super().instantiate_trainer(**kwargs)
                for callback in trainer.callbacks:
                    if isinstance(callback, NonFiniteGuard):
                        callback.keep_copy = variant == "k"
                return trainer

        cli = MeasuredCLI(
            args=[
                "fit",
                "--model=memory.WideMLP",
                *size,
                "--data=memory.RandomData",
                f"--data.width={args.width}",
                "--trainer.accelerator=cpu",
                "--trainer.devices=1",
                f"--trainer.max_steps={args.steps}",
                "--trainer.limit_val_batches=1",
                f"--trainer.default_root_dir={root}",
                "--trainer.enable_progress_bar=false",
                "--test_after_fit=false",
            ]
        )
        model = cli.model
    print(json.dumps({"parameters": sum(p.numel() for p in model.parameters())}))
    return 0


def run(variant: str, package: str, workdir: Path, index: int, args: argparse.Namespace):
    """(peak RSS in bytes, parameter count) of one fresh process running `variant`."""
    root = workdir / f"run-{variant}-{index}"
    command = [
        sys.executable, __file__, "--child", variant, "--of-package", package,
        "--root", str(root), "--width", str(args.width), "--layers", str(args.layers),
        "--steps", str(args.steps),
    ]  # fmt: skip
    with tempfile.TemporaryFile() as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode()
    if process.returncode != 0:
        sys.exit(f"error: variant ({variant}) failed (exit {process.returncode}); rerun it: "
                 + " ".join(command))  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)  # its checkpoints: GBs each
    parameters = json.loads(text.strip().splitlines()[-1])["parameters"]
    return usage.ru_maxrss * 1024, parameters  # ru_maxrss is in KiB on Linux


def measure(package: str, workdir: Path, args: argparse.Namespace) -> int:
    variants = "bck" if args.keep_copy else "bc"
    peaks: dict[str, list[int]] = {v: [] for v in variants}
    parameters = 0
    for repeat in range(args.repeats):
        order = variants if repeat % 2 == 0 else variants[::-1]  # none always first
        for variant in order:
            peak, parameters = run(variant, package, workdir, repeat, args)
            peaks[variant].append(peak)
            print(f"  repeat {repeat} ({variant}) {peak / 2**20:8.0f} MB", file=sys.stderr)
    print(
        f"peak RSS, MB: median of {args.repeats} fresh processes each, variants alternating; "
        f"MLP {args.layers} x Linear({args.width}, {args.width}), {parameters / 1e6:.1f}M "
        f"parameters, AdamW, {args.steps} steps, CPU"
    )
    median = {v: statistics.median(values) for v, values in peaks.items()}
    for variant, values in peaks.items():
        runs = " ".join(f"{v / 2**20:.0f}" for v in values)
        print(f"  {LABELS[variant]:<36} {median[variant] / 2**20:8.0f}   (runs: {runs})")
    ratios = [c / b for c, b in zip(peaks["c"], peaks["b"], strict=True)]
    per_parameter = (median["c"] - median["b"]) / parameters
    if args.keep_copy:
        copy_cost = (median["k"] - median["b"]) / parameters
        print(f"keep_copy: ratio k / b {median['k'] / median['b']:.3f}, "
              f"{copy_cost:.1f} bytes per parameter")  # fmt: skip
    print(
        f"ratio c / b (target <= 1.05): median {statistics.median(ratios):.3f}, "
        f"min-max {min(ratios):.3f}-{max(ratios):.3f} ({args.repeats} repeats)"
    )
    print(
        f"memory ratio: {statistics.median(ratios):.2f} (generated fit / plain Lightning), "
        f"{per_parameter:.1f} bytes per parameter"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=4096, help="features of each layer")
    parser.add_argument("--layers", type=int, default=6, help="Linear layers (6 x 4096: 100.7M)")
    parser.add_argument("--steps", type=int, default=4, help="training steps per run")
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per variant")
    parser.add_argument(
        "--keep-copy", action="store_true", help="also measure NonFiniteGuard(keep_copy=True)"
    )
    project_argument(parser)
    # One run of one variant, in a fresh process.
    parser.add_argument("--child", choices=tuple(LABELS), help=argparse.SUPPRESS)
    parser.add_argument("--of-package", help=argparse.SUPPRESS)
    parser.add_argument("--root", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.argv[1:] = []  # LightningCLI(args=...) warns when the process has arguments of its own
    if min(args.width, args.layers, args.steps, args.repeats) < 1:
        parser.error("--width, --layers, --steps and --repeats must be at least 1")
    if args.child:
        return child(args.child, args.of_package, args.root, args)
    with tempfile.TemporaryDirectory(prefix="memory-") as tmp:
        workdir = Path(tmp)
        with given_or_rendered(args.project, workdir, "Memory Bench") as (_, package):
            return measure(package, workdir, args)


if __name__ == "__main__":
    sys.exit(main())
