"""The library tests' own modules: tasks that look nothing like a project's example.

The library's tests run on these, never on the model and data of the project they run in
(a project replaces its example with its own): whatever the project holds, these tests
still pass.

- `ToyRegressor` / `ToyTabularData`: tabular regression, `(features, target)` tuple
  batches, no `num_classes`, no `example_input_array`, plain DataLoaders, metric `val/loss`;
  `ToyInjectedRegressor`, the same with an injectable network (`net`).
- `ToySequenceClassifier` / `ToySequenceData`: token sequences in a plain list-backed
  Dataset, dict batches (`tokens`, `mask`, `label`), `num_classes`, a dict
  `example_input_array`, shuffled loading by torchdata's `StatefulDataLoader` with the
  library's `LoaderOptions` (workers included), random token dropout drawn from torch's global RNG while training,
  and metrics named `valid_nll` / `valid_accuracy` (not `val/loss`).
- `ToyDenoiser` / `ToySignals`: unsupervised denoising of plain `(N, length)` tensor
  batches (no target, no tuple), a required injected network kept out of the
  hyperparameters (`save_hyperparameters(ignore=["net"])`), a `ReduceLROnPlateau`
  stepped on a validation metric, `val_snr_db` judged with mode max, `test_mse`.
  Not a flavour every test runs: the tests of what such a module needs use it.
- `ToyPacedRegressor` / `ToyPacedData`: the tabular regressor on a simulated device that
  is full at `saturates_at` samples (a step sleeps per started chunk of that many), and
  data whose items take `item_seconds` to load: where throughput stops growing with the
  batch size, and whether loading or the step is the bottleneck, is set, not hoped for.
  For the tests of `tune`.
- `ToyTypedRegressor` / `ToyTypedData`: the tabular task with an argument of each kind
  a checkpoint records (strings, paths, choices, containers, `Any`, an optimizer factory).
  For the tests that a checkpoint is data (trusted_classes.py).
- `ToyTiedLM`: GPT-2's layout in plain torch (token and position embeddings, blocks in a
  `ModuleList`, the output layer tied to the token embedding: one Parameter, two modules),
  a next-token model trained on `ToySequenceData`'s tokens. For the sharding tests.
- `ToyGraphRegressor` / `ToyGraphData`: node regression on small ring graphs batched as
  torch_geometric batches them, in plain torch: `ToyGraphBatch`, an object with tensor
  attributes (`x`, `edge_index`, `batch`, `y`) and `num_graphs`; a dict
  `example_input_array` whose tensors do not share a first dimension; the DataModule's
  arguments typed with jsonargparse's types. For the tests of batches of any type.
- `ToyGAN` / `ToyPoints`: a generator and a discriminator trained adversarially with
  manual optimization (`automatic_optimization = False`), two optimizers and two
  `manual_backward` per batch (the generator gets its gradient only in the second), so
  `trainer.global_step` counts two optimizer steps per batch; `training_step` returns
  nothing. Plain `(N, dim)` tensor batches from a `StatefulDataLoader` with the
  library's `LoaderOptions`. For the tests of manual optimization.
- `ToyFrozenBaseRegressor`: the tabular regressor whose first layer is a frozen base
  built from a seed (`base_seed`), as a pretrained backbone the config rebuilds; only
  the head trains. For the tests of checkpoints that leave frozen weights out.
- `ToyLoRARegressor`: the tabular regressor whose MLP trains LoRA adapters through `peft`
  (`get_peft_model`), its base weights frozen, built from a seed so the config rebuilds
  them. For the tests of adapters (needs peft; its tests skip without it).
- `ToyGuardedRegressor`: the tabular regressor with callbacks among its arguments, which
  its checkpoints record by class path. For the test that class paths of older releases
  still read.
"""

import math
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

import lightning as L
import torch
import torch.nn.functional as F
from jsonargparse.typing import NonNegativeInt, PositiveInt
from lightning.pytorch.cli import OptimizerCallable
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset, random_split
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import LoaderOptions


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


