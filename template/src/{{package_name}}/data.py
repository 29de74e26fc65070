"""The data: a Dataset and the LightningDataModule that prepares, splits and loads it.

YOURS to edit (the template never overwrites it on update). Replace the example gratings
with your own data; keep the shape of the class: `prepare_data` writes or downloads once
(rank 0 only), `setup` builds the splits, `__getitem__` reads one item lazily.

The example is a task a trivial baseline cannot solve: each image is a noisy oriented
grating in random colours, standardised per channel, so a classifier that only sees the
per-channel means stays at chance (1 / num_classes) while a small CNN learns the
orientation. It is generated offline from a seed: nothing is downloaded.
"""

import errno
import hashlib
import json
import math
import shutil
import tempfile
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
from copier_lightning_core import LoaderOptions, Refusal, project_path
from jsonargparse.typing import NonNegativeInt, PositiveInt
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

SPLITS = ("train", "val", "test")
# What a write fails with on a full disk, or over a user's quota (HPC home folders).
FULL_DISK = frozenset({errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)})


def make_gratings(
    num_images: int, num_classes: int, image_size: int, seed_sequence: np.random.SeedSequence
) -> tuple[np.ndarray, np.ndarray]:
    """Draw `num_images` gratings, one orientation class each, as uint8 (N, 3, H, W) images."""
    rng = np.random.default_rng(seed_sequence)
    labels = rng.integers(0, num_classes, size=num_images)
    angle = labels * math.pi / num_classes + rng.uniform(-0.1, 0.1, num_images)
    cycles = rng.uniform(2.5, 5.0, num_images)  # stripes across the image
    phase = rng.uniform(0, 2 * math.pi, num_images)
    centre = rng.uniform(0.3, 0.7, (num_images, 2))
    width = rng.uniform(0.2, 0.35, num_images)
    colour = rng.uniform(-1.0, 1.0, (num_images, 3))  # sign flips the polarity per channel

    grid = np.linspace(0.0, 1.0, image_size)
    ys, xs = np.meshgrid(grid, grid, indexing="ij")  # (H, W)
    per = (slice(None), None, None)  # broadcast a per-image value over (H, W)
    along = xs * np.cos(angle)[per] + ys * np.sin(angle)[per]
    wave = np.cos(2 * math.pi * cycles[per] * along + phase[per])
    dist2 = (xs - centre[:, 0][per]) ** 2 + (ys - centre[:, 1][per]) ** 2
    window = np.exp(-dist2 / (2 * width[per] ** 2))
    pattern = (wave * window)[:, None]  # (N, 1, H, W)
    images = colour[:, :, None, None] * pattern + rng.normal(
        0, 0.6, (num_images, 3, image_size, image_size)
    )
    return np.clip(128 + 64 * images, 0, 255).astype(np.uint8), labels.astype(np.int64)


class GratingsDataset(Dataset):
    """One split on disk (`<split>_images.npy`, `<split>_labels.npy`), read lazily.

    The arrays are memory-mapped on first access, in the process that reads them, so
    DataLoader workers share the page cache instead of pickling copies. Items are
    standardised per image and channel; augmentation happens later, on whole batches.
    """

    def __init__(self, root: Path, split: str) -> None:
        self.images_path = root / f"{split}_images.npy"
        self.labels = np.load(root / f"{split}_labels.npy")
        self._images: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self._images is None:
            self._images = np.load(self.images_path, mmap_mode="r")
        image = torch.from_numpy(self._images[index].astype(np.float32))
        # Per-image, per-channel standardisation: removes the colour and brightness cues.
        mean = image.mean(dim=(1, 2), keepdim=True)
        std = image.std(dim=(1, 2), keepdim=True).clamp_min(1e-6)
        return (image - mean) / std, int(self.labels[index])


def shift_and_turn(images: torch.Tensor, max_shift: int = 2) -> torch.Tensor:
    """Randomly shift and turn the images of an (N, C, H, W) batch, each its own way.

    Each image is rolled by up to `max_shift` pixels per axis and, with probability 1/2,
    turned by 180 degrees, which keeps a grating's orientation (its label).

    The draws come from torch's global RNG on the CPU: the framework saves and restores
    it with every checkpoint, so a resumed run augments exactly as an uninterrupted one
    would, on any device. Both moves permute pixels, so standardisation is unchanged.
    """
    n, _, height, width = images.shape
    shifts = torch.randint(-max_shift, max_shift + 1, (n, 2))
    turned = torch.rand(n) < 0.5
    rows = (torch.arange(height) - shifts[:, :1]) % height  # (N, H): torch.roll's indices
    cols = (torch.arange(width) - shifts[:, 1:]) % width  # (N, W)
    rows = torch.where(turned[:, None], rows.flip(1), rows)  # a 180 degree turn reverses both
    cols = torch.where(turned[:, None], cols.flip(1), cols)
    rows, cols = rows.to(images.device), cols.to(images.device)
    batch = torch.arange(n, device=images.device)[:, None, None]
    pixels = images.permute(0, 2, 3, 1)  # (N, H, W, C)
    moved = pixels[batch, rows[:, :, None], cols[:, None, :]]  # each image's own indices
    return moved.permute(0, 3, 1, 2)


