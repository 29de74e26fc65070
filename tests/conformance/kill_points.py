"""A callback that holds a run at an exact point until a signal comes from outside.

Like the library's `copier_lightning_core.testing.interrupts.PauseAt`, but a resumed run
does not pause again (its marker exists); copied into the rendered project by
tests/test_conformance.py. At `point` when `trainer.global_step == step` it writes
`marker` and waits: the test then sends SIGKILL
or SIGTERM to the run's whole process group (DataLoader workers included), as `kill -9`,
a scheduler or the OOM killer would. A kill timed from outside lands wherever the timing
puts it; this makes the point exact. SIGKILL ends the wait with the process; after
SIGTERM Lightning finishes the current batch and the library saves and exits 143.

Points: `train_batch` (before a training batch: mid-epoch) and `epoch_start` (after the
previous epoch's validation and checkpoints: an epoch boundary).
"""

import os
import time
from pathlib import Path

import lightning as L


class PauseAt(L.Callback):
    WAIT_S = 300  # a test that sends no signal fails here instead of hanging

    def __init__(self, point: str, step: int, marker: str) -> None:
        self.point, self.step, self.marker = point, step, Path(marker)

    def _fire(self, trainer: L.Trainer, point: str) -> None:
        if point != self.point or trainer.global_step != self.step or self.marker.exists():
            return
        self.marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + self.WAIT_S
        while not trainer.received_sigterm:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PauseAt: no signal within {self.WAIT_S} s")
            time.sleep(0.05)

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._fire(trainer, "train_batch")

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._fire(trainer, "epoch_start")
