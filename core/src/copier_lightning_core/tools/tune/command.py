"""`tune [fit options]`: measure this machine's best settings for the real model and data.

Each measurement is a short `fit` of the configured run (the same options `fit` takes),
on one device, without loggers, in a scratch folder, validating one batch:

1. batch size: samples/s of each power of two from `--min-batch-size`, up to the size
   that leaves `--min-steps-per-epoch` steps in an epoch, on a GPU up to the largest
   that fits (Lightning's `BatchSizeFinder`), `--max-trials` sizes at most; the
   recommendation is the smallest size within `--tolerance` of the best throughput that
   uses at most `--max-memory` of the device (batch_size.py);
2. per DataLoader worker count (only when the DataModule takes `num_workers`): samples/s
   and the data wait fraction fit's DataWaitMonitor will log, judged against its
   `hint_above` as fit judges it (workers.py);
3. optionally (`--precision`, `--compile`): the same throughput under other precisions
   and with torch.compile;
4. the learning rate: Lightning's learning-rate finder at the chosen settings
   (`--lr-steps`, 0 skips it), its plot saved beside the config (learning_rate.py).

It prints a table and writes a YAML file that `fit --config FILE` takes, each value with
the reasons it was chosen as comments.
"""

import argparse
import inspect
import itertools
import shlex
import sys
import tempfile
import textwrap
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import yaml
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.callbacks import BatchSizeFinder

from ...callbacks.health import DataWaitMonitor
from ...platform.loader_rules import available_cpus, checked_workers, worker_ceiling
from ...platform.paths import project_path
from . import batch_size, learning_rate, workers
from .measure import Measurement, callback, fit, percent, timed

HEADER = "# Written by `tune`"  # a file starting otherwise is not tune's to overwrite
WIDTH = 92  # characters per comment line in the config written
UNREADABLE = (OSError, UnicodeDecodeError)  # an --output tune cannot have written
Entry = tuple[tuple[str, ...], Any, list[str]]  # a config value: key path, value, comments

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


