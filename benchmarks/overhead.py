"""What the template's callbacks and logging cost per training step.

Renders a project from this checkout, then times, on CPU, with the example's network,
data, batch size, optimizer and seed (all read from the project's default config, so
whatever that config holds when this runs is measured):

  (a) a vanilla PyTorch loop: forward, loss, backward, step, zero_grad (and the lr
      schedule step, so that the losses can be compared);
  (b) plain Lightning: a bare `Trainer` on the same module, no logger, no callbacks;
  (c) the generated project's `fit`, with its default callbacks and loggers.

The three run at once, each in its own process, in lockstep: one token circles a ring of
pipes, and a process trains only while it holds it, handing it on after each step (see
`Baton`). Step i of (a), (b) and (c) thus runs within one cycle, a few tens of
milliseconds, of the other two. Runs taken one after the other differed here by +-20%,
in CPU time as much as in wall time (the machine's speed changes within seconds), so
they compare badly; steps taken in turn see the same machine. A step is timed from
taking the token to the end of the step: data loading, logging and every callback
included. The first `--warmup` steps of each run are dropped (the first step runs
before the ring starts: startups differ), the next `--steps` timed.

This repeats `--repeats` times (the order in the ring rotates each repeat); the ratios of
each repeat are reported as median, interquartile range and min-max, and the ratios of
each variant's fastest repeat are printed too (load only adds time). torch runs on one
thread unless `--threads` says otherwise. The three processes share one core (`--cpu N`
picks it, by default the first this process may use; one runs at a time, and all see the
same core), so `num_workers: auto` resolves to 0 and each loads its data in its main
process; and they run with one fixed malloc configuration (FIXED_MALLOC).
The load average before and after is printed with the figures.

Wall time on a machine shared with other work stays noisy however it is taken, so
`--instructions` also counts the instructions the main process executes per training
step in each variant, under valgrind's callgrind: a count that other processes do not
change. It runs the same three variants once more, in one child process under valgrind
(`--instructions-steps` steps after `--instructions-warmup`, a few minutes; 10 steps hold
exactly one of the default config's logging steps), and prints the instruction ratios
next to the wall-time ones. Instructions are not time: the
library's Python bookkeeping takes more time per instruction than the convolutions'
vector code, so the instruction ratios understate the wall-time ones; they tell whether
a change added or removed work, steadily.

Targets (wall time): generated fit / plain Lightning <= 1.03, generated fit / vanilla
loop <= 1.10.

Usage: python benchmarks/overhead.py [--repeats 12] [--warmup 10] [--steps 50] [--threads 1]
    [--cpu N] [--instructions [--instructions-warmup 3] [--instructions-steps 10]]
    [--project DIR]
"""

import argparse
import contextlib
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Protocol

import torch
import torch.nn.functional as F
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import serve
from lightning.pytorch import Callback, LightningModule, Trainer

from scaffold import given_or_rendered, project_argument
from stats import spread

# Losses of (a) and (c) must agree to 5 decimals: same seed, data order and optimizer.
LOSS_TOLERANCE = 5e-6


class StepWatcher(Protocol):
    """Told the end of every training step: `Baton` (timing) or `CountWindow` (counting)."""

    def step_ended(self, done: int) -> None: ...


class StepClock(Callback):
    """Keeps every training step's (detached) loss and tells the watcher; syncs nothing."""

    def __init__(self, watcher: StepWatcher) -> None:
        self.losses: list[torch.Tensor] = []
        self.watcher = watcher

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs
        self.losses.append(loss.detach())
        self.watcher.step_ended(len(self.losses))


class Baton:
    """Lets the three variants, each in its own process, train one step at a time, in turn.

    One token circles a ring of pipes: this process takes it from `take_fd` before a step
    and passes it on through `pass_fd` after. Each step's time runs from taking the token
    to the end of the step, so waiting for the others is not counted.
    """

    def __init__(self, take_fd: int, pass_fd: int, steps: int) -> None:
        self.take_fd, self.pass_fd, self.steps = take_fd, pass_fd, steps
        self.durations: list[float] = []  # of steps 2, 3, ...: step 1 runs before the ring
        self._taken_at = 0.0

    def step_ended(self, done: int) -> None:
        if done > 1:
            self.durations.append(time.perf_counter() - self._taken_at)
            os.write(self.pass_fd, b".")
        os.read(self.take_fd, 1)
        if done < self.steps:
            self._taken_at = time.perf_counter()
        else:
            # After its last step a process stays idle for one more round: what it does
            # next (the end of fit, saving, exiting) would otherwise run on the core during
            # the others' last steps, making the later ones in the ring look slower.
            os.write(self.pass_fd, b".")


