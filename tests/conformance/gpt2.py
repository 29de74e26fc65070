"""A user's GPT-2: transformers' GPT2LMHeadModel in a few lines of Lightning.

What it brings the library: tied input and output embeddings (one tensor under two
names: a shard, an export and a checkpoint must keep them one), dropout, and dict batches
with an attention mask over right-padded sequences of varying length. The data: counting
sequences (start, start + step, start + 2 step, ... modulo the vocabulary), learnable
after two tokens; made in memory from a seed, served by torchdata's StatefulDataLoader
with shuffling on. tests/test_conformance.py copies this file into a rendered project's
package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import GPT2Config, GPT2LMHeadModel

from copier_lightning_core import LoaderOptions

VOCAB, LENGTH = 100, 16


class CountingSequences(Dataset):
    """Sequences of 8 to 16 tokens counting up by 1, 2 or 3, padded with 0 to `LENGTH`."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        start = torch.randint(1, VOCAB, (count, 1), generator=generator)
        step = torch.randint(1, 4, (count, 1), generator=generator)
        ids = 1 + (start + step * torch.arange(LENGTH) - 1) % (VOCAB - 1)  # tokens 1..99
        lengths = torch.randint(8, LENGTH + 1, (count, 1), generator=generator)
        self.mask = (torch.arange(LENGTH) < lengths).long()
        self.ids = ids * self.mask

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[index], "attention_mask": self.mask[index]}


class CountingData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = CountingSequences(self.train_size, seed=1)
        self.val_set = CountingSequences(16, seed=2)

    def _loader(self, dataset: Dataset, shuffle: bool) -> StatefulDataLoader:
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


class GPT2LanguageModel(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = GPT2Config(
            n_layer=2,
            n_embd=32,
            n_head=2,
            vocab_size=VOCAB,
            n_positions=32,
            bos_token_id=0,  # GPT-2's own (50256) is outside this vocabulary
            eos_token_id=0,
        )
        self.gpt2 = GPT2LMHeadModel(config)
        self.example_input_array = {
            "input_ids": torch.ones(2, LENGTH, dtype=torch.long),
            "attention_mask": torch.ones(2, LENGTH, dtype=torch.long),
        }

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.gpt2(input_ids=input_ids, attention_mask=attention_mask).logits

    def _loss(self, batch: dict) -> torch.Tensor:
        logits = self(batch["input_ids"], batch["attention_mask"])
        targets = batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), targets[:, 1:].flatten())

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: dict, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self(batch["input_ids"], batch["attention_mask"]).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