class ToyFrozenBaseRegressor(ToyRegressor):
    """The regressor with its first layer frozen, built from `base_seed`; the head trains."""

    def __init__(
        self, num_features: int = 8, hidden: int = 16, lr: float = 1e-2, base_seed: int = 7
    ) -> None:
        super().__init__(num_features, hidden, lr)
        base = nn.Linear(num_features, hidden)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(base_seed)
            for parameter in base.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.3)
                parameter.requires_grad_(False)
        self.net[0] = base


class ToyLoRARegressor(ToyRegressor):
    """The regressor with LoRA adapters on both layers of its MLP; the base is frozen."""

    def __init__(self, num_features: int = 8, hidden: int = 16, lr: float = 1e-2) -> None:
        from peft import LoraConfig, get_peft_model

        super().__init__(num_features, hidden, lr)
        torch.manual_seed(7)  # the frozen base, as a pretrained file would, is the same each time
        base = nn.Sequential(nn.Linear(num_features, hidden), nn.ReLU(), nn.Linear(hidden, 1))
        self.net = get_peft_model(base, LoraConfig(r=4, target_modules=["0", "2"]))
        self.example_input_array = torch.randn(4, num_features)


class ToyInjectedRegressor(ToyRegressor):
    """The regressor with a network injected by the config (`--model.net torch.nn.Linear`),
    as the example's model takes one; None keeps the default MLP."""

    def __init__(
        self,
        num_features: int = 8,
        hidden: int = 16,
        lr: float = 1e-2,
        net: nn.Module | None = None,
    ) -> None:
        super().__init__(num_features, hidden, lr)
        self.save_hyperparameters(ignore=["net"])
        if net is not None:
            self.net = net


class ToyGuardedRegressor(ToyRegressor):
    """The regressor with callbacks among its arguments (`--model.guards`), which its
    checkpoints record by class path: for the test that the class paths of older releases
    still read (platform/old_paths.py)."""

    def __init__(
        self,
        num_features: int = 8,
        hidden: int = 16,
        lr: float = 1e-2,
        guards: list[L.Callback] | None = None,  # Optional: its items are read through it
    ) -> None:
        super().__init__(num_features, hidden, lr)
        self.guards = guards