class CountWindow:
    """Under callgrind: count the instructions of steps warmup+1 .. warmup+steps only.

    Instrumentation is switched on and off around the window with `callgrind_control`;
    two libc calls nothing else in the process makes mark its edges for callgrind's
    `--zero-before` and `--dump-before` (see INSTRUCTION_MARKS), so each window is dumped
    to a file of its own, in the order the variants run.
    """

    def __init__(self, warmup: int, steps: int) -> None:
        self.warmup, self.steps = warmup, steps

    def step_ended(self, done: int) -> None:
        if done == self.warmup:
            callgrind_control("-i", "on")
            os.ctermid()  # --zero-before: the window starts here
        elif done == self.warmup + self.steps:
            os.getloadavg()  # --dump-before: the window's count is written here
            callgrind_control("-i", "off")


# glibc moves its mmap threshold as a process frees large blocks, so whether a step's
# activations come from fresh mmapped pages (a page fault per 4 KiB, every step) differs
# from process to process by chance: measured here, it made one process's steps 30%
# slower than an identical one's, for the whole run. A fixed threshold (above any block a
# step allocates, and never trimming) gives the three processes the same allocator.
FIXED_MALLOC = os.environ | {
    "MALLOC_MMAP_THRESHOLD_": str(2**32),
    "MALLOC_TRIM_THRESHOLD_": str(2**32),
}

# libc functions callgrind zeroes and dumps its counters before; never called in a window.
INSTRUCTION_MARKS = {"zero": "ctermid", "dump": "getloadavg"}


def callgrind_control(*args: str) -> None:
    subprocess.run(["callgrind_control", *args, str(os.getpid())], capture_output=True, check=True)


def fit_args(root: Path, steps: int) -> list[str]:
    """The generated CLI's `fit` on one CPU device for `steps` steps, outputs under `root`."""
    return [
        "fit",
        "--trainer.accelerator=cpu",
        "--trainer.devices=1",
        f"--trainer.max_steps={steps}",
        f"--trainer.default_root_dir={root}",
        "--test_after_fit=false",
    ]


def project_cli(package: str) -> type:
    """The library's `ProjectCLI`, serving the rendered project `package` (its configs)."""
    serve(package)
    return ProjectCLI


def build_from_config(cli_class: type, root: Path, steps: int) -> tuple[LightningModule, object]:
    """Seed and build the module and data exactly as the generated `fit` does; run nothing."""

    class BuildOnly(cli_class):
        # LightningCLI seeds and instantiates in __init__, then runs the subcommand here.
        def _run_subcommand(self, subcommand: str) -> None:
            pass

    cli = BuildOnly(args=fit_args(root, steps))
    return cli.model, cli.datamodule


def optimizer_and_scheduler(configured) -> tuple[torch.optim.Optimizer, object | None]:
    """The optimizer and step-wise scheduler of a `configure_optimizers` result."""
    if isinstance(configured, torch.optim.Optimizer):
        return configured, None
    scheduler = configured.get("lr_scheduler")
    if not isinstance(scheduler, Mapping):
        scheduler = {"scheduler": scheduler}  # Lightning's default interval: "epoch"
    # Only a step-wise schedule changes the lr inside the first epoch, where the runs stay.
    step_wise = scheduler["scheduler"] is not None and scheduler.get("interval") == "step"
    return configured["optimizer"], scheduler["scheduler"] if step_wise else None