def tune(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--min-batch-size", type=int, default=8, help="smallest size timed")
    parser.add_argument("--max-trials", type=int, default=10, help="batch sizes timed at most")
    parser.add_argument(
        "--min-steps-per-epoch", type=int, default=16, help="no batch size leaves fewer"
    )
    parser.add_argument(
        "--tolerance", type=float, default=0.05, help="share of the best samples/s given up"
    )
    parser.add_argument(
        "--max-memory", type=float, default=0.8, help="share of GPU memory a batch may use"
    )
    parser.add_argument("--workers", default="0,1,2,auto", help="num_workers values to time")
    parser.add_argument("--steps", type=int, default=10, help="timed batches per measurement")
    parser.add_argument("--precision", default="", help="precisions to time: 32-true,bf16-mixed")
    parser.add_argument("--compile", action="store_true", help="also time the compile preset")
    parser.add_argument("--lr-steps", type=int, default=100, help="lr finder steps (0: skip)")
    parser.add_argument("--min-lr", type=float, default=1e-8, help="lr finder's first lr")
    parser.add_argument("--max-lr", type=float, default=1.0, help="lr finder's last lr")
    parser.add_argument("--output", type=Path, default=Path("configs/tuned.yaml"))
    args, fit_options = parser.parse_known_args(argv)
    _refuse_bad_arguments(parser, args)
    with tempfile.TemporaryDirectory(prefix="tune-") as scratch:
        return _tune(args, fit_options, Path(scratch))


def _refuse_bad_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """One line each, before any measurement (argparse prints it with the usage)."""
    for name in ("min_batch_size", "max_trials", "min_steps_per_epoch", "steps"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} {getattr(args, name)}: give 1 or more.")
    if args.lr_steps < 0:
        parser.error(f"--lr-steps {args.lr_steps}: give 0 (skip the finder) or more.")
    if not 0 <= args.tolerance < 1:
        parser.error(f"--tolerance {args.tolerance}: give a share from 0 to below 1 (0.05: 5%).")
    if not 0 < args.max_memory <= 1:
        parser.error(f"--max-memory {args.max_memory}: give a share above 0, at most 1.")
    for value in _worker_counts(args.workers):
        _refuse_worker_count(parser, value)
    if not 0 < args.min_lr < args.max_lr:
        parser.error(
            f"--min-lr {args.min_lr}, --max-lr {args.max_lr}: give 0 < --min-lr < --max-lr."
        )
    output = project_path(args.output)
    plot = _plot_path(output)
    for path in (output, plot):
        if path.exists() and not _written_by_tune(output):
            parser.error(
                f"--output {args.output}: {path} exists and was not written by tune; "
                "choose another --output (tune overwrites only its own files)."
            )


def _refuse_worker_count(parser: argparse.ArgumentParser, value: str) -> None:
    """The rules `fit` applies to `--data.num_workers` (loader_rules.py), for one machine's
    process: a count tune would time is refused before the first measurement."""
    try:
        workers = checked_workers(_parse(value))
    except ValueError as error:
        parser.error(f"--workers {value}: {error}")
    ceiling = None if workers == "auto" else worker_ceiling(workers, available_cpus())
    if ceiling is not None:
        problem, fix = ceiling
        parser.error(f"--workers {value}: {problem}. {fix}")


def _worker_counts(text: str) -> list[str]:
    return [value.strip() for value in text.split(",") if value.strip()]


def _plot_path(output: Path) -> Path:
    return output.with_name(f"{output.stem}-lr.png")


def _written_by_tune(output: Path) -> bool:
    try:
        return output.read_text().startswith(HEADER)
    except UNREADABLE:
        return False


def _say(message: str) -> None:
    print(f"[tune] {message}", file=sys.stderr, flush=True)


def _tune(args: argparse.Namespace, fit_options: list[str], scratch: Path) -> int:
    options = [*fit_options, *_QUIET]
    roots = (scratch / f"fit-{n}" for n in itertools.count())
    output = project_path(args.output)
    output.parent.mkdir(parents=True, exist_ok=True)
    entries: list[Entry] = []

    size, facts, options = _batch_size(args, options, roots, entries)
    device = facts.device
    rows = [("batch_size", m) for m in size]

    values = _worker_counts(args.workers)
    if not facts.takes_workers:
        _say(f"2: skipped: {facts.data_class} takes no `num_workers`")
        values = []
    measured = []
    for n, value in enumerate(values, 1):
        _say(f"2: num_workers={value} ({n}/{len(values)}, {args.steps} batches)")
        worker_options = [*options, f"--data.num_workers={value}"]
        measured.append(timed(worker_options, args.steps, next(roots), _parse(value))[0])
    if measured:
        chosen = workers.choose(measured, facts.hint_above, args.tolerance)
        comments = workers.reasons(chosen, measured, facts.hint_above)
        entries.append((("data", "init_args", "num_workers"), chosen.value, comments))
        options = [*options, f"--data.num_workers={chosen.value}"]
        rows += [("num_workers", m) for m in measured]

    precisions = [p.strip() for p in args.precision.split(",") if p.strip()]
    variants = [("precision", p, [f"--trainer.precision={p}"]) for p in precisions]
    if args.compile:
        compile_preset = project_path("configs/presets/compile.yaml")
        variants += [("compile", "off", []), ("compile", "on", [f"--config={compile_preset}"])]
    for n, (setting, value, extra) in enumerate(variants, 1):
        _say(f"3: {setting}={value} ({n}/{len(variants)}, {args.steps} batches)")
        rows.append((setting, timed([*extra, *options], args.steps, next(roots), value)[0]))
    if precisions:
        timed_precisions = [m for setting, m in rows if setting == "precision"]
        fastest = max(timed_precisions, key=lambda m: m.samples_per_sec)
        rates = ", ".join(f"{m.value}: {m.samples_per_sec:.0f}" for m in timed_precisions)
        comment = [f"precision {fastest.value}: the fastest (samples/s {rates})."]
        entries.append((("trainer", "precision"), fastest.value, comment))
        options = [*options, f"--trainer.precision={fastest.value}"]
    compile_rates = {m.value: m.samples_per_sec for setting, m in rows if setting == "compile"}

    if args.lr_steps:
        entries += _learning_rate(args, options, next(roots), output)

    print(_table(device, rows))
    header = f"{HEADER} on one {device} device: settings measured here, with the reasons.\n"
    if args.compile and compile_rates.get("on", 0) > compile_rates.get("off", 0):
        header += "# torch.compile was faster: also stack configs/presets/compile.yaml.\n"
    output.write_text(header + commented_yaml(entries))
    # The same options again (a model, an --experiment): the file holds values, not classes.
    fit = shlex.join(["fit", *fit_options, "--config", str(args.output)])
    print(
        f"\nwrote {output}: train with `{fit}`. The batch size is per "
        "device: under DDP (configs/presets/ddp.yaml) each of N devices takes this batch, so "
        "the global batch is N times larger; keep it, and scale the learning rate with the "
        "lr_scaling callback, or divide it by N to keep this run's optimisation."
    )
    return 0


@dataclass
class RunFacts:
    """What the first measured fit tells of the run, kept without its objects (whose
    device memory would count in the next measurement's peak)."""

    device: str
    train_samples: int | None
    data_class: str
    takes_workers: bool
    hint_above: float | None  # fit's DataWaitMonitor threshold; None: none configured


def _facts(cli: Any) -> RunFacts:
    trainer, datamodule = cli.trainer, cli.datamodule
    monitor = callback(trainer, DataWaitMonitor)
    return RunFacts(
        device=trainer.strategy.root_device.type,
        train_samples=_train_samples(trainer),
        data_class=type(datamodule).__name__,
        takes_workers="num_workers" in inspect.signature(type(datamodule)).parameters,
        hint_above=None if monitor is None else monitor.hint_above,
    )


def _batch_size(
    args: argparse.Namespace, options: list[str], roots: Iterator[Path], entries: list[Entry]
) -> tuple[list[Measurement], RunFacts, list[str]]:
    """Time the candidate sizes; record the choice; return the options that carry it on."""
    smallest = args.min_batch_size
    _say(f"1: batch size {smallest} ({args.steps} batches)")
    first, cli = timed(
        [*options, f"--data.batch_size={smallest}"], args.steps, next(roots), smallest
    )
    facts = _facts(cli)
    del cli
    bounds = batch_size.Bounds(facts.train_samples, args.min_steps_per_epoch, None, facts.device)
    sizes = batch_size.candidates(smallest, args.max_trials, bounds)
    if facts.device != "cpu" and len(sizes) > 1:  # on CPU no memory limit is measured
        _say(f"1: the largest batch size that fits (from {smallest}, doubling)")
        finder = {
            "class_path": "lightning.pytorch.callbacks.BatchSizeFinder",
            "init_args": {
                "mode": "power",
                "steps_per_trial": 2,
                "init_val": smallest,
                "max_trials": len(sizes),
            },
        }
        found = fit([*options, "--trainer.limit_train_batches=1"], next(roots), finder)
        bounds.largest_that_fits = callback(found.trainer, BatchSizeFinder).optimal_batch_size
        del found
        sizes = batch_size.candidates(smallest, args.max_trials, bounds)
    measured = [first]
    for size in sizes[1:]:
        if measured[-1].memory is not None and measured[-1].memory > args.max_memory:
            break  # a larger batch only takes more
        _say(f"1: batch size {size} ({args.steps} batches)")
        measured.append(
            timed([*options, f"--data.batch_size={size}"], args.steps, next(roots), size)[0]
        )
    chosen = batch_size.choose(measured, args.tolerance, args.max_memory)
    comments = batch_size.reasons(chosen, measured, bounds, args.tolerance, args.max_memory)
    entries.append((("data", "init_args", "batch_size"), chosen.value, comments))
    return measured, facts, [*options, f"--data.batch_size={chosen.value}"]


def _train_samples(trainer: L.Trainer) -> int | None:
    """The training set's length, when its loader's dataset has one."""
    dataset = getattr(trainer.train_dataloader, "dataset", None)
    try:
        return len(dataset)  # type: ignore[arg-type]
    except TypeError:  # an iterable dataset, or no dataset attribute
        return None


def _learning_rate(
    args: argparse.Namespace, options: list[str], root: Path, output: Path
) -> list[Entry]:
    """Lightning's lr finder at the chosen settings: the config entry, the plot beside it."""
    _say(f"4: learning rate ({args.lr_steps} steps from {args.min_lr:g} to {args.max_lr:g})")
    search = {
        "class_path": f"{learning_rate.__name__}.LearningRateSearch",
        "init_args": {
            "min_lr": args.min_lr,
            "max_lr": args.max_lr,
            "num_training_steps": args.lr_steps,
        },
    }
    # As many epochs as the steps need; the length makes a schedule's step count known.
    lengths = ["--trainer.max_epochs=-1", f"--trainer.max_steps={args.lr_steps}"]
    try:
        cli = fit([*options, *lengths, "--trainer.limit_train_batches=1.0"], root, search)
    except MisconfigurationException as error:  # e.g. more than one optimizer
        _say(f"4: skipped: Lightning's lr finder cannot search this module: {error}")
        return []
    finder = callback(cli.trainer, learning_rate.LearningRateSearch)
    results = finder.optimal_lr.results
    index = learning_rate.steepest_descent(results["lr"], results["loss"])
    if index is None:
        _say(
            "4: no lr suggested: the loss fell nowhere in the range searched, or too few "
            "finite losses were recorded (widen --min-lr/--max-lr, raise --lr-steps)"
        )
        return []
    suggestion = float(f"{results['lr'][index]:.3g}")
    plot = _plot_path(output)
    if learning_rate.save_plot(finder, plot, index):
        _say(f"4: loss against lr plotted in {plot}")
    else:
        _say("4: no plot: matplotlib is not installed (pip install -e '.[sweep]')")
    key = learning_rate.config_key(cli.config.fit.model)
    if key is None:
        print(learning_rate.no_key_paragraph(type(cli.model).__name__, suggestion))
        return []
    recorded = len(results["lr"])
    stopped = f", stopped after {recorded} as the loss diverged" if recorded < args.lr_steps else ""
    comment = [
        f"lr {suggestion:.3g}: Lightning's lr finder, {args.lr_steps} steps with the lr growing "
        f"exponentially from {args.min_lr:g} to {args.max_lr:g}{stopped}; the suggestion is "
        "where the smoothed loss falls fastest against log(lr).",
        f"Plot: {plot.name}. With a warmup schedule this is its peak lr; check the plot.",
    ]
    return [(key, suggestion, comment)]


def _parse(value: str) -> int | str:
    """A count as an int ("-1" too, for its rule to refuse), any other word as given."""
    try:
        return int(value)
    except ValueError:
        return value


def _table(device: str, rows: list[tuple[str, Measurement]]) -> str:
    lines = [f"measured on one {device} device:", ""]
    lines.append(f"{'setting':<12} {'value':<12} {'samples/s':>10} {'data wait':>10} {'memory':>7}")
    for setting, m in rows:
        memory = "-" if m.memory is None else percent(m.memory)
        lines.append(
            f"{setting:<12} {m.value!s:<12} {m.samples_per_sec:>10.1f} "
            f"{100 * m.data_wait:>9.1f}% {memory:>7}"
        )
    return "\n".join(lines)


def commented_yaml(entries: list[Entry]) -> str:
    """Nested keys, each value with its comment lines above it; entries sharing a parent
    must be adjacent. (PyYAML writes no comments.)"""
    lines: list[str] = []
    opened: tuple[str, ...] = ()
    for path, value, comments in entries:
        parents = path[:-1]
        shared = next(
            (n for n, (a, b) in enumerate(zip(opened, parents, strict=False)) if a != b),
            min(len(opened), len(parents)),
        )
        lines += [f"{'  ' * depth}{key}:" for depth, key in enumerate(parents) if depth >= shared]
        opened = parents
        indent = "  " * len(parents)
        width = WIDTH - len(indent) - 2
        lines += [f"{indent}# {line}" for text in comments for line in textwrap.wrap(text, width)]
        scalar = yaml.safe_dump(value).removesuffix("\n").removesuffix("\n...")
        lines.append(f"{indent}{path[-1]}: {scalar}")
    return "\n".join(lines) + "\n"
