"""When a step value logged in `training_step` reaches the loggers.

Lightning writes the step values of `self.log` every `log_every_n_steps` optimizer steps
(`trainer.log_every_n_steps`; every step under `fast_dev_run`, and the step a run stops
at), but each `self.log` call costs its full price on every step: Lightning moves and
updates a metric object per call, about half a millisecond on a CPU, 3% of the
example's step. A value logged only when `logs_this_step` is true reaches the loggers
at the same steps with the same values, for a tenth of that (with the default 10).

What no longer sees every step's value: `trainer.callback_metrics` and the progress
bar hold the last written one, at most `log_every_n_steps - 1` steps old. Log every
step what a callback must read fresh (an `EarlyStopping` on a training metric checked
every step), and what is aggregated over the epoch (`on_epoch=True`).
"""

import lightning as L

from ..platform.private_apis import loggers_write_after_this_batch


def logs_this_step(trainer: L.Trainer) -> bool:
    """Whether the loggers write the step values logged during the current training batch."""
    fast_dev_run = trainer.fast_dev_run  # type: ignore[attr-defined]  # set, undeclared
    return bool(fast_dev_run) or loggers_write_after_this_batch(trainer)