def vanilla_loop(
    model: LightningModule, datamodule, steps: int, watcher: StepWatcher
) -> list[torch.Tensor]:
    """(a): the example's training step written as a plain PyTorch loop; its losses."""
    datamodule.prepare_data()
    datamodule.setup("fit")
    loader = datamodule.train_dataloader()
    if len(loader) < steps:
        sys.exit(
            f"error: one epoch has {len(loader)} steps, fewer than the {steps} to time: "
            "lower --warmup/--steps (runs stay inside the first epoch, before validation)."
        )
    # The example's configure_optimizers reads only this from the trainer (for its
    # warmup + cosine schedule); Lightning computes the same value under (b) and (c).
    model.trainer = SimpleNamespace(estimated_stepping_batches=steps)
    optimizer, scheduler = optimizer_and_scheduler(model.configure_optimizers())
    model.trainer = None
    # The DataModule augments training batches after the transfer (in the main process,
    # from torch's global RNG): call its hook as Lightning's training loop does.
    datamodule.trainer = SimpleNamespace(training=True)
    model.train()
    losses = []
    for batch in itertools.islice(loader, steps):
        images, labels = datamodule.on_after_batch_transfer(batch, 0)
        loss = F.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if scheduler is not None:
            scheduler.step()
        losses.append(loss.detach())
        watcher.step_ended(len(losses))
    return losses


def plain_lightning(
    model: LightningModule, datamodule, root: Path, steps: int, watcher: StepWatcher
) -> list[torch.Tensor]:
    """(b): a bare Trainer: no logger, no callbacks but the clock, no checkpointing."""
    clock = StepClock(watcher)
    trainer = Trainer(
        accelerator="cpu",
        devices=1,
        max_steps=steps,
        default_root_dir=root,
        logger=False,
        callbacks=[clock],
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, datamodule=datamodule)
    return clock.losses


def generated_fit(
    cli_class: type, root: Path, steps: int, watcher: StepWatcher
) -> tuple[list[torch.Tensor], list[str]]:
    """(c): the generated `fit`, default callbacks and loggers; the clock is appended."""
    clock = StepClock(watcher)
    cli = cli_class(args=fit_args(root, steps), trainer_defaults={"callbacks": [clock]})
    extras = [type(c).__name__ for c in cli.trainer.callbacks if c is not clock]
    extras += [type(logger).__name__ for logger in cli.trainer.loggers]
    return clock.losses, extras


def run_variant(
    name: str, cli_class: type, root: Path, steps: int, watcher: StepWatcher
) -> tuple[list[torch.Tensor], list[str]]:
    """Variant (a), (b) or (c) for `steps` steps: its losses; for (c), what it ran with."""
    if name == "a":
        return vanilla_loop(*build_from_config(cli_class, root, steps), steps, watcher), []
    if name == "b":
        model, datamodule = build_from_config(cli_class, root, steps)
        return plain_lightning(model, datamodule, root, steps, watcher), []
    return generated_fit(cli_class, root, steps, watcher)


def lockstep_child(package: str, name: str, workdir: Path, steps: int, fds: str) -> int:
    """One variant of a lockstep repeat; writes its step times and losses to <name>.json."""
    take_fd, pass_fd = map(int, fds.split(","))
    baton = Baton(take_fd, pass_fd, steps)
    cli_class = project_cli(package)
    with contextlib.redirect_stdout(sys.stderr):
        losses, ran_with = run_variant(name, cli_class, workdir / f"run-{name}", steps, baton)
    result = {"durations": baton.durations, "losses": [float(loss) for loss in losses]}
    (workdir / f"{name}.json").write_text(json.dumps(result | {"ran_with": ran_with}))
    return 0


def run_lockstep(order: str, package: str, workdir: Path, args: argparse.Namespace) -> dict:
    """Runs the variants in `order` at once, in turn step by step; their results by name."""
    workdir.mkdir(parents=True)
    ring = [os.pipe() for _ in order]  # variant i takes from ring[i], passes to ring[i + 1]
    children = {}
    for i, name in enumerate(order):
        take_fd, pass_fd = ring[i][0], ring[(i + 1) % len(order)][1]
        command = [
            sys.executable, __file__, "--lockstep-child", name, "--of-package", package,
            "--workdir", str(workdir), "--warmup", str(args.warmup), "--steps", str(args.steps),
            "--threads", str(args.threads), "--baton", f"{take_fd},{pass_fd}",
        ]  # fmt: skip
        children[name] = subprocess.Popen(
            command, pass_fds=(take_fd, pass_fd), stdout=sys.stderr, env=FIXED_MALLOC
        )
    os.write(ring[0][1], b".")  # the token; every pipe stays open here until all are done
    try:
        while children:
            for name, child in list(children.items()):
                if child.poll() is None:
                    continue
                if child.returncode != 0:
                    sys.exit(
                        f"error: variant ({name}) failed (exit {child.returncode}); see above."
                    )
                del children[name]
            time.sleep(0.2)
    finally:
        for child in children.values():  # only after a failure: the others wait for the token
            child.kill()
        for fd in itertools.chain.from_iterable(ring):
            os.close(fd)
    return {name: json.loads((workdir / f"{name}.json").read_text()) for name in order}


