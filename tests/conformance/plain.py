"""A user's BERT on a plain `torch.utils.data.DataLoader`: the loader most code has.

What it brings the library: a DataModule that builds `torch.utils.data.DataLoader(ds,
batch_size=8, shuffle=True, num_workers=...)` itself, with no generator and without
`LoaderOptions` (torch's RandomSampler, whose position no checkpoint holds): the
library rebuilds it as torchdata's StatefulDataLoader in a one-process run, so a run
killed mid-epoch must still resume exactly; under DDP / FSDP2 Lightning's
DistributedSampler orders each epoch. The model: transformers' BertForSequenceClassification
(token type embeddings, a pooler, dropout). The data: token sequences drawn from one of
two halves of the vocabulary, the label naming which; made in memory from a seed.
tests/test_conformance.py copies this file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification

VOCAB, LENGTH, CLASSES = 50, 12, 2


class HalfVocabularies(Dataset):
    """Sequences of tokens 2..25 (label 0) or 26..49 (label 1); token 1 first, as [CLS]."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.labels = torch.randint(0, CLASSES, (count,), generator=generator)
        half = VOCAB // 2 - 1  # 24 tokens per class
        tokens = torch.randint(0, half, (count, LENGTH), generator=generator)
        self.ids = 2 + tokens + half * self.labels[:, None]
        self.ids[:, 0] = 1

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.ids[index], self.labels[index]


class HalfVocabularyData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.num_workers, self.train_size = batch_size, num_workers, train_size

    def setup(self, stage: str) -> None:
        self.train_set = HalfVocabularies(self.train_size, seed=1)
        self.val_set = HalfVocabularies(16, seed=2)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(
            self.train_set, batch_size=self.batch_size, shuffle=True, num_workers=self.num_workers
        )

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.batch_size, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


class BertClassifier(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = BertConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=LENGTH,
            num_labels=CLASSES,
        )
        self.bert = BertForSequenceClassification(config)
        self.example_input_array = torch.ones(2, LENGTH, dtype=torch.long)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids).logits

    def _loss(self, batch: tuple) -> torch.Tensor:
        ids, labels = batch
        return F.cross_entropy(self(ids), labels)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self(batch[0]).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
