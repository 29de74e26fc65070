# Managed by the template; local edits are merged on update.
"""`tune [fit options]`: measure this machine's best settings for the real model and data.

Each measurement is a short `fit` of the configured run (the same options `fit` takes),
on one device, without loggers or checkpoints in the run root, validating one batch:

1. the largest batch size that fits (Lightning's `BatchSizeFinder`, doubling from 2 until
   out of memory, past the training set, or after `--max-trials` sizes);
2. per DataLoader worker count: the share of step time spent waiting for data and the
   samples per second (only when the DataModule takes `num_workers`);
3. optionally (`--precision`, `--compile`): the same throughput under other precisions
   and with torch.compile.

It prints a table and writes a YAML file that `fit --config FILE` takes.
"""

import argparse
import inspect
import itertools
import json
import sys
import tempfile
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.pytorch.callbacks import BatchSizeFinder

from .paths import PROJECT_ROOT, project_path
from .throughput import batch_size

WARMUP = 2  # batches not timed: first-batch checks, allocator warm-up, compilation


class StepTimer(L.Callback):
    """Times training batches after the warm-up: data wait and samples per second."""

    def __init__(self) -> None:
        self.wait = self.total = 0.0
        self.samples = self.batches = 0
        self._last_end: float | None = None

    def on_train_batch_start(self, trainer: L.Trainer, *_: Any) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        now = time.perf_counter()
        if self._last_end is not None and batch_idx >= WARMUP:
            self.wait += self._start - self._last_end
            self.total += now - self._last_end
            self.samples += batch_size(batch)
            self.batches += 1
        self._last_end = now

    @property
    def samples_per_sec(self) -> float:
        return self.samples / self.total if self.total else float("nan")

    @property
    def data_wait(self) -> float:
        return self.wait / self.total if self.total else float("nan")


