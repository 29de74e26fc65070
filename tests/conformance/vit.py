"""A user's ViT with dropout: transformers' ViTForImageClassification in a few lines of Lightning.

What it brings the library: dropout, which draws from torch's RNG at every training
step (a resume must restore it to continue bit-exactly), attention, a CLS token and
position embeddings as bare parameters. The data: 16x16 images whose stripes run one of
four ways, the label naming the direction; made in memory from a seed, served by
torchdata's StatefulDataLoader with shuffling on.
tests/test_conformance.py copies this file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import ViTConfig, ViTForImageClassification

from copier_lightning_core import LoaderOptions

SIZE, CLASSES = 16, 4


def striped_images(count: int, seed: int) -> TensorDataset:
    """`count` noisy images striped horizontally, vertically or along a diagonal (label)."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator)
    rows, cols = torch.meshgrid(torch.arange(SIZE), torch.arange(SIZE), indexing="ij")
    along = torch.stack([rows, cols, rows + cols, rows - cols]).float()  # (4, H, W)
    stripes = torch.cos(along * torch.pi / 2)[labels]  # (N, H, W), period 4 pixels
    images = stripes[:, None] + 0.3 * torch.randn(count, 3, SIZE, SIZE, generator=generator)
    return TensorDataset(images, labels)


class StripesData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = striped_images(self.train_size, seed=1)
        self.val_set = striped_images(16, seed=2)

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


class ViTClassifier(L.LightningModule):
    def __init__(self, lr: float = 0.003) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = ViTConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=SIZE,
            patch_size=4,
            num_labels=CLASSES,
            hidden_dropout_prob=0.1,
        )
        self.vit = ViTForImageClassification(config)
        self.example_input_array = torch.zeros(2, 3, SIZE, SIZE)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        return self.vit(pixel_values=images).logits

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
