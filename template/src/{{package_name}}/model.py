"""The LightningModule: loss, metrics, optimisation. The network itself is injected.

YOURS to edit (the template never overwrites it on update). Keep the network in
`nets.py` and the data in `data.py`; this file holds only the training logic.
"""

import math

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torchmetrics.classification import MulticlassAccuracy


class ImageClassifier(L.LightningModule):
    """Classifies images with an injected network; AdamW with linear warmup then cosine decay.

    Args:
        net: the network, (N, C, H, W) -> (N, num_classes) logits (`nets.ConvNet` by default).
        num_classes: number of classes; labels are integers in [0, num_classes).
        lr: peak learning rate, reached after the warmup.
        weight_decay: AdamW weight decay.
        warmup_fraction: share of all optimisation steps spent warming the lr up from 0.
    """

    def __init__(
        self,
        net: nn.Module,
        num_classes: int = 8,
        lr: float = 3e-3,
        weight_decay: float = 1e-4,
        warmup_fraction: float = 0.05,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        if isinstance(self.hparams.get("net"), nn.Module):
            # Built in plain Python, the net is already in the state_dict; a pickled module
            # would break weights-only loading. Under LightningCLI `net` is its class_path
            # config, which `load_from_checkpoint` uses to rebuild the network.
            self.remove_ignored_hparams(["net"])
        self.net = net
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
        self.train_acc.update(logits, labels)  # accumulate only: logged once per epoch
        self.log("train/loss", loss)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        return loss

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.val_acc(logits, labels)
        self.log("val/loss", F.cross_entropy(logits, labels), prog_bar=True, sync_dist=True)
        self.log("val/acc", self.val_acc, prog_bar=True)

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        images, labels = batch
        logits = self(images)
        self.test_acc(logits, labels)
        self.log("test/loss", F.cross_entropy(logits, labels), sync_dist=True)
        self.log("test/acc", self.test_acc)

    def predict_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> dict[str, torch.Tensor]:
        images, _ = batch
        probabilities = self(images).softmax(dim=-1)
        return {"label": probabilities.argmax(dim=-1), "probabilities": probabilities}

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(
            self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay
        )
        total = max(1, int(self.trainer.estimated_stepping_batches))
        warmup = max(1, int(self.hparams.warmup_fraction * total))

        def warmup_then_cosine(step: int) -> float:
            if step < warmup:
                return (step + 1) / warmup
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1.0 + math.cos(math.pi * progress))

        scheduler = LambdaLR(optimizer, warmup_then_cosine)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
