"""A user's ResNet: transformers' ResNetForImageClassification in a few lines of Lightning.

What it brings the library: BatchNorm running statistics (buffers a resume and a shard
must carry), in-place activations, `(images, labels)` tuple batches. The data: 16x16
images with a bright blob in one of four quadrants, the label naming the quadrant; made in
memory from a seed, served by torchdata's StatefulDataLoader with shuffling on.
tests/test_conformance.py copies this file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import ResNetConfig, ResNetForImageClassification

from copier_lightning_core import LoaderOptions

SIZE, CLASSES = 16, 4


def quadrant_images(count: int, seed: int) -> TensorDataset:
    """`count` noisy images; a blob in quadrant `label` (0: top left ... 3: bottom right)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    images = 0.3 * torch.randn(count, 3, SIZE, SIZE, generator=generator)
    half = SIZE // 2
    for image, label in zip(images, labels.tolist(), strict=True):
        top, left = half * (label // 2), half * (label % 2)
        image[:, top + 2 : top + half - 2, left + 2 : left + half - 2] += 1.5
    return TensorDataset(images, labels)


class QuadrantData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = quadrant_images(self.train_size, seed=1)
        self.val_set = quadrant_images(16, seed=2)

    def _loader(self, dataset: TensorDataset, shuffle: bool) -> StatefulDataLoader:
        options = self.loader_options.kwargs(self.trainer)
        return StatefulDataLoader(dataset, batch_size=self.batch_size, shuffle=shuffle, **options)

    def train_dataloader(self) -> StatefulDataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> StatefulDataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> StatefulDataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> StatefulDataLoader:
        return self.val_dataloader()


class ResNetClassifier(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = ResNetConfig(
            embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], num_labels=CLASSES
        )
        self.resnet = ResNetForImageClassification(config)
        self.example_input_array = torch.zeros(2, 3, SIZE, SIZE)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.resnet(pixel_values=images).logits

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(self(images), labels)

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        images, labels = batch
        self.log("val_loss", F.cross_entropy(self(images), labels))

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        images, labels = batch
        self.log("test_loss", F.cross_entropy(self(images), labels))

    def predict_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
