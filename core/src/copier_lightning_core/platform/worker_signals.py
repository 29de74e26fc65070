"""The signals a loader worker leaves to the main process, apart: the forkserver imports
this (forkserver_preload.py), and must not import Lightning for it. Forked workers
(signals.IgnoreInterrupts) and the forkserver ignore them the same way."""

import signal

# The interrupts, and SLURM's requeue signals (SLURM signals every process of a job step;
# Lightning's requeue handler runs in the main one).
WORKER_IGNORES = tuple(
    getattr(signal, name)
    for name in ("SIGTERM", "SIGINT", "SIGUSR1", "SIGUSR2")
    if hasattr(signal, name)
)


def ignore_worker_signals() -> None:
    """Leave WORKER_IGNORES to the main process: this process ignores them."""
    for signum in WORKER_IGNORES:
        signal.signal(signum, signal.SIG_IGN)
