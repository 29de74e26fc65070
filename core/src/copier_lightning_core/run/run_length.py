"""The number of steps a fit will take, refused in one paragraph when the run has none.

`fit --trainer.max_epochs -1 --trainer.max_steps -1` trains until stopped (a signal, a
`max_time`), and Lightning's `trainer.estimated_stepping_batches` is then infinity; with
a training set of unknown length (an iterable dataset) and no `max_steps` it is -1. A
learning-rate schedule over the whole run reads it (the example's warmup and cosine
decay, OneCycleLR's `total_steps`): `int(inf)` stopped the fit with "OverflowError: cannot
convert float infinity to integer", and -1 silently made a schedule of 2 steps. An endless
run whose module never asks (a constant rate, a StepLR) trains as Lightning intends.

The same Trainer class answers `checkpoint_callback` with the ModelCheckpoint that keeps
the best checkpoints, found by its monitor rather than by its place in the list.
"""

import math

from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Checkpoint

from ..callbacks.monitor import monitored_checkpoint
from ..platform.refusal import Refusal


class ProjectTrainer(Trainer):
    """Lightning's Trainer; a module that asks a run without a length for its length stops.

    Its `checkpoint_callback` is the ModelCheckpoint that keeps the best checkpoints.
    """

    @property
    def checkpoint_callback(self) -> Checkpoint | None:
        """The first ModelCheckpoint with a `monitor`, else Lightning's (the first one).

        Lightning takes the first in the callbacks list, which in configs/default.yaml is
        the one writing `last.ckpt` every N steps; the `checkpoint:` section's comes after
        it. Found by its monitor instead of moving it first, so the callbacks run in the
        config's order, and whatever reads this (`ckpt_path="best"`, the best path a
        `ddp_spawn` worker hands back, the summary, test-after-fit) gets the best one.
        """
        return monitored_checkpoint(self) or super().checkpoint_callback

    @property
    def estimated_stepping_batches(self) -> int | float:
        steps = super().estimated_stepping_batches
        if math.isinf(steps) or steps < 0:
            attached = self.strategy.lightning_module  # Trainer's own property hides the None
            module = type(attached).__name__ if attached is not None else "the module"
            why = (
                "--trainer.max_epochs -1 and --trainer.max_steps -1: it trains until stopped"
                if math.isinf(steps)
                else "its training data has no length (an iterable dataset) and "
                "--trainer.max_steps is -1"
            )
            raise Refusal(
                f"this fit has no length ({why}), but {module} asks for its number of "
                "steps (trainer.estimated_stepping_batches), as a learning-rate schedule over "
                "the whole run does (the example's warmup and cosine decay). Give the run a "
                "length: --trainer.max_steps N (or a finite --trainer.max_epochs N). To train "
                "until stopped, use a schedule that needs no length (the example: "
                "`--model.scheduler torch.optim.lr_scheduler.StepLR "
                "--model.scheduler.step_size 1000`)."
            )
        return steps
