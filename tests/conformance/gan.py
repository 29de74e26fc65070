"""A user's GAN: manual optimization of a generator and a discriminator, two optimizers.

What it brings the library: `automatic_optimization = False`, two optimizers and two
`manual_backward` calls per batch (so `trainer.global_step` counts two optimizer steps
per batch), a backward pass that reaches only half of the parameters (the discriminator's
on detached fakes: DDP must be told), and noise drawn from torch's global RNG in every
training step (a resume must restore it). The data: 2-D points around (2, -1); the
generator (a small MLP) maps 8-D noise to points, the discriminator (another) scores them.
Validation has no adversary: its loss is how far the generated points' mean and spread are
from the real ones', on fixed noise, so that it falls as the generator learns. Served by
torchdata's StatefulDataLoader with shuffling on. tests/test_conformance.py copies this
file into a rendered project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import LoaderOptions

LATENT = 8
CENTER, SPREAD = torch.tensor([2.0, -1.0]), 0.3


class Points(Dataset):
    """Real 2-D points around CENTER, each with a noise vector for the generator."""

    def __init__(self, count: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.real = CENTER + SPREAD * torch.randn(count, 2, generator=generator)
        self.noise = torch.randn(count, LATENT, generator=generator)

    def __len__(self) -> int:
        return len(self.real)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.real[index], self.noise[index]


class PointsData(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.train_size = batch_size, train_size
        self.loader_options = LoaderOptions(num_workers)

    def setup(self, stage: str) -> None:
        self.train_set = Points(self.train_size, seed=1)
        self.val_set = Points(16, seed=2)

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


def mlp(inputs: int, outputs: int) -> nn.Sequential:
    return nn.Sequential(nn.Linear(inputs, 32), nn.LeakyReLU(0.2), nn.Linear(32, outputs))


class PointGAN(L.LightningModule):
    def __init__(self, lr: float = 0.01) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = mlp(LATENT, 2)
        self.discriminator = mlp(2, 1)
        self.example_input_array = torch.zeros(2, LATENT)

    def forward(self, noise: torch.Tensor) -> torch.Tensor:
        return self.generator(noise)  # (batch, LATENT) -> (batch, 2)

    def training_step(self, batch: tuple, batch_idx: int) -> None:
        real, _ = batch
        opt_g, opt_d = self.optimizers()
        fake = self(torch.randn(len(real), LATENT, device=self.device))
        ones, zeros = torch.ones(len(real), 1, device=self.device), torch.zeros_like(fake[:, :1])
        # The discriminator: real -> 1, fake -> 0; the fakes detached, the generator untouched.
        d_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), ones)
        d_loss += F.binary_cross_entropy_with_logits(self.discriminator(fake.detach()), zeros)
        opt_d.zero_grad()
        self.manual_backward(d_loss)
        opt_d.step()
        # The generator: make the discriminator say 1 for fakes.
        g_loss = F.binary_cross_entropy_with_logits(self.discriminator(fake), ones)
        opt_g.zero_grad()
        self.manual_backward(g_loss)
        opt_g.step()
        self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

    def _distance(self, batch: tuple) -> torch.Tensor:
        """How far the generated points' mean and spread are from the real points'."""
        real, noise = batch
        fake = self(noise)
        return F.mse_loss(fake.mean(0), real.mean(0)) + F.mse_loss(fake.std(0), real.std(0))

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self.log("val_loss", self._distance(batch))

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self.log("test_loss", self._distance(batch))

    def predict_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        return self(batch[1])

    def configure_optimizers(self) -> list[torch.optim.Optimizer]:
        betas = (0.5, 0.999)  # the usual GAN momentum
        return [
            torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr, betas=betas),
            torch.optim.Adam(self.discriminator.parameters(), lr=self.hparams.lr, betas=betas),
        ]
