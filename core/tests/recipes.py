"""The data recipes' test projects: files on disk and Parquet shards, written from a seed,
served by plain DataLoaders as most DataModules serve theirs.

Every sample's first feature is its id, which the model does not train on and records:
the tests read which samples each DDP rank saw.
"""

from pathlib import Path

import lightning as L
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, IterableDataset

from copier_lightning_core import FileSamples, ParquetRows


def sample_features(ids: np.ndarray, num_features: int) -> np.ndarray:
    """(N, 1 + num_features) float32: the id, then features drawn from it."""
    rng = np.random.default_rng(ids[:, None] * 7919 + np.arange(num_features))
    return np.concatenate(
        [ids[:, None].astype(np.float32), rng.normal(size=(len(ids), num_features))], axis=1
    ).astype(np.float32)


def write_shards(folder: Path, rows: int, shards: int, row_group: int, num_features: int) -> None:
    """`shards` Parquet files of `rows` rows in all: an id, features, a target."""
    folder.mkdir(parents=True, exist_ok=True)
    for shard, ids in enumerate(np.array_split(np.arange(rows), shards)):
        features = sample_features(ids, num_features)
        flat = pa.array(features.reshape(-1), type=pa.float32())
        table = pa.table(
            {
                "features": pa.FixedSizeListArray.from_arrays(flat, num_features + 1),
                "target": pa.array(features[:, 1:].sum(axis=1) / 4, type=pa.float32()),
            }
        )
        pq.write_table(table, folder / f"shard-{shard:03d}.parquet", row_group_size=row_group)


def write_files(folder: Path, per_class: int, classes: int, num_features: int) -> None:
    """`classes` class folders of `.npy` arrays, ids running across the classes."""
    for label in range(classes):
        (folder / f"class_{label}").mkdir(parents=True, exist_ok=True)
        ids = np.arange(label * per_class, (label + 1) * per_class)
        for sample_id, features in zip(ids, sample_features(ids, num_features), strict=True):
            features[1:] += label  # a class the model can learn
            np.save(folder / f"class_{label}" / f"{sample_id:05d}.npy", features)


