"""A user's LoRA fine-tune: peft's adapters on transformers' LlamaForCausalLM.

What it brings the library: `get_peft_model(model, LoraConfig(...))`, a frozen base
(most parameters without gradients, none of them in the optimizer) and small trainable
adapters inside every linear layer, under peft's wrapper modules and names
(`base_model.model...lora_A.default.weight`); rotary position embeddings and RMSNorm.
The base is built from LlamaConfig (random weights: nothing is downloaded), so the
adapters do all the learning. The data: counting sequences (start, start + step, ...
modulo the vocabulary), learnable after two tokens; made in memory from a seed, served
by torchdata's StatefulDataLoader with shuffling on. tests/test_conformance.py copies
this file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader
from transformers import LlamaConfig, LlamaForCausalLM

from copier_lightning_core import LoaderOptions

VOCAB, LENGTH = 64, 16


class Counting(Dataset):
    """Token sequences counting up by 1, 2 or 3 from a random start, modulo VOCAB."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        start = torch.randint(0, VOCAB, (count, 1), generator=generator)
        step = torch.randint(1, 4, (count, 1), generator=generator)
        self.ids = (start + step * torch.arange(LENGTH)) % VOCAB

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, index: int) -> torch.Tensor:
        return self.ids[index]


class CountingData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = Counting(self.train_size, seed=1)
        self.val_set = Counting(16, seed=2)

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


class LoraLanguageModel(L.LightningModule):
    def __init__(self, lr: float = 0.01, rank: int = 8) -> None:
        super().__init__()
        self.save_hyperparameters()
        config = LlamaConfig(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            max_position_embeddings=32,
            bos_token_id=0,
            eos_token_id=0,
            pad_token_id=0,
        )
        lora = LoraConfig(
            r=rank,
            lora_alpha=2 * rank,
            lora_dropout=0.0,
            target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"],
        )
        self.llama = get_peft_model(LlamaForCausalLM(config), lora)  # the base frozen
        self.example_input_array = torch.ones(2, LENGTH, dtype=torch.long)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.llama(input_ids=input_ids).logits  # (batch, length, VOCAB)

    def _loss(self, ids: torch.Tensor) -> torch.Tensor:
        logits = self(ids)
        return F.cross_entropy(logits[:, :-1].flatten(0, 1), ids[:, 1:].flatten())

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch))

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch))

    def predict_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self(batch).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        adapters = [p for p in self.parameters() if p.requires_grad]
        return torch.optim.AdamW(adapters, lr=self.hparams.lr)
