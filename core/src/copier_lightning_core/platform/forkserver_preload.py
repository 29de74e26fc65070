"""Imported by the loader workers' forkserver before anything else: it leaves interrupts to
the training process, and ends with it.

Interrupts: the forkserver (worker_start.py) belongs to the training process's process
group, so a SIGTERM to the group (a scheduler, `timeout`) or SLURM's SIGUSR1/2 would end
it, while the training process handles the signal and goes on (a checkpoint first, then
a clean stop: signals.py). Its workers would then see their parent gone and exit, and the
loader would fail with "worker exited unexpectedly" instead. multiprocessing protects the
forkserver from Ctrl-C only; its preload list, imported before it serves a worker, is the
one place to protect it from the rest. Workers forked from it inherit the same, as
`signals.IgnoreInterrupts` gives forked ones.

Ending: a forkserver lives while any process it started lives, and torch's workers watch
their parent, the forkserver, to know when to exit (a forked worker's is the training
process). So a training process killed outright (`kill -9`, the OOM killer) would leave
the forkserver and every worker it started alive for good, each holding its memory.
Asked to receive SIGKILL when its parent, the training process, ends (Linux's
`PR_SET_PDEATHSIG`), the forkserver ends with it, and its workers, seeing their parent
gone, end after it as forked ones do.
"""

import ctypes
import os
import signal
import sys

from .worker_signals import ignore_worker_signals

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

ignore_worker_signals()

if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the training process ended before the request: end now
        os._exit(0)