def as_pair(row: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """A Parquet row as the (features, target) pair the regressor takes."""
    return torch.from_numpy(row["features"].copy()), torch.tensor([row["target"]])


class ShardData(L.LightningDataModule):
    """Parquet shards, written once under `folder`, streamed by ParquetRows."""

    def __init__(
        self,
        folder: str,
        rows: int = 480,
        shards: int = 3,
        row_group: int = 40,
        num_features: int = 8,
        batch_size: int = 32,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self) -> None:
        folder = Path(self.hparams.folder)
        if "://" not in self.hparams.folder and not folder.is_dir():  # a URI: written there
            h = self.hparams
            write_shards(folder, h.rows, h.shards, h.row_group, h.num_features)

    def _loader(self, shuffle: bool) -> DataLoader:
        rows = ParquetRows(self.hparams.folder, transform=as_pair, shuffle=shuffle)
        workers = self.hparams.num_workers
        return DataLoader(
            rows,
            batch_size=self.hparams.batch_size,
            num_workers=workers,
            persistent_workers=workers > 0,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(shuffle=False)

    def predict_dataloader(self) -> DataLoader:
        return self._loader(shuffle=False)

    def fingerprint(self) -> dict:
        return ParquetRows(self.hparams.folder).fingerprint()


class RowsWithoutPosition(IterableDataset):
    """The shards' rows read through, as most hand-written streams are: no saved position."""

    def __init__(self, folder: str) -> None:
        self.rows = ParquetRows(folder, transform=as_pair, shuffle=False)

    def __iter__(self):
        yield from self.rows


class PositionlessShardData(ShardData):
    """ShardData whose training stream cannot say where it stands."""

    def train_dataloader(self) -> DataLoader:
        return DataLoader(RowsWithoutPosition(self.hparams.folder), batch_size=32)


class FileData(L.LightningDataModule):
    """Class folders of `.npy` files, written once under `folder`, read by FileSamples."""

    def __init__(
        self,
        folder: str,
        per_class: int = 80,
        classes: int = 3,
        num_features: int = 8,
        batch_size: int = 32,
        num_workers: int = 0,
    ) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.samples: FileSamples | None = None

    def prepare_data(self) -> None:
        folder = Path(self.hparams.folder)
        if not folder.is_dir():
            h = self.hparams
            write_files(folder, h.per_class, h.classes, h.num_features)

    def setup(self, stage: str) -> None:
        self.samples = FileSamples(self.hparams.folder)
        self.splits = self.samples.split({"train": 0.8, "val": 0.2}, seed=0)

    def _loader(self, split: str, shuffle: bool) -> DataLoader:
        return DataLoader(
            self.splits[split],
            batch_size=self.hparams.batch_size,
            shuffle=shuffle,
            num_workers=self.hparams.num_workers,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", shuffle=False)

    def fingerprint(self) -> dict:
        return self.samples.fingerprint() if self.samples is not None else {}


class RecordingRegressor(L.LightningModule):
    """Regresses the target (a float label for files) from the features after the id, and
    writes the ids each rank trained on to `<root>/ids-rank<N>.txt` at the end of fit."""

    def __init__(self, num_features: int = 8, lr: float = 1e-2) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(num_features, 16), nn.ReLU(), nn.Linear(16, 1))
        self.seen: list[int] = []

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.net(features[:, 1:])

    def _loss(self, batch) -> torch.Tensor:
        features, target = batch
        return F.mse_loss(self(features), target.float().reshape(-1, 1))

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        self.seen += batch[0][:, 0].round().long().tolist()
        loss = self._loss(batch)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, batch_idx: int) -> None:
        self.log("val/loss", self._loss(batch), sync_dist=True)

    def test_step(self, batch, batch_idx: int) -> None:
        self.log("test/loss", self._loss(batch), sync_dist=True)

    def predict_step(self, batch, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def on_fit_end(self) -> None:
        root = Path(self.trainer.default_root_dir)
        ids = "\n".join(map(str, self.seen))
        (root / f"ids-rank{self.global_rank}.txt").write_text(ids)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)


def write_wide_shards(folder: Path, rows: int, width: int, row_group: int, shards: int) -> int:
    """Uncompressed shards of `rows` rows of an id and `width` random float32 features,
    written a row group at a time (the writer never holds the table). Bytes on disk.

    Plain encoding, no statistics: random floats have no dictionary to find, and pyarrow's
    default tries one on every page before it falls back, which doubled the time to write
    the memory cells' gigabytes (and made the files 15 % larger)."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    schema = pa.schema([("features", pa.list_(pa.float32(), width + 1)), ("target", pa.float32())])
    for shard, ids in enumerate(np.array_split(np.arange(rows), shards)):
        path = folder / f"wide-{shard:03d}.parquet"
        with pq.ParquetWriter(
            path, schema, compression="none", use_dictionary=False, write_statistics=False
        ) as writer:
            for start in range(0, len(ids), row_group):
                chunk = ids[start : start + row_group]
                values = rng.random((len(chunk), width + 1), dtype=np.float32)
                values[:, 0] = chunk
                flat = pa.array(values.reshape(-1), type=pa.float32())
                features = pa.FixedSizeListArray.from_arrays(flat, width + 1)
                target = pa.array(values[:, 1:9].sum(axis=1), type=pa.float32())
                writer.write_table(pa.Table.from_arrays([features, target], schema=schema))
    return sum(path.stat().st_size for path in folder.glob("*.parquet"))


def write_wide_files(folder: Path, count: int, width: int, classes: int = 2) -> int:
    """`count` `.npy` files of an id and `width` random float32 features, in class folders,
    ids running across the classes. Bytes on disk."""
    rng = np.random.default_rng(0)
    for sample_id in range(count):
        label = sample_id * classes // count
        (folder / f"class_{label}").mkdir(parents=True, exist_ok=True)
        values = rng.random(width + 1, dtype=np.float32)
        values[0] = sample_id
        np.save(folder / f"class_{label}" / f"{sample_id:06d}.npy", values)
    return sum(path.stat().st_size for path in folder.rglob("*.npy"))
