"""Data recipes: samples/s and data wait of each recipe in a fit, against the plain loop
over the same files.

Recipes (the library's, each behind a plain DataLoader, as a project's data.py uses them):
  files    FileSamples over PNG images in class folders, decoded with Pillow (decode-heavy)
  table    ParquetRows over one Parquet file of row groups
  bucket   ParquetRows over Parquet shards in an S3-compatible bucket (moto's server on
           localhost: HTTP, no network)

For each recipe and each repeat, paired:
  plain    the same files read and decoded one after another in this process: no
           DataLoader, no training (the rate one core reads at)
  fit      one epoch of Lightning's Trainer (the library's LoaderChecks, a small model) per
           loader worker count; timed the way `fit`'s DataWaitMonitor and `tune` time it
           (tools/tune/measure.StepTimer): samples/s of the steady batches, and the share of
           the epoch spent waiting for the next batch
The worker count printed as chosen is tune's rule (tools/tune/workers.choose) with fit's
hint at 5 %: the first count within 5 % of the fastest whose data wait stays under 5 %.

Usage: python benchmarks/data_recipes.py [--repeats 3] [--workers 0,1,2] [--quick]
"""

import argparse
import io
import logging
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import pyarrow as pa
import pyarrow.fs
import pyarrow.parquet as pq
import torch
import torch.nn.functional as F
from copier_lightning_core import FileSamples, ParquetRows
from copier_lightning_core.callbacks.loader_hooks import LoaderChecks
from copier_lightning_core.tools.tune.measure import Measurement, StepTimer
from copier_lightning_core.tools.tune.workers import choose
from PIL import Image
from torch import nn
from torch.utils.data import DataLoader, Dataset, IterableDataset

sys.path.insert(0, str(Path(__file__).resolve().parent))
from stats import spread

HINT = 0.05  # the data wait tune's rule keeps a count under
BATCH = 64
WARMUP = 2  # batches of each epoch left out of the rates (workers starting)