def measure(package: str, workdir: Path, args: argparse.Namespace) -> int:
    load_before = os.getloadavg()[0]
    results = []
    for repeat in range(args.repeats):
        order = "abc"[repeat % 3 :] + "abc"[: repeat % 3]  # rotated: none always first
        results.append(run_lockstep(order, package, workdir / f"repeat-{repeat}", args))
    load_after = os.getloadavg()[0]
    instructions = count_instructions(package, workdir, args) if args.instructions else None

    # Durations start at step 2 (step 1 runs before the ring): drop steps 1..warmup.
    per_step = {
        name: [1000 * statistics.fmean(repeat[name]["durations"][args.warmup - 1 :])
               for repeat in results]
        for name in "abc"
    }  # fmt: skip
    median = {name: statistics.median(values) for name, values in per_step.items()}
    # Paired within each repeat: its three runs took their steps in turn.
    ratios = {
        against: [c / other for c, other in zip(per_step["c"], per_step[against], strict=True)]
        for against in ("b", "a")
    }
    losses_a, losses_c = results[0]["a"]["losses"], results[0]["c"]["losses"]
    max_diff = max(abs(a - c) for a, c in zip(losses_a, losses_c, strict=True))
    equal = max_diff < LOSS_TOLERANCE

    labels = {
        "a": "(a) vanilla PyTorch loop",
        "b": "(b) plain Lightning Trainer",
        "c": "(c) generated project's fit",
    }
    print(
        f"per-step wall time, ms: median of {args.repeats} lockstep repeats of {args.steps} "
        f"steady-state steps after {args.warmup} warm-up steps; CPU, {args.threads} threads"
    )
    for name, label in labels.items():
        runs_text = " ".join(f"{value:.2f}" for value in per_step[name])
        print(f"  {label:<30} {median[name]:8.2f}   (runs: {runs_text})")
    print(f"(c) ran with: {', '.join(results[0]['c']['ran_with'])}")
    print(f"loss max |a - c| over {len(losses_a)} steps: {max_diff:.1e}")
    print(f"load average (1 min) before {load_before:.2f}, after {load_after:.2f}")
    for against, label in (("b", "c / b (target <= 1.03)"), ("a", "c / a (target <= 1.10)")):
        print(f"ratio {label}: {spread(ratios[against])}")
    # Load only ever adds time: each variant's fastest repeat is the one the machine
    # disturbed least, an estimate that needs no pairing (timeit's advice).
    fastest = {name: min(values) for name, values in per_step.items()}
    print(
        f"ratio of the fastest runs: c / b {fastest['c'] / fastest['b']:.3f}, "
        f"c / a {fastest['c'] / fastest['a']:.3f} (fastest of {args.repeats} each)"
    )
    if instructions is not None:
        print(
            f"instructions per step (callgrind, main process, {args.instructions_steps} steps "
            f"after {args.instructions_warmup}): "
            + ", ".join(f"({name}) {count / 1e6:.1f} M" for name, count in instructions.items())
        )
        for against in ("b", "a"):
            ratio = instructions["c"] / instructions[against]
            print(f"instruction ratio c / {against}: {ratio:.4f}")
    print(f"template ratio: {statistics.median(ratios['b']):.2f} (generated fit / plain Lightning)")
    print(
        f"overhead ratio: {statistics.median(ratios['a']):.2f} (generated fit / vanilla loop), "
        f"losses equal: {'yes' if equal else 'no'}"
    )
    return 0


