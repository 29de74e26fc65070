"""A check that the metric the best checkpoints are judged by is logged at all.

ModelCheckpoint skips the sanity-check validation, so a `checkpoint.monitor` that the
module never logs (`val/loss` for a module logging `val_loss`) is found only after the
first epoch of training. `MonitoredMetricCheck`, an entry of `trainer.callbacks` in
configs/default.yaml, stops at the end of the sanity check, before the first training
step, or, with the sanity check off (`num_sanity_val_steps=0`), at the end of the first
validation, before ModelCheckpoint raises its own error. Without the entry a wrong
monitor is found by ModelCheckpoint after the first epoch.
"""

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from .health.errors import HealthCheckFailed


class MonitorNotLogged(HealthCheckFailed):
    """`checkpoint.monitor` names a metric the validation did not log."""


def monitored_checkpoint(trainer: L.Trainer) -> ModelCheckpoint | None:
    """The ModelCheckpoint that keeps the best checkpoints: the first with a `monitor`.

    Found by its monitor, not by its place: in configs/default.yaml the first
    ModelCheckpoint writes `last.ckpt` every N steps (no monitor), and the `checkpoint:`
    section's comes after it (LightningCLI appends its sections' callbacks to the list).
    """
    return next(
        (c for c in trainer.checkpoint_callbacks if isinstance(c, ModelCheckpoint) and c.monitor),
        None,
    )


class MonitoredMetricCheck(L.Callback):
    """Stops a fit whose first validation does not log the best checkpoints' `monitor`.

    The ModelCheckpoint checked is `monitored_checkpoint(trainer)` (the `checkpoint:`
    section's in configs/default.yaml), read from the Trainer when the check runs.
    """

    def __init__(self) -> None:
        self._checked = False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Before ModelCheckpoint's own hook: Lightning runs checkpoint callbacks last.
        if self._checked or trainer.state.fn != TrainerFn.FITTING:
            return
        self._checked = True
        checkpoint = monitored_checkpoint(trainer)
        if checkpoint is None or checkpoint.monitor is None:
            return
        logged = sorted(trainer.callback_metrics)
        if checkpoint.monitor not in logged:
            raise MonitorNotLogged(_not_logged(checkpoint.monitor, logged, trainer.sanity_checking))


def _not_logged(monitor: str, logged: list[str], sanity_checking: bool) -> str:
    when = "the sanity check" if sanity_checking else "the first validation"
    keys = ", ".join(logged) or "none: validation_step logs nothing (self.log)"
    return (
        f"checkpoint.monitor is {monitor!r}, but {when} did not log it, so no checkpoint "
        f"could be judged best. Logged: {keys}. Set the metric the run is judged by: "
        "`--checkpoint.monitor <one of them>` with `--checkpoint.mode min` (a loss) or `max` "
        "(an accuracy), or the same keys in the `checkpoint:` section of configs/default.yaml."
    )
