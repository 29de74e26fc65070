"""Check the first training batch before the first update: shapes, finiteness, labels."""

import math
from collections.abc import Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from jsonargparse.typing import PositiveInt
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from ..batches import named_tensors, parts
from .errors import HealthCheckFailed

TARGET_KEYS = ("label", "labels", "target", "targets", "y")
IGNORE_INDEX = -100  # cross_entropy's default ignore_index: such targets are not labels


class FirstBatchCheck(Callback):
    """Looks at the first batch the loops drew (never an extra one) and fails early.

    The first training batch is checked, and the first batch of the sanity-check
    validation when it runs (it comes before any training):

    - logs each tensor's name, dtype and shape (also inside dataclasses and batch objects,
      such as torch_geometric's `Batch`: batches.py);
    - all floating-point inputs must be finite;
    - when the module declares `num_classes`, the targets (the last element of a tuple or
      list batch, or its "label"/"target"/"y" entry or attribute) must be integers in [0, num_classes)
      (-100, cross_entropy's ignore_index, is allowed); float targets are accepted only as
      per-class scores, with a last dimension of num_classes;
    - image batches (N, 1 or 3, H, W) are sent as a grid to loggers that show images
      (TensorBoard, wandb).

    A violation stops the run before the first update. Modules without `num_classes`
    get the other checks and a warning that labels were not checked.

    Args:
        max_images: images in the grid.
    """

    def __init__(self, max_images: PositiveInt = 16) -> None:
        self.max_images = max_images
        self._checked: set[str] = set()

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._checked = set()

    def on_validation_batch_start(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        # The sanity check runs validation before any training: its first batch is checked
        # too, or a bad label would first surface as an obscure error in a metric.
        if trainer.sanity_checking:
            self._check_once("validation", trainer, pl_module, batch)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._check_once("training", trainer, pl_module, batch)

    def _check_once(
        self, split: str, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any
    ) -> None:
        if split in self._checked:
            return
        self._checked.add(split)
        tensors = dict(named_tensors(batch))
        shapes = ", ".join(f"{name} {t.dtype} {tuple(t.shape)}" for name, t in tensors.items())
        rank_zero_info(f"First {split} batch: {shapes or 'no tensors'}")
        problems = [
            f"{name} has non-finite values (NaN or inf)"
            for name, t in tensors.items()
            if t.is_floating_point() and not torch.isfinite(t).all()
        ]
        warn = len(self._checked) == 1  # a missing hook is reported once, not per split
        problems += _label_problems(batch, getattr(pl_module, "num_classes", None), warn)
        if problems:
            raise HealthCheckFailed(
                f"the first {split} batch is not valid: "
                + "; ".join(problems)
                + ". Check the Dataset's __getitem__ and the DataModule (or the module's "
                "num_classes); no update was made."
            )
        images = next((t for t in tensors.values() if _is_image_batch(t)), None)
        if split == "training" and images is not None:
            _log_grid(trainer, image_grid(images[: self.max_images]))


def _targets(batch: Any) -> torch.Tensor | None:
    """The class targets: a dict's or a batch object's "label"/"target"/"y" entry, or the
    last element of a tuple or list."""
    if isinstance(batch, Sequence) and not isinstance(batch, str):
        last = batch[-1] if len(batch) >= 2 else None
        return last if isinstance(last, torch.Tensor) else None
    entries = dict(parts(batch))  # keyed "['y']" in a dict, ".y" in an object
    found = (entries.get(f"[{key!r}]", entries.get(f".{key}")) for key in TARGET_KEYS)
    return next((t for t in found if isinstance(t, torch.Tensor)), None)


def _label_problems(batch: Any, num_classes: Any, warn: bool) -> list[str]:
    targets = _targets(batch)
    if not isinstance(num_classes, int) or isinstance(num_classes, bool):
        # Only integer targets are class labels: a regressor's or an autoencoder's module
        # has no num_classes to declare, and hears nothing about it.
        if warn and targets is not None and _integer(targets):
            rank_zero_warn(
                "FirstBatchCheck: the first batch has integer targets but the module declares "
                "no integer `num_classes` attribute, so their range is not checked (inputs and "
                "shapes still are). Set `self.num_classes` in the module to check them."
            )
        return []
    if targets is None:
        if warn:
            rank_zero_warn(
                "FirstBatchCheck: no targets found in the first batch (expected the last element "
                "of a tuple/list, or one of the keys or attributes "
                f"{', '.join(TARGET_KEYS)}); labels not checked."
            )
        return []
    if targets.is_floating_point() or targets.is_complex() or targets.dtype == torch.bool:
        if targets.is_floating_point() and targets.dim() >= 1 and targets.shape[-1] == num_classes:
            return []  # per-class scores: one-hot, soft or multi-label targets
        return [
            f"the targets are {targets.dtype} with shape {tuple(targets.shape)}; class targets "
            "must be integers (torch.long) in [0, num_classes): convert them in __getitem__ "
            "with `int(label)` or `.long()`"
        ]
    labels = targets[targets != IGNORE_INDEX]
    if labels.numel() == 0:
        return []
    low, high = torch.stack([labels.min(), labels.max()]).tolist()
    if low < 0 or high >= num_classes:
        return [
            f"the labels range over [{low}, {high}] but the module has num_classes="
            f"{num_classes}, so they must lie in [0, {num_classes - 1}]: fix the labels or "
            "set num_classes (in the model and the data) to match"
        ]
    return []


def _is_image_batch(t: torch.Tensor) -> bool:
    return t.is_floating_point() and t.dim() == 4 and t.shape[1] in (1, 3) and min(t.shape[2:]) > 1


def image_grid(images: torch.Tensor) -> torch.Tensor:
    """(N, C, H, W) images -> one (C, H', W') grid in [0, 1], one-pixel white borders."""
    x = images.detach().float().cpu()
    x = (x - x.amin()) / (x.amax() - x.amin()).clamp_min(1e-12)
    x = F.pad(x, (1, 1, 1, 1), value=1.0)
    n, c, h, w = x.shape
    cols = math.ceil(math.sqrt(n))
    rows = math.ceil(n / cols)
    x = torch.cat([x, x.new_ones(rows * cols - n, c, h, w)])
    return x.view(rows, cols, c, h, w).permute(2, 0, 3, 1, 4).reshape(c, rows * h, cols * w)


def _log_grid(trainer: L.Trainer, grid: torch.Tensor) -> None:
    for logger in trainer.loggers:
        if isinstance(logger, TensorBoardLogger):
            logger.experiment.add_image("first_batch", grid, global_step=trainer.global_step)
        elif isinstance(logger, WandbLogger):
            logger.log_image("first_batch", [grid.permute(1, 2, 0).numpy()])


def _integer(tensor: torch.Tensor) -> bool:
    return not (tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool)