class GratingsDataModule(L.LightningDataModule):
    """Generates the gratings once under `data_dir`, then serves train/val/test splits.

    Each recipe (the generation settings: sizes, classes, seed) has a folder of its own,
    `<data_dir>/<first 12 hex digits of its hash>/`, so runs with different settings
    (a sweep over `train_size`) never read or rewrite each other's files. A folder is
    generated under a temporary name and renamed into place complete: once it exists it
    never changes, and a half-written one is never read.

    The types of the arguments are what the command line accepts: jsonargparse's
    `PositiveInt` and `NonNegativeInt` refuse `--data.batch_size 0` or a negative
    `num_workers` while parsing, before anything is built.

    Args:
        data_dir: the folder holding one subfolder of generated arrays per recipe (relative
            paths are relative to the project).
        batch_size: samples per batch and per device.
        num_workers: DataLoader worker processes (0 loads in the main process), or "auto"
            to fit the machine; see `loaders.LoaderOptions`, with `pin_memory` and
            `prefetch_factor`.
        augment: randomly shift and turn the training batches (see `shift_and_turn`).
        num_classes: number of orientations to tell apart.
        image_size: side of the square images, in pixels.
        train_size, val_size, test_size: images per split.
        data_seed: seed of the generator; every split draws from its own stream of it, so
            the held-out images are independent of the training ones.
    """

    def __init__(
        self,
        data_dir: str = "data/gratings",
        batch_size: PositiveInt = 64,
        num_workers: NonNegativeInt | Literal["auto"] = "auto",
        augment: bool = True,
        num_classes: int = 8,
        image_size: int = 32,
        train_size: int = 4096,
        val_size: int = 1024,
        test_size: int = 1024,
        data_seed: int = 0,
        pin_memory: bool | Literal["auto"] = "auto",
        prefetch_factor: PositiveInt | None = None,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.data_dir = project_path(data_dir)
        self.root = self.data_dir / self.fingerprint()["recipe_sha256"][:12]  # this recipe's
        self.sizes = {"train": train_size, "val": val_size, "test": test_size}
        self.datasets: dict[str, GratingsDataset] = {}
        self.loader_options = LoaderOptions(num_workers, pin_memory, prefetch_factor)

    def _recipe(self) -> dict:
        """What the files were generated from: its hash names their folder."""
        keys = ("num_classes", "image_size", "train_size", "val_size", "test_size", "data_seed")
        return {"version": 1, **{key: self.hparams[key] for key in keys}}

    def fingerprint(self) -> dict:
        """What checkpoints record about the data (see provenance.py): recipe hash, split seed.

        The hash's first 12 digits name the folder the run read (`self.root`).
        """
        recipe = json.dumps(self._recipe(), sort_keys=True).encode()
        return {
            "recipe_sha256": hashlib.sha256(recipe).hexdigest(),
            "split_seed": self.hparams.data_seed,
        }

    def prepare_data(self) -> None:
        if self.root.is_dir():  # renamed into place complete, and never written again
            return
        # Generated next to its final place (same disk, so the rename is atomic), under a
        # name of this process's own: runs started at once (`sweep --jobs 2`) each write
        # their own copy, and the first renamed into place wins.
        tmp: Path | None = None
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            tmp = Path(
                tempfile.mkdtemp(prefix=f"{self.root.name}.", suffix=".tmp", dir=self.data_dir)
            )
            self._generate(tmp)
            tmp.rename(self.root)
        except BaseException as error:
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if isinstance(error, OSError) and self.root.is_dir():
                return  # another run renamed its complete copy into place first
            if isinstance(error, OSError) and error.errno in FULL_DISK:
                raise Refusal(
                    f"no space left to generate the example data in {self.root} (this recipe "
                    f"needs about {self._bytes_needed() / 1e6:.0f} MB; nothing half-written "
                    "was kept). Free space on that disk, or point `--data.data_dir` at a "
                    "folder on a disk with room, then run again."
                ) from None
            raise

    def _generate(self, folder: Path) -> None:
        """Write every split's arrays, and the recipe they came from, into `folder`."""
        streams = np.random.SeedSequence(self.hparams.data_seed).spawn(len(SPLITS))
        for split, stream in zip(SPLITS, streams, strict=True):
            images, labels = make_gratings(
                self.sizes[split], self.hparams.num_classes, self.hparams.image_size, stream
            )
            np.save(folder / f"{split}_images.npy", images)
            np.save(folder / f"{split}_labels.npy", labels)
        (folder / "recipe.json").write_text(json.dumps(self._recipe(), indent=2))

    def _bytes_needed(self) -> int:
        """The arrays' size on disk: uint8 (3, H, W) images and int64 labels."""
        per_image = 3 * self.hparams.image_size**2 + 8
        return per_image * sum(self.sizes.values())

    def setup(self, stage: str) -> None:
        for split in SPLITS:
            if split not in self.datasets:
                self.datasets[split] = GratingsDataset(self.root, split)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        # Augment whole training batches here, in the main process, not in __getitem__:
        # loader workers have RNGs of their own that a checkpoint cannot restore.
        if self.hparams.augment and self.trainer is not None and self.trainer.training:
            images, labels = batch
            batch = shift_and_turn(images), labels
        return batch

    def _loader(self, split: str, shuffle: bool) -> StatefulDataLoader:
        # A DataLoader that saves its position in each checkpoint, so a run killed
        # mid-epoch resumes with the very next batch (framework/callbacks/resume.py).
        return StatefulDataLoader(
            self.datasets[split],
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            **self.loader_options.kwargs(self.trainer),
        )

    def train_dataloader(self) -> StatefulDataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> StatefulDataLoader:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> StatefulDataLoader:
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> StatefulDataLoader:
        return self._loader("test", shuffle=False)
