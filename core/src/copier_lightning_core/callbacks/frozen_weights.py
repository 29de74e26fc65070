"""`LeaveOutFrozenWeights`: checkpoints that hold what trains, not the frozen base.

For adapters (LoRA through peft) or a head on a frozen backbone, whose config builds the
frozen weights again identically (a pretrained file, a seed). Add it to a run:

    fit --trainer.callbacks+=copier_lightning_core.callbacks.frozen_weights.LeaveOutFrozenWeights

Each checkpoint then leaves out the frozen parameters and records their hash; loading one
(resume, validate, test, predict, export) takes them from the model the config built,
after checking the hash, so a resume stays bit-exact (checkpoints/left_out.py).
Checkpoints saved as one file only (one device, DDP): a strategy that saves checkpoints
its own way (FSDP2's shards through torch's distributed checkpoint, DeepSpeed's) keeps
every weight, so the callback is refused at the start there.
"""

from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities.model_helpers import is_overridden

from ..checkpoints.left_out import leave_out
from ..platform.refusal import Refusal


class LeaveOutFrozenWeights(Callback):
    """Checkpoints without the frozen parameters; loads put the rebuilt ones back."""

    def __init__(self) -> None:
        self._hashes: dict[tuple[str, ...], str] = {}

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        strategy = trainer.strategy
        if is_overridden("save_checkpoint", strategy, Strategy):
            raise Refusal(
                "LeaveOutFrozenWeights works on checkpoints saved as one file (one device, "
                f"DDP); this run's {type(strategy).__name__} saves checkpoints its own way "
                "(FSDP2: shards through torch's distributed checkpoint), keeping every "
                "weight. Remove the callback from this run."
            )

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        leave_out(checkpoint, pl_module, self._hashes)
