"""SIGTERM and Ctrl-C stop a run cleanly: a checkpoint first, then an exit code that says why.

A scheduler (SLURM, Kubernetes, `timeout`) or Ctrl-C in a terminal signals the whole
process group, DataLoader workers included. Three things make that a clean stop:

- `IgnoreInterrupts`, chained onto every loader's `worker_init_fn` (loader_hooks.py):
  workers ignore SIGTERM, SIGINT and SIGUSR1/2. Otherwise a worker dies first (torch's
  worker handler lets a SIGTERM from anyone but the main process kill it) and the main
  process stops with "DataLoader worker ... exited unexpectedly", exit 1, no checkpoint.
  Workers still end as before: the main process tells them to, and a worker whose main
  process is gone exits on its own (torch's watchdog).
- `interrupt_exit_codes()`, around every command (cli.py): while a Trainer runs, Ctrl-C is
  handled like SIGTERM, which Lightning turns into a stop after the current batch, so the
  checkpoint written then (resume.InterruptCheckpoint) resumes bit-exactly; a second Ctrl-C
  stops at once. Outside a Trainer both signals stop the command at once.
- The exit code is 128 + the signal's number, as a shell reports a process killed by it:
  143 after SIGTERM, 130 after Ctrl-C. Lightning itself exits 0 after SIGTERM and 1 after
  Ctrl-C, so a scheduler or a script would take an interrupted run for a finished (or a
  crashed) one; 143 and 130 tell it to resume with `--ckpt_path last`.
"""

import atexit
import functools
import multiprocessing
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from lightning.fabric.utilities.seed import pl_worker_init_function

from .refusal import Refusal
from .worker_signals import ignore_worker_signals


class IgnoreInterrupts:
    """A DataLoader `worker_init_fn` that ignores the interrupt signals, then runs `then`.

    A class, not a closure, so that it pickles: workers started with "spawn" (Windows,
    macOS) receive their `worker_init_fn` pickled.
    """

    def __init__(self, then: Callable[[int], Any] | None = None) -> None:
        self.then = then

    def __call__(self, worker_id: int) -> None:
        ignore_worker_signals()
        if self.then is not None:
            self.then(worker_id)


def shield_workers(loader: Any, rank: int) -> None:
    """Chain `IgnoreInterrupts` onto `loader.worker_init_fn` (a no-op without workers).

    Lightning adds its worker-seeding function only to a loader that has none; this one
    takes its place in the chain then, so workers are seeded exactly as before.
    """
    if not getattr(loader, "num_workers", 0) or isinstance(loader.worker_init_fn, IgnoreInterrupts):
        return
    then = loader.worker_init_fn
    if then is None and int(os.environ.get("PL_SEED_WORKERS", 0)):
        then = functools.partial(pl_worker_init_function, rank=rank)
    loader.worker_init_fn = IgnoreInterrupts(then)
    _kill_workers_left_at_exit_once_registered()


@functools.cache  # registered once, when the first loader is shielded
def _kill_workers_left_at_exit_once_registered() -> None:
    atexit.register(_kill_workers_left_at_exit)


def _kill_workers_left_at_exit() -> None:
    """SIGKILL the daemonic children (loader workers) still alive when the process exits.

    At exit, multiprocessing sends SIGTERM to each daemonic child and waits for it. A
    worker ignoring SIGTERM would make that wait forever (measured: a loader iterated
    outside a Trainer, never shut down). SIGKILL ends it as torch's own worker handler
    ends it on a SIGTERM from its main process: at once, without cleanup. Registered
    after multiprocessing's exit handler, so it runs before it. Normally no worker is
    left by then: the Trainer shuts its loaders' workers down at its teardown. (On Windows
    a terminate cannot be ignored; there this finds nothing left to do.)
    """
    workers = [child for child in multiprocessing.active_children() if child.daemon]
    if workers and hasattr(signal, "SIGCHLD"):
        # torch's SIGCHLD handler would report each killed worker as a crash; nothing
        # iterates a loader any more.
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for worker in workers:
        worker.kill()


class _Interrupts:
    """The first interrupt signal this process received, and the handlers that record it."""

    def __init__(self) -> None:
        self.received: int | None = None

    def on_sigterm(self, signum: int, frame: Any) -> None:
        self.received = self.received or signum
        if signal.getsignal(signal.SIGTERM) == self.on_sigterm:  # bound methods: ==, not is
            # No Trainer runs (Lightning puts its own handler first while one does, and
            # calls this one after it): stop now, as SIGTERM's default action would.
            raise SystemExit(128 + signum)

    def on_sigint(self, signum: int, frame: Any) -> None:
        first = self.received is None
        self.received = self.received or signum
        trainer_handler = signal.getsignal(signal.SIGTERM)
        if first and callable(trainer_handler) and trainer_handler != self.on_sigterm:
            # os.write, not print: a handler that prints while the program prints fails.
            os.write(
                2,
                b"\nCtrl-C: stopping after the current batch and saving last.ckpt; "
                b"press Ctrl-C again to stop at once.\n",
            )
            trainer_handler(signal.SIGTERM, frame)  # a Trainer runs: stop after this batch
            return
        raise KeyboardInterrupt


@contextmanager
def interrupt_exit_codes() -> Iterator[None]:
    """Run a command so that SIGTERM / Ctrl-C end it with exit code 143 / 130.

    Only in the main thread (signal handlers can be set nowhere else); elsewhere the
    command runs unchanged.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    interrupts = _Interrupts()
    previous = {
        signal.SIGTERM: signal.signal(signal.SIGTERM, interrupts.on_sigterm),
        signal.SIGINT: signal.signal(signal.SIGINT, interrupts.on_sigint),
    }
    try:
        yield
    except BaseException as stop:
        # After an interrupt, what the stop raised on its way out (Lightning's exit, a
        # refusal found while the run wound down) yields to the interrupt's exit code.
        stopping = SystemExit | KeyboardInterrupt | Refusal
        if interrupts.received is None or not isinstance(stop, stopping):
            raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if interrupts.received is not None:
        name = signal.Signals(interrupts.received).name
        print(
            f"Stopped by {name}: exit code {128 + interrupts.received} (128 + {name}'s number "
            f"{interrupts.received}). A fit that had started training wrote "
            "<root>/checkpoints/last.ckpt first: `fit --ckpt_path last` resumes it.",
            file=sys.stderr,
        )
        raise SystemExit(128 + interrupts.received)
