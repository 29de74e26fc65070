"""The LightningModule: loss, metrics, optimisation. The network itself is injected.

YOURS to edit (the template never overwrites it on update). Keep the network in
`nets.py` and the data in `data.py`; this file holds only the training logic.
"""

from collections.abc import Iterable

import lightning as L
import torch
import torch.nn.functional as F
from copier_lightning_core import logs_this_step
from lightning.pytorch.cli import LRSchedulerCallable, OptimizerCallable
from torch import nn
from torch.optim.lr_scheduler import CosineAnnealingLR, LinearLR, SequentialLR
from torchmetrics.classification import MulticlassAccuracy


def adamw(params: Iterable[torch.Tensor]) -> torch.optim.Optimizer:
    """The default optimizer (configs/default.yaml sets the same): AdamW, lr 3e-3."""
    return torch.optim.AdamW(params, lr=3e-3, weight_decay=1e-4)


class ImageClassifier(L.LightningModule):
    """Classifies images with an injected network, optimizer and lr schedule.

    The network, the optimizer and the scheduler come from the config, so another one is a
    flag, not an edit: `--model.optimizer torch.optim.SGD --model.optimizer.lr 0.1`.

    Args:
        net: the network, (N, C, H, W) -> (N, num_classes) logits (`nets.ConvNet` by default).
        num_classes: number of classes; labels are integers in [0, num_classes). Under the
            CLI it is the data's (`data.init_args.num_classes`), linked in.
        optimizer: builds the optimizer from the parameters; its lr is the peak lr.
        scheduler: builds a per-step lr scheduler from the optimizer; None (the default):
            linear warmup from ~0 over `warmup_fraction` of all steps, then cosine decay to 0.
        warmup_fraction: share of all optimisation steps the default schedule warms up.
    """

    def __init__(
        self,
        net: nn.Module,
        num_classes: int = 8,
        optimizer: OptimizerCallable = adamw,
        scheduler: LRSchedulerCallable | None = None,
        warmup_fraction: float = 0.05,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        # Built in plain Python, these are objects: a pickled module or function would break
        # weights-only loading (and the net is in the state_dict already). Under LightningCLI
        # they are their class_path configs, which `load_from_checkpoint` rebuilds from.
        self.remove_ignored_hparams(
            [name for name in ("net", "optimizer", "scheduler") if callable(self.hparams[name])]
        )
        self.net = net
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.num_classes = num_classes
        self.train_acc = MulticlassAccuracy(num_classes)
        self.val_acc = MulticlassAccuracy(num_classes)
        self.test_acc = MulticlassAccuracy(num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.net(images)

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        images, labels = batch
        logits = self(images)
        loss = F.cross_entropy(logits, labels)
        self.train_acc.update(logits, labels)  # accumulated here, logged once per epoch below
        if logs_this_step(self.trainer):  # the steps the loggers write: self.log costs ~0.5 ms
            self.log("train/loss", loss)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("train/acc", self.train_acc)  # Lightning computes it, then resets it

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.val_acc.update(logits, labels)
        self.log("val/loss", F.cross_entropy(logits, labels), prog_bar=True, sync_dist=True)

    def on_validation_epoch_end(self) -> None:
        self.log("val/acc", self.val_acc, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.test_acc.update(logits, labels)
        self.log("test/loss", F.cross_entropy(logits, labels), sync_dist=True)

    def on_test_epoch_end(self) -> None:
        self.log("test/acc", self.test_acc)

    def predict_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> dict[str, torch.Tensor]:
        images, _ = batch
        probabilities = self(images).softmax(dim=-1)
        return {"label": probabilities.argmax(dim=-1), "probabilities": probabilities}

    def configure_optimizers(self):
        optimizer = self.optimizer(self.parameters())
        if self.scheduler is not None:
            scheduler = self.scheduler(optimizer)
        else:
            total = max(2, int(self.trainer.estimated_stepping_batches))
            warmup = min(total - 1, max(1, int(self.hparams.warmup_fraction * total)))
            scheduler = SequentialLR(
                optimizer,
                [
                    LinearLR(optimizer, start_factor=1 / warmup, total_iters=warmup),
                    CosineAnnealingLR(optimizer, T_max=total - warmup),
                ],
                milestones=[warmup],
            )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
