"""The linear learning-rate scaling rule for data-parallel runs, as an opt-in callback.

Under DDP each process takes `data.batch_size` samples per step, so the global batch
grows with the number of processes. The linear scaling rule (Goyal et al., 2017, "Accurate,
Large Minibatch SGD") keeps training comparable: multiply the learning rate by the same
factor, and keep a warmup. Lightning does not do this; this callback does, for any
LightningModule, without editing its `configure_optimizers`:

    fit --config configs/presets/ddp.yaml --trainer.callbacks+=copier_lightning_core.callbacks.lr_scaling.LinearLRScaling
"""

import lightning as L
from jsonargparse.typing import PositiveInt

from ..platform.private_apis import nested_schedulers


class LinearLRScaling(L.Callback):
    """Multiplies every learning rate by `world_size / reference_world_size`.

    Applied when training starts, after a resumed run's optimizer and scheduler states are
    restored; the factor already applied is checkpointed, so a resume does not scale twice,
    and a resume on another number of processes rescales by the ratio. Schedulers that
    compute the lr from their `base_lrs` (LambdaLR, StepLR, CosineAnnealingLR, and the
    children of SequentialLR, as in the example's warmup + cosine) follow; OneCycleLR's `max_lr` is not changed.

    Args:
        reference_world_size: the number of processes the configured lr was tuned for.
    """

    def __init__(self, reference_world_size: PositiveInt = 1) -> None:
        self.reference_world_size = reference_world_size
        self.applied = 1.0

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        factor = trainer.world_size / self.reference_world_size
        change = factor / self.applied
        if change == 1.0:
            return
        for optimizer in trainer.optimizers:
            for group in optimizer.param_groups:
                group["lr"] *= change
                if "initial_lr" in group:
                    group["initial_lr"] *= change
        for config in trainer.lr_scheduler_configs:
            # SequentialLR / ChainedScheduler hand over to their children, which restart
            # from their own base_lrs at a milestone: scale those too.
            for scheduler in [config.scheduler, *nested_schedulers(config.scheduler)]:
                if hasattr(scheduler, "base_lrs"):  # SequentialLR itself has none
                    scheduler.base_lrs = [lr * change for lr in scheduler.base_lrs]
        self.applied = factor

    def state_dict(self) -> dict[str, float]:
        return {"applied": self.applied}

    def load_state_dict(self, state_dict: dict[str, float]) -> None:
        self.applied = state_dict["applied"]
