"""A user's 3-D segmentation network: MONAI's UNet with spatial_dims=3.

What it brings the library: 3-D convolutions and transposed convolutions on 5-D
tensors (batch, channel, depth, height, width), residual units with instance norm and
PReLU, a per-voxel loss. The data: 16^3 volumes of noise holding a brighter box of
random size and place; the target is the box's mask. Made in memory from a seed, served
by torchdata's StatefulDataLoader with shuffling on. tests/test_conformance.py copies
this file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from monai.networks.nets import UNet
from torch.utils.data import TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import LoaderOptions

SIZE = 16


def boxes(count: int, seed: int) -> TensorDataset:
    """`count` noisy volumes (1, SIZE, SIZE, SIZE), each with a bright box; its mask."""
    generator = torch.Generator().manual_seed(seed)
    volumes = 0.5 * torch.randn(count, 1, SIZE, SIZE, SIZE, generator=generator)
    masks = torch.zeros(count, 1, SIZE, SIZE, SIZE)
    corners = torch.randint(0, SIZE // 2, (count, 3), generator=generator).tolist()
    sides = torch.randint(4, SIZE // 2 + 1, (count, 3), generator=generator).tolist()
    for mask, (z, y, x), (d, h, w) in zip(masks, corners, sides, strict=True):
        mask[:, z : z + d, y : y + h, x : x + w] = 1.0
    return TensorDataset(volumes + masks, masks)


class BoxesData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = boxes(self.train_size, seed=1)
        self.val_set = boxes(16, seed=2)

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


class BoxSegmenter(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.unet = UNet(
            spatial_dims=3,
            in_channels=1,
            out_channels=1,
            channels=(4, 8, 16),
            strides=(2, 2),
            num_res_units=1,
        )
        self.example_input_array = torch.zeros(2, 1, SIZE, SIZE, SIZE)

    def forward(self, volumes: torch.Tensor) -> torch.Tensor:
        return self.unet(volumes)  # (batch, 1, D, H, W) logits

    def _loss(self, batch: list) -> torch.Tensor:
        volumes, masks = batch
        return F.binary_cross_entropy_with_logits(self(volumes), masks)

    def training_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: list, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: list, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch: list, batch_idx: int) -> torch.Tensor:
        return self(batch[0]) > 0

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
