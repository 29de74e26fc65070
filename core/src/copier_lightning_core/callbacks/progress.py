"""The progress bar: Lightning's tqdm bar, redrawn at most four times a second.

Lightning's own bars (tqdm, or Rich when it is installed) redraw after every batch:
two terminal writes and a pass over the logged metrics each step, about 0.4 ms, 2% of
the example's step on a CPU. Lightning's `refresh_rate` counts batches, so any fixed
value is either costly for a fast model or frozen for a slow one; this bar counts time,
so the cost is bounded (at most four redraws a second: ten, tqdm's own rate, still cost
the example 0.4% of its time) and a slow model's bar still moves.
The first and the last batch of every loop are always drawn, and a training batch's draw
writes the line once, count and metrics together (Lightning's hook writes it twice).

It is an entry of `trainer.callbacks` in configs/default.yaml; without it, Lightning adds
its own bar. `--trainer.enable_progress_bar false` still turns the bar off: the CLI then
leaves out the bar the callbacks list names (Lightning refuses that pair otherwise). To
use another bar, put it in place of this entry (two bars are refused by Lightning).
"""

import contextlib
import time
from typing import Any

import lightning as L
from jsonargparse.typing import NonNegativeFloat
from lightning.pytorch.callbacks import TQDMProgressBar


class ThrottledProgressBar(TQDMProgressBar):
    """TQDMProgressBar redrawn when `min_interval` seconds passed, or at a loop's ends.

    Args:
        min_interval: seconds between redraws.
        kwargs: TQDMProgressBar's (`process_position`, `leave`); `refresh_rate` stays 1.
    """

    def __init__(self, min_interval: NonNegativeFloat = 0.25, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.min_interval = min_interval
        self._drawn_at = -float("inf")

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        bar = self.train_progress_bar
        if bar.disable or not self._due(batch_idx, self.total_train_batches):
            return
        # TQDMProgressBar's hook writes the line twice (the count, then the metrics): once here.
        bar.n = batch_idx + 1
        bar.set_postfix(self.get_metrics(trainer, pl_module), refresh=False)
        bar.refresh()

    # Lightning calls these hooks with (trainer, pl_module, outputs, batch, batch_idx[,
    # dataloader_idx]); each draws only when due, through TQDMProgressBar's own hook.

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self._due(args[4], self.total_val_batches_current_dataloader):
            super().on_validation_batch_end(*args, **kwargs)

    def on_test_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self._due(args[4], self.total_test_batches_current_dataloader):
            super().on_test_batch_end(*args, **kwargs)

    def on_predict_batch_end(self, *args: Any, **kwargs: Any) -> None:
        if self._due(args[4], self.total_predict_batches_current_dataloader):
            super().on_predict_batch_end(*args, **kwargs)

    def on_exception(
        self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException
    ) -> None:
        # Lightning closes its bars only when a loop ends: a run stopped by an exception
        # (a refusal mid-fit) left them open, and tqdm drew them once more when the process
        # exited, after the command's last line (or a test session's summary).
        for loop in ("train", "val", "test", "predict"):
            with contextlib.suppress(TypeError):  # a loop that has not run has no bar
                getattr(self, f"{loop}_progress_bar").close()

    def _due(self, batch_idx: int, total: float) -> bool:
        """A loop's first or last batch, or `min_interval` seconds since the last draw."""
        now = time.monotonic()
        if batch_idx == 0 or batch_idx + 1 >= total or now - self._drawn_at >= self.min_interval:
            self._drawn_at = now
            return True
        return False
