# Managed by the template; local edits are merged on update.
"""A check that the metric the best checkpoints are judged by is logged at all.

ModelCheckpoint skips the sanity-check validation, so a `checkpoint.monitor` that the
module never logs (`val/loss` for a module logging `val_loss`) is found only after the
first epoch of training. The CLI adds this callback itself whenever the `checkpoint:`
section monitors a metric: it stops at the end of the sanity check, before the first
training step, or, with the sanity check off (`num_sanity_val_steps=0`), at the end of
the first validation, before ModelCheckpoint raises its own error.
"""

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.trainer.states import TrainerFn

from .health.errors import HealthCheckFailed


class MonitorNotLogged(HealthCheckFailed):
    """`checkpoint.monitor` names a metric the validation did not log."""


class MonitoredMetricCheck(L.Callback):
    """Stops a fit whose first validation does not log `checkpoint.monitor`.

    Args:
        checkpoint: the `checkpoint:` section's ModelCheckpoint, whose `monitor` is checked.
    """

    def __init__(self, checkpoint: ModelCheckpoint) -> None:
        self.checkpoint = checkpoint
        self._checked = False

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Before ModelCheckpoint's own hook: Lightning runs checkpoint callbacks last.
        if self._checked or trainer.state.fn != TrainerFn.FITTING or not self.checkpoint.monitor:
            return
        self._checked = True
        logged = sorted(trainer.callback_metrics)
        if self.checkpoint.monitor in logged:
            return
        when = "the sanity check" if trainer.sanity_checking else "the first validation"
        keys = ", ".join(logged) or "none: validation_step logs nothing (self.log)"
        raise MonitorNotLogged(
            f"checkpoint.monitor is {self.checkpoint.monitor!r}, but {when} did not log it, "
            f"so no checkpoint could be judged best. Logged: {keys}. Set the metric the run is "
            "judged by: `--checkpoint.monitor <one of them>` with `--checkpoint.mode min` "
            "(a loss) or `max` (an accuracy), or the same keys in the `checkpoint:` section "
            "of configs/default.yaml."
        )
