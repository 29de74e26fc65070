# Managed by the template; local edits are merged on update.
"""A tabular regression toy: a LightningModule and DataModule unlike the example.

It declares no `num_classes`, logs no accuracy and returns plain tensors from
`predict_step`, so the suite proves the template's features work with any module.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset, random_split


class ToyTabularData(L.LightningDataModule):
    def __init__(self, num_features: int = 8, num_samples: int = 512, batch_size: int = 64) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(
            self.hparams.num_samples, self.hparams.num_features, generator=generator
        )
        weights = torch.randn(self.hparams.num_features, 1, generator=generator)
        targets = features @ weights + 0.1 * torch.randn(
            self.hparams.num_samples, 1, generator=generator
        )
        self.train_set, self.val_set, self.test_set = random_split(
            TensorDataset(features, targets), [0.75, 0.125, 0.125], generator=generator
        )

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)

    def predict_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class ToyRegressor(L.LightningModule):
    def __init__(self, num_features: int = 8, hidden: int = 16, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features)

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        features, targets = batch
        loss = F.mse_loss(self(features), targets)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        features, targets = batch
        self.log("val/loss", F.mse_loss(self(features), targets))

    def test_step(self, batch, batch_idx: int) -> None:
        features, targets = batch
        self.log("test/loss", F.mse_loss(self(features), targets))

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        features, _ = batch
        return self(features)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
