"""Lightning's learning-rate finder on the configured run, its plot, and where the lr goes.

The finder (`lightning.pytorch.callbacks.LearningRateFinder`, what `Tuner.lr_find` runs)
trains from the run's initial weights while raising the learning rate exponentially from
`min_lr` to `max_lr`, one value per step, and records the smoothed loss; it stops early
when the loss climbs above 4x its best. Its suggestion is the learning rate where the
loss falls fastest (the steepest negative slope of loss against lr). The weights are
restored afterwards. The search needs one optimizer and replaces the module's scheduler
while it runs; it sets no attribute of the module (`update_attr=False`): the suggestion
goes into the config `tune` writes, at the key the module's learning rate is read from.

The suggestion is computed here (`steepest_descent`), not by the finder's `suggestion()`:
Lightning 2.6 differentiates the loss against the lr itself although the lrs are spaced
exponentially (pytorch-lightning #21141, fix proposed in #21171), so noise among the
closely spaced smallest lrs wins; on the example it suggested 6e-7, where nothing learns.
"""

import importlib.util
from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import LearningRateFinder

MODE = "exponential"  # Lightning's default: equal steps in log(lr)
SKIP = (10, 1)  # points skipped at the start and end, as Lightning's suggestion() does


class LearningRateSearch(LearningRateFinder):
    """Lightning's finder at the start of a fit, which then ends: the search is all it is for.

    (`Tuner.lr_find` ends its fit with a private exception; a stop request is public.)
    """

    def __init__(self, min_lr: float, max_lr: float, num_training_steps: int) -> None:
        super().__init__(min_lr, max_lr, num_training_steps, MODE, update_attr=False)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_fit_start(trainer, pl_module)
        trainer.should_stop = True


def steepest_descent(lrs: list[float], losses: list[float]) -> int | None:
    """The index where the smoothed loss falls fastest against log10(lr), or None.

    As Lightning's rule otherwise: the first 10 points (the smoothing starts there) and
    the last one are skipped, non-finite losses ignored. None: fewer than 2 points, or a
    loss that falls nowhere in the range.
    """
    skip_begin, skip_end = SKIP
    index = torch.arange(len(losses))[skip_begin:-skip_end]
    loss = torch.tensor(losses, dtype=torch.float64)[index]
    lr = torch.tensor(lrs, dtype=torch.float64)[index]
    finite = torch.isfinite(loss)
    if int(finite.sum()) < 2:
        return None
    slope = torch.gradient(loss[finite], spacing=[lr[finite].log10()])[0]
    steepest = int(slope.argmin())
    return int(index[finite][steepest]) if slope[steepest] < 0 else None


def config_key(model_config: Any) -> tuple[str, ...] | None:
    """Where the module's learning rate is set in the config, or None when nowhere.

    An `optimizer` init argument given as a class with an `lr` (the example's
    `OptimizerCallable`), else an `lr` or `learning_rate` init argument of the module.
    """
    init_args = model_config.get("init_args") or {}
    optimizer: Any = init_args.get("optimizer")
    if hasattr(optimizer, "get") and "lr" in (optimizer.get("init_args") or {}):
        return ("model", "init_args", "optimizer", "init_args", "lr")
    for name in ("lr", "learning_rate"):
        if name in init_args:
            return ("model", "init_args", name)
    return None


def no_key_paragraph(module: str, suggestion: float) -> str:
    """Why the suggestion is printed but not written, and how to make it written."""
    return (
        f"{module} takes no learning rate in its config that tune can set: the suggested lr "
        f"{suggestion:.3g} is printed here, not written. tune writes it when the module "
        "takes an `optimizer` argument typed `OptimizerCallable` whose class has an `lr` "
        "(as the example's model.py), or an `lr` or `learning_rate` init argument that its "
        "configure_optimizers passes to the optimizer."
    )


def save_plot(search: LearningRateSearch, path: Path, index: int) -> bool:
    """The loss against lr (Lightning's plot), the suggestion marked red, as a PNG.

    False without matplotlib (an optional dependency: the sweep extra).
    """
    if importlib.util.find_spec("matplotlib") is None:
        return False
    import matplotlib.pyplot as plt

    finder = search.optimal_lr
    assert finder is not None, "the plot is drawn after the search"
    results = finder.results
    lr, loss = results["lr"][index], results["loss"][index]
    figure, axes = plt.subplots()
    finder.plot(suggest=False, ax=axes)
    # Left of the dotted line the curve mostly shows the running average warming up from 0
    # (Lightning's smoothing), not the loss; the suggestion is searched right of it.
    axes.axvline(results["lr"][SKIP[0]], color="gray", linestyle=":")
    axes.plot(lr, loss, marker="o", markersize=10, color="red")
    axes.set_title(f"suggested lr {lr:.3g}: the smoothed loss falls fastest (red)")
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True