class PacedSamples(Dataset):
    """Regression samples, each taking `item_seconds` to load (a slow decode or augment)."""

    def __init__(self, size: int, num_features: int, item_seconds: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.features = torch.randn(size, num_features, generator=generator)
        self.targets = self.features.sum(1, keepdim=True)
        self.item_seconds = item_seconds

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.item_seconds:
            time.sleep(self.item_seconds)
        return self.features[index], self.targets[index]


class ToyPacedData(L.LightningDataModule):
    """`num_samples` training samples behind a loader with the library's worker options."""

    def __init__(
        self,
        num_features: int = 8,
        num_samples: int = 512,
        batch_size: int = 16,
        num_workers: int | str = 0,
        item_seconds: float = 0.0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        n, seconds = self.hparams.num_features, self.hparams.item_seconds
        self.train_set = PacedSamples(self.hparams.num_samples, n, seconds, seed=1)
        self.val_set = PacedSamples(32, n, 0.0, seed=2)

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        options = self.loader_options.kwargs(self.trainer)
        return StatefulDataLoader(
            dataset, batch_size=self.hparams.batch_size, shuffle=shuffle, **options
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)


class ToyPacedRegressor(ToyRegressor):
    """A step of n samples takes ceil(n / saturates_at) x `chunk_seconds` more (slept): as
    on a device whose cores are all busy from `saturates_at` samples on, samples per second
    stop growing there."""

    def __init__(
        self,
        num_features: int = 8,
        hidden: int = 16,
        lr: float = 1e-2,
        chunk_seconds: float = 0.0,
        saturates_at: int = 32,
    ) -> None:
        super().__init__(num_features, hidden, lr)
        self.save_hyperparameters()

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        chunks = math.ceil(len(batch[0]) / self.hparams.saturates_at)
        time.sleep(chunks * self.hparams.chunk_seconds)
        return super().training_step(batch, batch_idx)


class TokenSequences(Dataset):
    """A plain map-style Dataset over a Python list: integer index in, dict out.

    The label is which third of the vocabulary the sequence's tokens mostly come from.
    """

    def __init__(self, size: int, num_classes: int, vocab_size: int, length: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        labels = torch.randint(0, num_classes, (size,), generator=generator)
        band = vocab_size // num_classes
        own = labels[:, None] * band + torch.randint(0, band, (size, length), generator=generator)
        noise = torch.randint(0, vocab_size, (size, length), generator=generator)
        keep = torch.rand(size, length, generator=generator) < 0.7
        lengths = torch.randint(length // 2, length + 1, (size,), generator=generator)
        self.items = [
            {
                "tokens": torch.where(keep[i], own[i], noise[i]),
                "mask": torch.arange(length) < lengths[i],
                "label": labels[i],
            }
            for i in range(size)
        ]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return self.items[index]


class ToySequenceData(L.LightningDataModule):
    def __init__(
        self,
        num_classes: int = 3,
        vocab_size: int = 30,
        length: int = 12,
        train_size: int = 384,
        val_size: int = 96,
        batch_size: int = 32,
        num_workers: int | str = 0,
        prefetch_factor: int | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loader_options = LoaderOptions(num_workers, prefetch_factor=prefetch_factor)

    def setup(self, stage: str) -> None:
        shape = (self.hparams.num_classes, self.hparams.vocab_size, self.hparams.length)
        self.train_set = TokenSequences(self.hparams.train_size, *shape, seed=1)
        self.val_set = TokenSequences(self.hparams.val_size, *shape, seed=2)

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        return StatefulDataLoader(
            dataset,
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            **self.loader_options.kwargs(self.trainer),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)


class ToySequenceClassifier(L.LightningModule):
    """Mean of masked token embeddings -> linear layer; dict batches; `valid_*` metrics."""

    def __init__(
        self, num_classes: int = 3, vocab_size: int = 30, dim: int = 16, lr: float = 3e-2
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.num_classes = num_classes
        self.embed = nn.Embedding(vocab_size, dim)
        self.head = nn.Linear(dim, num_classes)
        self.example_input_array = {
            "tokens": torch.zeros(2, 12, dtype=torch.long),
            "mask": torch.ones(2, 12, dtype=torch.bool),
        }

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        weights = mask.unsqueeze(-1).to(self.embed.weight.dtype)  # (N, T, 1)
        pooled = (self.embed(tokens) * weights).sum(1) / weights.sum(1).clamp_min(1.0)
        return self.head(pooled)  # (N, num_classes)

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        # Token dropout from the global RNG: a resume is exact only if its state is restored.
        mask = batch["mask"] & (torch.rand(batch["mask"].shape, device=self.device) > 0.1)
        loss = F.cross_entropy(self(batch["tokens"], mask), batch["label"])
        self.log("train_nll", loss)
        return loss

    def _evaluate(self, batch: dict[str, torch.Tensor], prefix: str) -> None:
        logits = self(batch["tokens"], batch["mask"])
        accuracy = (logits.argmax(-1) == batch["label"]).float().mean()
        self.log(f"{prefix}_nll", F.cross_entropy(logits, batch["label"]))
        self.log(f"{prefix}_accuracy", accuracy)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "valid")

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self(batch["tokens"], batch["mask"]).softmax(-1)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)


class ToySignals(L.LightningDataModule):
    """Clean sinusoids, one `(length,)` tensor per item: batches are plain tensors."""

    def __init__(self, length: int = 32, num_samples: int = 256, batch_size: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        n, length = self.hparams.num_samples, self.hparams.length
        frequency = 1 + 4 * torch.rand(n, 1, generator=generator)
        phase = 6.28 * torch.rand(n, 1, generator=generator)
        signals = torch.sin(frequency * torch.linspace(0, 6.28, length) + phase)
        split = n * 3 // 4
        self.train_set, self.val_set = signals[:split], signals[split:]  # tensors are Datasets

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)


class ToyDenoiser(L.LightningModule):
    """Removes Gaussian noise with an injected network; evaluation noise is fixed per batch."""

    def __init__(self, net: nn.Module, noise: float = 0.3, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters(ignore=["net"])
        self.net = net

    def forward(self, noisy: torch.Tensor) -> torch.Tensor:
        return self.net(noisy)

    def _error(self, clean: torch.Tensor, batch_idx: int) -> torch.Tensor:
        noise = torch.randn(clean.shape, generator=torch.Generator().manual_seed(batch_idx))
        return F.mse_loss(self(clean + self.hparams.noise * noise.to(clean)), clean)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        noisy = batch + self.hparams.noise * torch.randn_like(batch)
        loss = F.mse_loss(self(noisy), batch)
        self.log("train_mse", loss)
        return loss

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        error = self._error(batch, batch_idx)
        self.log("val_snr_db", 10 * torch.log10(batch.pow(2).mean() / error))

    def test_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        self.log("test_mse", self._error(batch, batch_idx))

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="max", patience=1)
        scheduler = {"scheduler": plateau, "monitor": "val_snr_db"}
        return {"optimizer": optimizer, "lr_scheduler": scheduler}


class ToyBlock(nn.Module):
    """A pre-norm residual MLP: to sharding, what a transformer block is (one unit of forward)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.norm(x))


class ToyTiedLM(L.LightningModule):
    """Next-token prediction over `ToySequenceData`'s tokens (its labels and masks unused)."""

    def __init__(
        self,
        vocab_size: int = 30,
        length: int = 12,
        dim: int = 16,
        depth: int = 2,
        lr: float = 1e-2,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.wte = nn.Embedding(vocab_size, dim)
        self.wpe = nn.Embedding(length, dim)
        self.blocks = nn.ModuleList(ToyBlock(dim) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size, bias=False)
        self.head.weight = self.wte.weight  # tied, as GPT-2's lm_head and wte

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.wte(tokens) + self.wpe(positions)  # (N, T, dim)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))  # (N, T, vocab_size)

    def _loss(self, tokens: torch.Tensor) -> torch.Tensor:
        logits = self(tokens[:, :-1])
        return F.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch["tokens"])
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch["tokens"]))

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


class ToyTypedRegressor(ToyInjectedRegressor):
    """The injected regressor with an argument of each kind a checkpoint records, declared
    as users declare them: strings, paths, choices, containers of plain values, an
    unannotated one, `Any`, an optimizer factory. For the tests that a checkpoint's values
    are taken by the types their class declares (trusted_classes.py)."""

    def __init__(
        self,
        num_features: int = 8,
        hidden: int = 16,
        lr: float = 1e-2,
        net: nn.Module | None = None,
        optimizer: OptimizerCallable = torch.optim.Adam,
        name: str = "toy",
        tag: str | None = None,
        log_dir: Path | None = None,
        reduction: Literal["mean", "sum"] = "mean",
        loss_weights: dict[str, float] | None = None,
        widths: list[int] | None = None,
        extra: Any = None,
        notes=None,
        options: dict | None = None,
    ) -> None:
        super().__init__(num_features, hidden, lr, net)
        self.save_hyperparameters(ignore=["net"])
        self.optimizer = optimizer

    def configure_optimizers(self):
        return self.optimizer(self.parameters())


class ToyTypedData(ToyTabularData):
    """The tabular data with the string-valued arguments DataModules declare."""

    def __init__(
        self,
        num_features: int = 8,
        num_samples: int = 512,
        batch_size: int = 64,
        source: str = "memory",
        cache_dir: Path | None = None,
        split: Literal["random", "ordered"] = "random",
    ) -> None:
        super().__init__(num_features, num_samples, batch_size)
        self.save_hyperparameters()


class ToyPoints(L.LightningDataModule):
    """Points of a shifted Gaussian, `(dim,)` per item: what the generator learns to draw."""

    def __init__(
        self,
        dim: int = 4,
        num_samples: int = 256,
        batch_size: int = 32,
        num_workers: int | str = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        generator = torch.Generator().manual_seed(0)
        points = 2.0 + 0.5 * torch.randn(
            self.hparams.num_samples, self.hparams.dim, generator=generator
        )
        split = self.hparams.num_samples * 3 // 4
        self.train_set, self.val_set = points[:split], points[split:]  # tensors are Datasets

    def _loader(self, dataset: torch.Tensor, shuffle: bool) -> DataLoader:
        options = self.loader_options.kwargs(self.trainer)
        return StatefulDataLoader(
            dataset, batch_size=self.hparams.batch_size, shuffle=shuffle, **options
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)


class ToyGAN(L.LightningModule):
    """A GAN step as Lightning's manual-optimization example writes it: the discriminator
    first, on real points and detached fakes (the generator gets no gradient there), then
    the generator through the discriminator. `val_gap` is the distance between the means
    of real and generated points."""

    def __init__(self, dim: int = 4, latent: int = 4, hidden: int = 16, lr: float = 1e-3) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = nn.Sequential(nn.Linear(latent, hidden), nn.ReLU(), nn.Linear(hidden, dim))
        self.discriminator = nn.Sequential(
            nn.Linear(dim, hidden), nn.LeakyReLU(0.2), nn.Linear(hidden, 1)
        )

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.generator(noise)

    def _noise(self, n: int) -> torch.Tensor:
        return torch.randn(n, self.hparams.latent, device=self.device)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        g_opt, d_opt = self.optimizers()
        fake = self(self._noise(len(batch)))  # (N, dim)
        real_logits, fake_logits = self.discriminator(batch), self.discriminator(fake.detach())
        d_loss = F.binary_cross_entropy_with_logits(
            real_logits, torch.ones_like(real_logits)
        ) + F.binary_cross_entropy_with_logits(fake_logits, torch.zeros_like(fake_logits))
        d_opt.zero_grad()
        self.manual_backward(d_loss)
        d_opt.step()
        fooled = self.discriminator(fake)
        g_loss = F.binary_cross_entropy_with_logits(fooled, torch.ones_like(fooled))
        g_opt.zero_grad()
        self.manual_backward(g_loss)
        g_opt.step()
        self.log_dict({"train/d_loss": d_loss.detach(), "train/g_loss": g_loss.detach()})

    def validation_step(self, batch: torch.Tensor, batch_idx: int) -> None:
        fake = self(self._noise(len(batch)))
        self.log("val_gap", (fake.mean(0) - batch.mean(0)).norm())

    def configure_optimizers(self):
        betas = (0.5, 0.999)
        return (
            torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=betas),
            torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=betas),
        )


class ToyGraphBatch:
    """Graphs batched as torch_geometric's `Batch` batches them, in plain torch: node
    features `x` (nodes, F), `edge_index` (2, edges) into the batch's nodes, `batch`
    (nodes,) the graph of each node, node targets `y` (nodes,), and `num_graphs`. Not a
    tensor, tuple, dict or dataclass: an object with tensor attributes."""

    def __init__(
        self,
        x: torch.Tensor,
        edge_index: torch.Tensor,
        batch: torch.Tensor,
        y: torch.Tensor,
        num_graphs: int,
    ) -> None:
        self.x, self.edge_index, self.batch, self.y = x, edge_index, batch, y
        self.num_graphs = num_graphs

    def to(self, device: Any, **kwargs: Any) -> Any:  # a ToyGraphBatch
        """Lightning moves any batch object that has `to` (as torch_geometric's does)."""
        tensors = (self.x, self.edge_index, self.batch, self.y)
        return ToyGraphBatch(*(t.to(device, **kwargs) for t in tensors), self.num_graphs)


def collate_graphs(graphs: list[dict[str, torch.Tensor]]) -> ToyGraphBatch:
    """One disjoint graph of many: nodes stacked, each graph's edges shifted past the
    nodes before it."""
    offsets = torch.tensor([0, *(len(g["x"]) for g in graphs)]).cumsum(0)
    return ToyGraphBatch(
        x=torch.cat([g["x"] for g in graphs]),
        edge_index=torch.cat(
            [g["edge_index"] + o for g, o in zip(graphs, offsets, strict=False)], 1
        ),
        batch=torch.cat([torch.full((len(g["x"]),), i) for i, g in enumerate(graphs)]),
        y=torch.cat([g["y"] for g in graphs]),
        num_graphs=len(graphs),
    )


def ring_graphs(size: int, num_features: int, seed: int) -> list[dict[str, torch.Tensor]]:
    """Rings of 3 to 6 nodes; a node's target is its features' sum plus its neighbours'."""
    generator = torch.Generator().manual_seed(seed)
    graphs = []
    for _ in range(size):
        n = int(torch.randint(3, 7, (), generator=generator))
        x = torch.randn(n, num_features, generator=generator)
        nodes = torch.arange(n)
        edge_index = torch.stack(
            [torch.cat([nodes, nodes]), torch.cat([nodes.roll(1), nodes.roll(-1)])]
        )
        own = x.sum(1)
        y = own + torch.zeros(n).index_add_(0, edge_index[1], own[edge_index[0]])
        graphs.append({"x": x, "edge_index": edge_index, "y": y})
    return graphs


class ToyGraphData(L.LightningDataModule):
    """Ring graphs in `ToyGraphBatch`es; its arguments typed with jsonargparse's types, as
    a DataModule may type them (the parser then refuses bad values itself)."""

    def __init__(
        self,
        num_features: int = 4,
        train_size: int = 96,
        val_size: int = 16,
        batch_size: PositiveInt = 8,
        num_workers: NonNegativeInt | Literal["auto"] = 0,
        prefetch_factor: PositiveInt | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.loader_options = LoaderOptions(num_workers, prefetch_factor=prefetch_factor)

    def setup(self, stage: str) -> None:
        n = self.hparams.num_features
        self.train_set = ring_graphs(self.hparams.train_size, n, seed=1)
        self.val_set = ring_graphs(self.hparams.val_size, n, seed=2)

    def _loader(self, graphs: list[dict[str, torch.Tensor]], shuffle: bool) -> DataLoader:
        return DataLoader(
            graphs,  # type: ignore[arg-type]  # a list is a map-style dataset
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            collate_fn=collate_graphs,
            **self.loader_options.kwargs(self.trainer),
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)


class ToyGraphRegressor(L.LightningModule):
    """One round of message passing, then each node's value with its graph's mean as
    context. Its `example_input_array` is a dict whose tensors do not share a first
    dimension: `x` (8, F), `edge_index` (2, 16), `batch` (8,)."""

    # Nodes and edges vary from batch to batch (a test sets None: no declaration).
    export_dynamic_dims: ClassVar[dict[str, dict[int, str]] | None] = {
        "x": {0: "nodes"},
        "batch": {0: "nodes"},
        "edge_index": {1: "edges"},
    }

    def __init__(self, num_features: int = 4, hidden: int = 16, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.encode = nn.Linear(num_features, hidden)
        self.head = nn.Linear(2 * hidden, 1)
        generator = torch.Generator().manual_seed(0)
        example = collate_graphs(ring_graphs(2, num_features, seed=3))
        self.example_input_array = {
            "x": torch.randn(example.x.shape, generator=generator),
            "edge_index": example.edge_index,
            "batch": example.batch,
        }

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor
    ) -> torch.Tensor:
        h = self.encode(x)  # (nodes, hidden)
        h = torch.relu(h + torch.zeros_like(h).index_add(0, edge_index[1], h[edge_index[0]]))
        # Each graph's mean, gathered back to its nodes; at most one graph per node, so the
        # sums need no graph count (a shape that would depend on the values of `batch`).
        sums = torch.zeros_like(h).index_add(0, batch, h)
        counts = torch.zeros_like(h[:, :1]).index_add(0, batch, torch.ones_like(h[:, :1]))
        context = (sums / counts.clamp_min(1.0))[batch]
        return self.head(torch.cat([h, context], 1)).squeeze(1)  # (nodes,)

    def _loss(self, batch: ToyGraphBatch) -> torch.Tensor:
        return F.mse_loss(self(batch.x, batch.edge_index, batch.batch), batch.y)

    def training_step(self, batch: ToyGraphBatch, batch_idx: int) -> torch.Tensor:
        loss = self._loss(batch)
        self.log("train/loss", loss, batch_size=batch.num_graphs)
        return loss

    def validation_step(self, batch: ToyGraphBatch, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), batch_size=batch.num_graphs)

    def predict_step(self, batch: ToyGraphBatch, batch_idx: int) -> torch.Tensor:
        return self(batch.x, batch.edge_index, batch.batch)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
