"""Throughput of the example under the precision/compile presets on one GPU, against fp32.

    python benchmarks/gpu_presets.py [--steps 300] [--warmup 50] [--batch-size 256]

Renders the template into a temporary folder and runs it from there (its `src/` on
PYTHONPATH: nothing is installed), then trains the example for a fixed number of steps per
configuration, each in its own process: fp32, bf16, fp16, compile, bf16+compile, ddp and
fsdp2 (one GPU each). Steps after the warmup are timed between two CUDA synchronisations
(so compilation and cuDNN autotuning are excluded) and printed as samples/s, as a ratio
to fp32, as MFU (the library's FLOPs per sample over Lightning's peak for this GPU and
dtype) and as peak allocated memory. Without CUDA it says so and exits 0; not part of the
test suite.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import lightning as L
import torch
from copier_lightning_core.callbacks.throughput import TrainingThroughput, compute_dtype
from lightning.fabric.utilities.throughput import get_available_flops

REPO = Path(__file__).resolve().parents[1]
CONFIGURATIONS = {
    "fp32": [],
    "bf16": ["bf16"],
    "fp16": ["fp16"],
    "compile": ["compile"],
    "bf16+compile": ["bf16", "compile"],
    "ddp": ["ddp"],
    "fsdp2": ["fsdp2"],
}


class StepTimer(L.Callback):
    """Times optimizer steps `warmup` .. the end of training; writes the figures to `out`."""

    def __init__(self, out: str, warmup: int, batch_size: int) -> None:
        self.out, self.warmup, self.batch_size = out, warmup, batch_size
        self.start = 0.0

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        if trainer.global_step == self.warmup and not self.start:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        torch.cuda.synchronize()
        seconds = time.perf_counter() - self.start
        steps = trainer.global_step - self.warmup
        samples_per_s = steps * self.batch_size / seconds
        # The run's own meter measured the FLOPs per sample once, before compile/sharding.
        meter = next(c for c in trainer.callbacks if isinstance(c, TrainingThroughput))
        dtype = compute_dtype(str(trainer.precision))
        peak = get_available_flops(trainer.strategy.root_device, dtype)
        flops = meter.flops_per_sample
        if trainer.is_global_zero:
            Path(self.out).write_text(
                json.dumps(
                    {
                        "samples_per_s": samples_per_s,
                        "mfu": samples_per_s * flops / peak if flops and peak else None,
                        "peak_gib": torch.cuda.max_memory_allocated() / 2**30,
                    }
                )
            )


def render(dest: Path) -> tuple[Path, str]:
    """The example project, rendered from this checkout's HEAD (run from its `src/`)."""
    import copier

    copier.run_copy(
        str(REPO),
        str(dest),
        data={"project_name": "Bench Presets"},
        defaults=True,
        unsafe=True,
        vcs_ref="HEAD",
        quiet=True,
    )
    return dest, "bench_presets"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--train-size", type=int, default=16384)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("skipped: this benchmark needs a CUDA GPU (torch.cuda.is_available() is False).")
        return 0

    work = Path(tempfile.mkdtemp(prefix="gpu-presets-"))
    project, package = render(work / "project")
    path = os.pathsep.join([str(Path(__file__).parent), str(project / "src")])
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline"}
    results: dict[str, dict | str] = {}
    for name, presets in CONFIGURATIONS.items():
        out = work / f"{name}.json"
        timer = {
            "class_path": "gpu_presets.StepTimer",
            "init_args": {"out": str(out), "warmup": args.warmup, "batch_size": args.batch_size},
        }
        command = [sys.executable, "-m", package, "fit"]
        command += [f"--config=configs/presets/{preset}.yaml" for preset in presets]
        command += [
            "--trainer.accelerator=gpu",
            "--trainer.devices=1",
            "--trainer.max_epochs=-1",
            f"--trainer.max_steps={args.steps}",
            "--trainer.limit_val_batches=0",
            "--trainer.num_sanity_val_steps=0",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_checkpointing=true",
            f"--trainer.default_root_dir={work / name}",
            "--test_after_fit=false",
            f"--data.batch_size={args.batch_size}",
            f"--data.train_size={args.train_size}",
            f"--data.data_dir={work / 'data'}",
            "--data.num_workers=4",
            f"--trainer.callbacks+={json.dumps(timer)}",
        ]
        started = time.perf_counter()
        result = subprocess.run(command, cwd=project, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        if result.returncode != 0 or not out.is_file():
            results[name] = "failed: " + (result.stderr.strip().splitlines() or ["?"])[-1]
        else:
            results[name] = json.loads(out.read_text())
        print(f"{name:<14} {results[name]}  ({wall:.0f} s wall)", flush=True)

    base = results.get("fp32")
    print(f"\n{torch.cuda.get_device_name()}, {args.steps} steps, batch {args.batch_size}")
    print(f"{'preset':<14} {'samples/s':>10} {'vs fp32':>8} {'MFU':>7} {'peak GiB':>9}")
    for name, value in results.items():
        if isinstance(value, dict) and isinstance(base, dict):
            rate, mfu = value["samples_per_s"], value["mfu"]
            mfu_text = f"{mfu:.1%}" if mfu is not None else "n/a"
            ratio = rate / base["samples_per_s"]
            print(
                f"{name:<14} {rate:>10.0f} {ratio:>7.2f}x {mfu_text:>7} {value['peak_gib']:>9.2f}"
            )
        else:
            print(f"{name:<14} {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