def tune(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", default="0,1,2,auto", help="num_workers values to time")
    parser.add_argument("--steps", type=int, default=20, help="timed batches per measurement")
    parser.add_argument("--max-trials", type=int, default=11, help="batch sizes tried at most")
    parser.add_argument("--precision", default="", help="precisions to time: 32-true,bf16-mixed")
    parser.add_argument("--compile", action="store_true", help="also time the compile preset")
    parser.add_argument("--output", type=Path, default=Path("configs/tuned.yaml"))
    args, fit_options = parser.parse_known_args(argv)
    with tempfile.TemporaryDirectory(prefix="tune-") as scratch:
        return _tune(args, [*fit_options, *_QUIET], Path(scratch))


_QUIET = [
    "--trainer.devices=1",  # one device: the batch size found is the per-device one
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    # One validation batch per measured fit, after the timed batches: a scheduler stepped
    # on a validation metric (ReduceLROnPlateau) or an EarlyStopping callback stops a fit
    # whose epoch ends without it.
    "--trainer.limit_val_batches=1",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.max_epochs=1",
    "--test_after_fit=false",
]


def _fit(options: list[str], root: Path, *callbacks: dict) -> L.Trainer:
    """One short `fit` with extra callbacks (class_path specs), as the command line gives it.

    Each measurement is a new run, so each gets a root of its own (run_root.py).
    """
    from .cli import ProjectCLI  # cli.py imports this module

    extra = [f"--trainer.default_root_dir={root}"]
    extra += [f"--trainer.callbacks+={json.dumps(spec)}" for spec in callbacks]
    with warnings.catch_warnings():  # "args and sys.argv both given": meant, here
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        return ProjectCLI(args=["fit", *options, *extra]).trainer


def _callback(trainer: L.Trainer, kind: type) -> Any:
    callbacks = trainer.callbacks  # type: ignore[attr-defined]  # set, undeclared
    return next(callback for callback in callbacks if isinstance(callback, kind))


def _timed(options: list[str], steps: int, root: Path) -> StepTimer:
    timer = {"class_path": f"{__name__}.StepTimer"}
    trainer = _fit([*options, f"--trainer.limit_train_batches={WARMUP + steps}"], root, timer)
    return _callback(trainer, StepTimer)


def _tune(args: argparse.Namespace, options: list[str], scratch: Path) -> int:
    roots = (scratch / f"fit-{n}" for n in itertools.count())
    rows: list[tuple[str, str, float, float]] = []  # (setting, value, samples/s, data wait)

    def say(message: str) -> None:
        print(f"[tune] {message}", file=sys.stderr, flush=True)

    say(f"1: the largest batch size that fits (from 2, doubling; {args.max_trials} tries at most)")
    finder = {
        "class_path": "lightning.pytorch.callbacks.BatchSizeFinder",
        "init_args": {"mode": "power", "steps_per_trial": 2, "max_trials": args.max_trials},
    }
    trainer = _fit([*options, "--trainer.limit_train_batches=1"], next(roots), finder)
    best: dict[str, Any] = {"batch_size": _callback(trainer, BatchSizeFinder).optimal_batch_size}
    device = trainer.strategy.root_device.type
    options = [*options, f"--data.batch_size={best['batch_size']}"]

    datamodule = trainer.datamodule  # type: ignore[attr-defined]  # set, undeclared
    takes_workers = "num_workers" in inspect.signature(type(datamodule)).parameters
    workers = [w.strip() for w in args.workers.split(",") if w.strip()] if takes_workers else []
    if not takes_workers:
        say(f"2: skipped: {type(datamodule).__name__} takes no `num_workers`")
    for n, value in enumerate(workers, 1):
        say(f"2: num_workers={value} ({n}/{len(workers)}, {args.steps} batches)")
        timer = _timed([*options, f"--data.num_workers={value}"], args.steps, next(roots))
        rows.append(("num_workers", value, timer.samples_per_sec, timer.data_wait))
    if workers:
        best["num_workers"] = _parse(max(rows, key=lambda row: row[2])[1])
        options = [*options, f"--data.num_workers={best['num_workers']}"]

    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    variants = [("precision", p, [f"--trainer.precision={p}"]) for p in precisions]
    if args.compile:
        compile_preset = PROJECT_ROOT / "configs" / "presets" / "compile.yaml"
        variants += [("compile", "off", []), ("compile", "on", [f"--config={compile_preset}"])]
    for n, (setting, value, extra) in enumerate(variants, 1):
        say(f"3: {setting}={value} ({n}/{len(variants)}, {args.steps} batches)")
        timer = _timed([*extra, *options], args.steps, next(roots))
        rows.append((setting, value, timer.samples_per_sec, timer.data_wait))
    if precisions:
        best["precision"] = max((r for r in rows if r[0] == "precision"), key=lambda r: r[2])[1]

    print(_table(best["batch_size"], rows, device))
    output = project_path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(_config(best, device, args.compile, rows))
    print(
        f"\nwrote {output}: train with `fit --config {args.output}`. The batch size is per "
        "device: under DDP (configs/presets/ddp.yaml) each of N devices takes this batch, so "
        "the global batch is N times larger; keep it, and scale the learning rate with the "
        "lr_scaling callback, or divide it by N to keep this run's optimisation."
    )
    return 0


def _parse(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def _table(batch: int, rows: list[tuple[str, str, float, float]], device: str) -> str:
    lines = [f"largest batch size on one {device} device: {batch}", ""]
    lines.append(f"{'setting':<12} {'value':<12} {'samples/s':>10} {'data wait':>10}")
    for setting, value, rate, wait in rows:
        lines.append(f"{setting:<12} {value:<12} {rate:>10.1f} {100 * wait:>9.1f}%")
    return "\n".join(lines)


def _config(best: dict[str, Any], device: str, compiled: bool, rows: list) -> str:
    """The chosen settings as a config file that `fit --config` stacks on the default."""
    config: dict[str, Any] = {"data": {"init_args": {"batch_size": best["batch_size"]}}}
    if "num_workers" in best:
        config["data"]["init_args"]["num_workers"] = best["num_workers"]
    if "precision" in best:
        config["trainer"] = {"precision": best["precision"]}
    header = f"# Written by `tune` on one {device} device: settings measured fastest here.\n"
    compile_rates = {value: rate for setting, value, rate, _ in rows if setting == "compile"}
    if compiled and compile_rates.get("on", 0) > compile_rates.get("off", 0):
        header += "# torch.compile was faster: also stack configs/presets/compile.yaml.\n"
    return header + yaml.safe_dump(config, sort_keys=False)
