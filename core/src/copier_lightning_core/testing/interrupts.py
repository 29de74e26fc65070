"""Callbacks that stop a run at an exact point, for tests of kills, signals and resumes.

`KillAt` kills its own process there; `PauseOnce` pauses the first of several runs (a
sweep's trials) until it is signalled; `PauseAt` writes a marker file there and waits for
the test to send a signal from outside, to the process or to its whole process group (what
a scheduler or Ctrl-C does: DataLoader workers get it too). Both make the point exact (a
step, a hook, the middle of a checkpoint write) where a kill timed from outside would land
wherever the timing put it. SIGKILL is what a crash, the OOM killer or `kill -9` does: no
handler runs, nothing is flushed. `signal_at` runs a command with a `PauseAt` and sends
the signal when it pauses.
"""

import json
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L

from copier_lightning_core.testing.launch import start


class KillAt(L.Callback):
    """Sends `sig` to this process at `point` when `trainer.global_step == step`.

    Points: `train_batch` (before a training batch), `epoch_start` (after the previous
    epoch's validation and checkpoints), `validation` (before the second validation batch),
    `save` (inside the checkpoint writer, after half the file is written, before the
    rename), `after_batch` (after a training batch: how SIGTERM is tested).
    """

    def __init__(self, point: str, step: int, sig: str = "SIGKILL") -> None:
        self.point, self.step, self.signal = point, step, getattr(signal, sig)

    def _fire(self, trainer: L.Trainer, point: str) -> None:
        if point == self.point and trainer.global_step == self.step:
            os.kill(os.getpid(), self.signal)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.point != "save":
            return
        fsync = os.fsync

        def fsync_then_die(fd: Any) -> None:  # an int, as the checkpoint writer passes it
            if trainer.global_step == self.step:
                os.ftruncate(fd, os.fstat(fd).st_size // 2)  # a write cut short
                os.kill(os.getpid(), self.signal)
            fsync(fd)

        os.fsync = fsync_then_die

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._fire(trainer, "train_batch")

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        self._fire(trainer, "after_batch")

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fire(trainer, "epoch_start")

    def on_validation_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        if batch_idx == 1 and not trainer.sanity_checking:
            self._fire(trainer, "validation")


class PauseOnce(L.Callback):
    """At the start of epoch `epoch`, the first run to get there waits to be signalled.

    That run creates `marker` (atomically: of several runs, one pauses), writes its
    parent's pid into it (the process that started it: a sweep's trial job) and waits:
    SIGTERM ends the wait (Lightning then stops after the next batch and writes
    last.ckpt), SIGINT or SIGKILL end the process. Runs that find the marker run on, so a
    resumed run does not pause again. Epoch 1 starts after epoch 0's checkpoint.
    """

    def __init__(self, marker: str, epoch: int = 1) -> None:
        self.marker, self.epoch = Path(marker), epoch

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch != self.epoch:
            return
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return
        os.write(fd, f"{os.getppid()} {trainer.default_root_dir}".encode())
        os.close(fd)
        while not trainer.received_sigterm:
            time.sleep(0.05)


class PauseAt(KillAt):
    """At `point` when `trainer.global_step == step`: writes `marker`, then waits for a signal.

    SIGKILL ends the process while it waits. After SIGTERM or Ctrl-C (which the library
    routes to Lightning's SIGTERM handler) it carries on, and Lightning stops the run after
    the current batch. At the `save` point it waits inside the checkpoint writer and then
    finishes the write.
    """

    WAIT_S = 300  # a test that sends no signal fails here instead of hanging

    def __init__(self, point: str, step: int, marker: str) -> None:
        super().__init__(point, step)
        self.marker = Path(marker)

    def _fire(self, trainer: L.Trainer, point: str) -> None:
        if point == self.point and trainer.global_step == self.step:
            self._wait(trainer)

    def _wait(self, trainer: L.Trainer) -> None:
        self.marker.write_text(str(os.getpid()))
        deadline = time.monotonic() + self.WAIT_S
        while not trainer.received_sigterm:
            if time.monotonic() > deadline:
                raise RuntimeError(f"PauseAt: no signal within {self.WAIT_S} s")
            time.sleep(0.05)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.point != "save":
            return
        fsync = os.fsync

        def fsync_after_signal(fd: Any) -> None:  # an int, as the checkpoint writer passes it
            if trainer.global_step == self.step and not trainer.received_sigterm:
                self._wait(trainer)
            fsync(fd)

        os.fsync = fsync_after_signal


def signal_at(
    command: list[str],
    cwd: Path,
    env: Mapping[str, str],
    pause: dict[str, Any],
    sig: str,
    group: bool = True,
) -> tuple[int, str]:
    """Run a fit `command` (`[sys.executable, "-m", PACKAGE, *ARGS]`, forked as
    `launch.start` does) in its own process group with a `PauseAt(**pause)` added to its
    callbacks; when it pauses, send `sig` to the whole group (a scheduler's kill), or with
    `group=False` to the command's process alone (a `kill PID`). Its exit status and output.

    The pause's marker file exists afterwards only when the run reached the point.
    """
    pauser = {"class_path": f"{__name__}.PauseAt", "init_args": pause}
    marker = Path(pause["marker"])
    # Its own process group, as a scheduler's job has.
    process = start([*command, f"--trainer.callbacks+={json.dumps(pauser)}"], cwd, env,
                    own_group=True, merge_output=True)  # fmt: skip
    try:
        while not marker.exists() and process.poll() is None:
            time.sleep(0.05)
        if marker.exists():
            send = os.killpg if group else os.kill
            send(process.pid, getattr(signal, sig))
        output, _ = process.communicate(timeout=300)
    finally:
        if process.poll() is None:
            process.kill()
        process.close()
    return process.wait(), output