def count_instructions(package: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Instructions per step of (a), (b), (c), counted by callgrind in a child process."""
    out = workdir / "callgrind"
    out.mkdir()
    command = [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", "--quiet",
        f"--callgrind-out-file={out}/callgrind.%p",
        f"--zero-before={INSTRUCTION_MARKS['zero']}", f"--dump-before={INSTRUCTION_MARKS['dump']}",
        sys.executable, __file__, "--count-instructions-of", package,
        "--warmup", str(args.instructions_warmup), "--steps", str(args.instructions_steps),
        "--threads", str(args.threads), "--workdir", str(workdir / "instructions"),
    ]  # fmt: skip
    child = subprocess.run(command, stdout=sys.stderr, check=False)
    if child.returncode != 0:
        sys.exit(f"error: the callgrind run failed (exit {child.returncode}); see above.")
    # The child's dumps: callgrind.<pid>.<n>, one per window, numbered in the order run.
    dumps = sorted(
        (int(m[1]), path)
        for path in out.iterdir()
        if (m := re.fullmatch(r"callgrind\.\d+\.(\d+)", path.name))
        and "--dump-before" in path.read_text(errors="replace")
    )
    if len(dumps) != 3:
        sys.exit(f"error: expected 3 callgrind windows (a, b, c), found {len(dumps)} in {out}.")
    totals = [int(re.search(r"^summary: (\d+)$", p.read_text(), re.M)[1]) for _, p in dumps]
    return {
        name: total / args.instructions_steps for name, total in zip("abc", totals, strict=True)
    }


def count_child(package: str, workdir: Path, warmup: int, steps: int) -> int:
    """Under callgrind: run (a), (b), (c) once each, counting only their windows."""
    workdir.mkdir(parents=True, exist_ok=True)
    cli_class = project_cli(package)
    with contextlib.redirect_stdout(sys.stderr):
        for name in "abc":
            run_variant(name, cli_class, workdir / name, warmup + steps, CountWindow(warmup, steps))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repeats", type=int, default=12, help="lockstep runs of the three (3k: each leads k)"
    )
    parser.add_argument("--warmup", type=int, default=10, help="steps dropped from each run")
    parser.add_argument("--steps", type=int, default=50, help="steady-state steps timed")
    parser.add_argument(
        "--threads", type=int, default=1, help="torch CPU threads (1: steadiest when shared)"
    )
    parser.add_argument(
        "--cpu", type=int, help="the core the three run on (default: the first one allowed)"
    )
    parser.add_argument(
        "--instructions", action="store_true", help="also count instructions (callgrind)"
    )
    parser.add_argument("--instructions-warmup", type=int, default=3, help="steps not counted")
    parser.add_argument(
        "--instructions-steps", type=int, default=10, help="steps counted (10: one logging step)"
    )
    project_argument(parser)
    # The child that --instructions runs under valgrind (an installed project's package).
    parser.add_argument("--count-instructions-of", metavar="PACKAGE", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    # The children of a lockstep repeat: one variant each, passing the token through --baton.
    parser.add_argument("--lockstep-child", choices=("a", "b", "c"), help=argparse.SUPPRESS)
    parser.add_argument("--of-package", help=argparse.SUPPRESS)
    parser.add_argument("--baton", metavar="TAKE_FD,PASS_FD", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.argv[1:] = []  # LightningCLI(args=...) warns when the process has arguments of its own
    if args.repeats < 1 or args.warmup < 1 or args.steps < 1:
        parser.error("--repeats, --warmup and --steps must be at least 1")
    if args.instructions_warmup < 1 or args.instructions_steps < 1:
        parser.error("--instructions-warmup and --instructions-steps must be at least 1")
    if args.instructions and not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        parser.error("--instructions needs valgrind (callgrind) on PATH: apt-get install valgrind")
    torch.set_num_threads(args.threads)
    if args.count_instructions_of:
        return count_child(args.count_instructions_of, args.workdir, args.warmup, args.steps)
    if args.lockstep_child:
        steps = args.warmup + args.steps
        return lockstep_child(args.of_package, args.lockstep_child, args.workdir, steps, args.baton)
    if hasattr(os, "sched_setaffinity"):  # Linux; the children inherit it
        # One core for all: one process runs at a time, and cores of a shared machine differ.
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0)) if args.cpu is None else args.cpu})
    with tempfile.TemporaryDirectory(prefix="overhead-") as tmp:
        workdir = Path(tmp)
        with given_or_rendered(args.project, workdir, "Overhead Bench") as (_, package):
            return measure(package, workdir, args)


if __name__ == "__main__":
    sys.exit(main())