def write_images(folder: Path, count: int, side: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(count):
        label = index % 4
        (folder / f"class_{label}").mkdir(parents=True, exist_ok=True)
        pixels = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        pixels[:, :, label % 3] //= 2  # something per class
        Image.fromarray(pixels).save(folder / f"class_{label}" / f"{index:05d}.png")


def write_table(path: Path, rows: int, width: int, row_group: int) -> None:
    rng = np.random.default_rng(0)
    features = rng.normal(size=(rows, width)).astype(np.float32)
    flat = pa.array(features.reshape(-1), type=pa.float32())
    table = pa.table(
        {
            "features": pa.FixedSizeListArray.from_arrays(flat, width),
            "label": pa.array(rng.integers(0, 4, rows)),
        }
    )
    pq.write_table(table, path, row_group_size=row_group)


def image_sample(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.float().div(255)


def row_sample(row: dict[str, Any]) -> tuple[torch.Tensor, int]:
    return torch.from_numpy(row["features"].copy()), int(row["label"])


class ImageNet(L.LightningModule):
    """A small CNN: a step of tens of ms a batch on a CPU core, about what decoding the
    batch's PNGs costs one worker (the case where workers can hide the decoding)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            nn.Linear(32, 4),
        )  # fmt: skip

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        images, labels = batch
        return F.cross_entropy(self.net(images), labels)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class RowNet(ImageNet):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(width, 32), nn.ReLU(), nn.Linear(32, 4))


class Loaders(L.LightningDataModule):
    """A DataModule returning the recipe's plain DataLoader, as a project's data.py does."""

    def __init__(self, dataset: Dataset | IterableDataset, workers: int) -> None:
        super().__init__()
        self.dataset, self.workers = dataset, workers

    def train_dataloader(self) -> DataLoader:
        shuffle = not isinstance(self.dataset, IterableDataset)
        return DataLoader(
            self.dataset,
            batch_size=BATCH,
            shuffle=shuffle,
            num_workers=self.workers,
            persistent_workers=self.workers > 0,
        )


def plain_rate(read_all: Callable[[], int]) -> float:
    start = time.perf_counter()
    samples = read_all()
    return samples / (time.perf_counter() - start)


def fit_rate(model: L.LightningModule, dataset: Any, workers: int) -> Measurement:
    timer = StepTimer()
    trainer = L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=[LoaderChecks(), timer],
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(model, datamodule=Loaders(dataset, workers))
    waits, totals = timer.waits[WARMUP:], timer.totals[WARMUP:]
    samples = sum(timer.samples[WARMUP:])
    return Measurement(workers, samples / sum(totals), sum(waits) / sum(totals), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", default="0,1,2")
    parser.add_argument("--quick", action="store_true", help="small data, one repeat: runs")
    args = parser.parse_args()
    counts = [int(value) for value in args.workers.split(",")]
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)  # one line per fit
    repeats = 1 if args.quick else args.repeats

    # moto's server in a process of its own: in a thread of this one it would take the
    # interpreter lock from the training loop it serves.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        host, port = probe.getsockname()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", host, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        run(args, counts, repeats, f"{host}:{port}")
    finally:
        server.terminate()
        server.wait()


def run(args: argparse.Namespace, counts: list[int], repeats: int, endpoint: str) -> None:
    images, side, rows = (512, 32, 4096) if args.quick else (1536, 96, 49152)
    width = 64
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        write_images(root / "images", images, side)
        write_table(root / "table.parquet", rows, width, row_group=1024)
        s3 = pyarrow.fs.S3FileSystem(
            endpoint_override=endpoint, scheme="http", access_key="k",
            secret_key="s", region="us-east-1", allow_bucket_creation=True,
        )  # fmt: skip
        for _ in range(100):  # the server starting
            try:
                s3.create_dir("bench")
                break
            except OSError:
                time.sleep(0.1)
        for shard in range(8):
            buffer = io.BytesIO()
            part = pq.read_table(root / "table.parquet").slice(shard * rows // 8, rows // 8)
            pq.write_table(part, buffer, row_group_size=1024)
            with s3.open_output_stream(f"bench/shards/{shard}.parquet") as out:
                out.write(buffer.getvalue())

        files = FileSamples(root / "images", transform=image_sample)

        def read_files() -> int:
            for path in files.files:
                image_sample(files.decode(path))
            return len(files)

        def read_parquet(source: Any, filesystem: Any = None) -> Callable[[], int]:
            def read_all() -> int:
                count = 0
                listing = ParquetRows(source, filesystem=filesystem).groups
                fs = filesystem or pyarrow.fs.LocalFileSystem()
                for group in listing:
                    with fs.open_input_file(group.path) as stream:
                        table = pq.ParquetFile(stream).read_row_group(group.index)
                    features = table.column("features").combine_chunks()
                    values = features.flatten().to_numpy().reshape(-1, width)
                    labels = table.column("label").to_numpy()
                    for position in range(len(labels)):
                        row_sample({"features": values[position], "label": labels[position]})
                        count += 1
                return count

            return read_all

        recipes = {
            "files": (read_files, lambda: files, ImageNet),
            "table": (
                read_parquet(root / "table.parquet"),
                lambda: ParquetRows(root / "table.parquet", transform=row_sample),
                lambda: RowNet(width),
            ),
            "bucket": (
                read_parquet("bench/shards", s3),
                lambda: ParquetRows("bench/shards", filesystem=s3, transform=row_sample),
                lambda: RowNet(width),
            ),
        }
        print(
            f"{images} PNG images of {side}x{side}; {rows} rows of {width} float32 features "
            f"(row groups of 1024; the bucket in 8 shards); batches of {BATCH}; "
            f"{torch.get_num_threads()} torch threads, {repeats} paired repeats\n"
        )
        for name, (read_all, dataset, model) in recipes.items():
            plain: list[float] = []
            fits: dict[int, list[Measurement]] = {count: [] for count in counts}
            for _ in range(repeats):
                plain.append(plain_rate(read_all))
                for count in counts:
                    fits[count].append(fit_rate(model(), dataset(), count))
            print(f"{name}: plain loop {statistics.median(plain):.0f} samples/s")
            medians = []
            for count, measured in fits.items():
                ratios = [m.samples_per_sec / p for m, p in zip(measured, plain, strict=True)]
                wait = statistics.median(m.data_wait for m in measured)
                rate = statistics.median(m.samples_per_sec for m in measured)
                medians.append(Measurement(count, rate, wait, None))
                print(
                    f"  fit, {count} workers: {rate:.0f} samples/s, data wait {100 * wait:.1f}%; "
                    f"ratio fit / plain loop: {spread(ratios, 2)}"
                )
            chosen = choose(medians, HINT, 0.05)
            rule = f"tune's rule (data wait under {100 * HINT:.0f}%)"
            if chosen.data_wait > HINT:
                rule += ": no count tried stays under it; the fastest"
            print(
                f"  {rule}: {chosen.value} workers, {chosen.samples_per_sec:.0f} samples/s, "
                f"data wait {100 * chosen.data_wait:.1f}%\n"
            )


if __name__ == "__main__":
    main()
