"""A user's own model and data, unlike the example in every way the library could assume.

A small transformer encoder classifies token sequences: does token 1 occur more often
than token 2? Batches are dicts (`input_ids`, `attention_mask`, `target`), the dataset is
a plain list behind a map-style Dataset, the loaders are plain torch DataLoaders, the
metrics are `val_ce` / `val_hit_rate`, there is no `num_classes` attribute, and the
optimizer is built by hand. tests/test_own_model.py copies this file into a rendered
project in place of the example.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

from copier_lightning_core import LoaderOptions, logs_this_step

VOCAB, LENGTH = 16, 10


class CountingSequences(Dataset):
    def __init__(self, size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.rows = []
        for _ in range(size):
            ids = torch.randint(1, VOCAB, (LENGTH,), generator=generator)
            ids[torch.randint(LENGTH // 2, LENGTH + 1, (1,), generator=generator) :] = 0
            target = float((ids == 1).sum() > (ids == 2).sum())
            self.rows.append({"input_ids": ids, "attention_mask": ids != 0, "target": target})

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> dict:
        return self.rows[index]


class CountingData(L.LightningDataModule):
    def __init__(self, batch_size: int = 32, num_workers: int | str = 0, size: int = 512) -> None:
        super().__init__()
        self.batch_size, self.size = batch_size, size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_rows = CountingSequences(self.size, seed=1)
        self.val_rows = CountingSequences(self.size // 4, seed=2)

    def train_dataloader(self) -> DataLoader:
        options = self.loader_options.kwargs(self.trainer)
        return DataLoader(self.train_rows, batch_size=self.batch_size, shuffle=True, **options)

    def val_dataloader(self) -> DataLoader:
        options = self.loader_options.kwargs(self.trainer)
        return DataLoader(self.val_rows, batch_size=self.batch_size, **options)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


class CountingTransformer(L.LightningModule):
    def __init__(self, width: int = 32, layers: int = 2, lr: float = 2e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.embed = nn.Embedding(VOCAB, width)
        self.position = nn.Parameter(torch.zeros(LENGTH, width))
        layer = nn.TransformerEncoderLayer(
            width, nhead=4, dim_feedforward=2 * width, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, 1)
        self.example_input_array = {
            "input_ids": torch.ones(2, LENGTH, dtype=torch.long),
            "attention_mask": torch.ones(2, LENGTH, dtype=torch.bool),
        }

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.encoder(
            self.embed(input_ids) + self.position, src_key_padding_mask=~attention_mask
        )
        weights = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return self.head((hidden * weights).sum(1) / weights.sum(1).clamp_min(1)).squeeze(-1)

    def _loss(self, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        logits = self(batch["input_ids"], batch["attention_mask"])
        target = batch["target"].to(logits.dtype)
        hits = ((logits > 0) == (target > 0.5)).float().mean()
        return F.binary_cross_entropy_with_logits(logits, target), hits

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        loss, _ = self._loss(batch)
        if logs_this_step(self.trainer):
            self.log("train_ce", loss)
        return loss

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        loss, hits = self._loss(batch)
        self.log_dict({"val_ce": loss, "val_hit_rate": hits})

    def test_step(self, batch: dict, batch_idx: int) -> None:
        loss, hits = self._loss(batch)
        self.log_dict({"test_ce": loss, "test_hit_rate": hits})

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return torch.sigmoid(self(batch["input_ids"], batch["attention_mask"]))

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
