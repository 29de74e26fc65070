"""The data recipes: files on disk (FileSamples) and Parquet rows streamed by row group
(ParquetRows), each behind a plain DataLoader, proven as the matrix proves models: where
each sample goes (ranks, workers, epochs), a kill -9 mid-epoch resumed bit-exactly, DDP
ranks that see disjoint samples covering the epoch, and a damaged sample named in one
paragraph. The DataModules and the recording model are in recipes.py.
"""

import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.fs
import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import FileSamples, ParquetRows, Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.tools.determinism import compare_checkpoints
from harness import PROJECT
from recipes import as_pair, write_files, write_shards

TESTS = Path(__file__).parent
ROWS = 480  # 3 shards of 4 row groups of 40 rows


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("shards")
    write_shards(folder, rows=ROWS, shards=3, row_group=40, num_features=8)
    return folder


def ids_of(batches) -> list[int]:
    return [int(i) for features, _ in batches for i in features[:, 0].round().tolist()]


# --- where each row goes ------------------------------------------------------------------


@pytest.mark.parametrize("batch_size", [None, 32])
@pytest.mark.parametrize("world_size", [1, 2, 3])
@pytest.mark.parametrize("workers", [1, 2])
def test_ranks_and_workers_read_disjoint_equal_parts_covering_all_but_the_remainder(
    shards, world_size, workers, batch_size
):
    rows = ParquetRows(shards, seed=3)
    if batch_size:
        rows.batched_by(batch_size, drop_last=False)
    assert len(rows.groups) == 12 and rows.total_rows == ROWS
    read: list[tuple[int, int, int]] = []  # (group, position) per rank
    per_rank = []
    for rank in range(world_size):
        mine = [
            (segment.group, position)
            for worker in range(workers)
            for segment in rows.segments(0, rank, world_size, worker, workers)
            for position in range(segment.start, segment.stop)
        ]
        per_rank.append(len(mine))
        read += mine
    assert len(set(read)) == len(read)  # no row twice, within or across ranks
    assert per_rank == [ROWS // world_size] * world_size  # DDP: the same batches per rank
    assert len(read) == ROWS - ROWS % world_size


@pytest.mark.parametrize("workers", [0, 1, 2, 3])
def test_told_its_batch_size_a_loaders_length_is_the_batches_it_gives(shards, workers):
    """Whole batches per worker: no worker's partial batch beyond `len(loader)`, which
    Lightning trusts (and so prefetches nothing to find the epoch's end)."""
    rows = ParquetRows(shards, transform=as_pair, seed=1)
    loader = DataLoader(rows, batch_size=36, num_workers=workers)
    with pytest.raises(TypeError):
        len(loader)  # not told yet: unknown, as Lightning reads a TypeError
    rows.batched_by(36, drop_last=False)
    batches = list(loader)
    assert len(batches) == len(loader) == 14  # 13 of 36 rows, one of 12
    assert sorted(ids_of(batches)) == list(range(ROWS))
    assert [len(b[0]) for b in batches] == [36] * 13 + [12]


def test_each_epoch_reads_a_new_block_shuffled_order_and_unshuffled_reads_in_file_order(shards):
    rows = ParquetRows(shards, transform=as_pair, seed=0)
    epochs = [ids_of(DataLoader(rows, batch_size=40)) for _ in range(2)]
    assert sorted(epochs[0]) == sorted(epochs[1]) == list(range(ROWS))
    assert epochs[0] != epochs[1]
    # Block shuffled: each run of 40 rows comes from one row group of 40 ids.
    assert all(len({i // 40 for i in epochs[0][s : s + 40]}) == 1 for s in range(0, ROWS, 40))
    in_order = ParquetRows(shards, transform=as_pair, shuffle=False)
    assert ids_of(DataLoader(in_order, batch_size=40)) == list(range(ROWS))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_restored_mid_epoch_gives_exactly_the_rows_left(shards, workers):
    """What a checkpoint holds: StatefulDataLoader saves each worker's position."""

    def loader() -> StatefulDataLoader:
        rows = ParquetRows(shards, transform=as_pair, seed=5)
        return StatefulDataLoader(
            rows, batch_size=16, num_workers=workers, persistent_workers=workers > 0
        )

    whole = loader()
    first_epoch = ids_of(whole)
    second_epoch = ids_of(whole)
    stopped = loader()
    iterator = iter(stopped)
    before = ids_of(next(iterator) for _ in range(11))  # mid-row-group, mid-epoch
    state = stopped.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    assert before + ids_of(resumed) == first_epoch
    assert ids_of(resumed) == second_epoch  # and the next epoch is the next epoch


def test_a_position_saved_for_other_row_groups_is_refused(shards, tmp_path):
    state = ParquetRows(shards, seed=0).state_dict()
    write_shards(tmp_path, rows=ROWS, shards=3, row_group=30, num_features=8)
    with pytest.raises(Refusal, match="other row groups"):
        ParquetRows(tmp_path, seed=0).load_state_dict(state)


# --- damaged data: one paragraph naming it -------------------------------------------------


def test_a_truncated_shard_is_named_before_any_row_is_read(shards, tmp_path):
    for path in shards.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    cut = tmp_path / "shard-001.parquet"
    cut.write_bytes(cut.read_bytes()[:-100])
    with pytest.raises(Refusal) as refused:
        ParquetRows(tmp_path)
    assert str(cut) in str(refused.value) and "cut short" in str(refused.value)


def test_a_missing_source_and_an_unreachable_endpoint_are_one_paragraph(tmp_path):
    with pytest.raises(Refusal, match="does not exist"):
        ParquetRows(tmp_path / "nowhere")
    endpoint = pyarrow.fs.S3FileSystem(
        endpoint_override="http://127.0.0.1:9", access_key="k", secret_key="s",
        connect_timeout=1, request_timeout=1, retry_strategy=pyarrow.fs.AwsStandardS3RetryStrategy(0),
    )  # fmt: skip
    with pytest.raises(Refusal) as refused:
        ParquetRows("bucket/shards", filesystem=endpoint)
    assert "bucket/shards could not be listed" in str(refused.value)
    assert "endpoint" in str(refused.value)


def test_a_row_group_damaged_inside_is_named_when_it_is_read(shards, tmp_path):
    """The footer intact, a page's bytes overwritten: found when that row group is read."""
    for path in shards.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    damaged = tmp_path / "shard-000.parquet"
    data = bytearray(damaged.read_bytes())
    data[4:2004] = bytes(2000)  # the first row group's pages (row group 0 starts at byte 4)
    damaged.write_bytes(bytes(data))
    rows = ParquetRows(tmp_path, transform=as_pair, shuffle=False)
    with pytest.raises(Refusal) as refused:
        list(DataLoader(rows, batch_size=16))
    assert f"row group 0 of {damaged}" in str(refused.value)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("files")
    write_files(folder, per_class=80, classes=3, num_features=8)
    return folder


def test_files_are_listed_by_class_folder_and_split_the_same_way_for_the_same_seed(files):
    samples = FileSamples(files)
    assert samples.classes == ["class_0", "class_1", "class_2"] and len(samples) == 240
    first = samples.split({"train": 0.75, "val": 0.25}, seed=1)
    again = FileSamples(files).split({"train": 0.75, "val": 0.25}, seed=1)
    assert first["train"].indices == again["train"].indices
    assert sorted(first["train"].indices + first["val"].indices) == list(range(240))
    recorded = samples.fingerprint()
    assert recorded["split"] == {"seed": 1, "sizes": {"train": 180, "val": 60}}
    assert recorded["classes"] == samples.classes and recorded["files"] == 240
    features, label = samples[100]
    assert label == 1 and int(features[0]) == 100


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unreadable_or_missing_file_is_named_in_one_paragraph(files, tmp_path, workers):
    for path in files.rglob("*.npy"):
        target = tmp_path / path.relative_to(files)
        target.parent.mkdir(exist_ok=True)
        target.write_bytes(path.read_bytes())
    samples = FileSamples(tmp_path)
    broken = samples.files[7]
    broken.write_bytes(b"not an array")
    samples.files[9].unlink()
    loader = DataLoader(samples, batch_size=8, num_workers=workers)
    with pytest.raises(Refusal) as refused:
        list(loader)
    assert f"sample 7 ({broken}, class 'class_0') could not be read" in str(refused.value)
    with pytest.raises(Refusal, match=r"sample 9 .* could not be read: FileNotFoundError"):
        samples[9]


# --- through the command line: kill -9 and resume, DDP -------------------------------------


def recipe_args(kind: str, root: Path, data: Path, workers: int, epochs: int = 2) -> list[str]:
    return [
        "fit",
        f"--trainer.default_root_dir={root}",
        f"--trainer.max_epochs={epochs}",
        "--trainer.accelerator=cpu",
        "--trainer.devices=1",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.num_sanity_val_steps=0",
        "--model=recipes.RecordingRegressor",
        f"--data=recipes.{kind}",
        f"--data.folder={data}",
        f"--data.num_workers={workers}",
        # step checkpoints every 2 steps (as the default config's every 100)
        '--trainer.callbacks+={"class_path": "lightning.pytorch.callbacks.ModelCheckpoint", '
        '"init_args": {"dirpath": "' + str(root / "checkpoints") + '", "filename": "step", '
        '"every_n_train_steps": 2, "save_last": true}}',
    ]


def killed(args: list[str], step: int) -> subprocess.CompletedProcess:
    killer = {
        "class_path": "copier_lightning_core.testing.interrupts.KillAt",
        "init_args": {"point": "train_batch", "step": step},
    }
    return subprocess.run(
        [sys.executable, "-m", PROJECT, *args, f"--trainer.callbacks+={json.dumps(killer)}"],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=600,
    )


def final(root: Path) -> dict:
    return torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["ShardData", "FileData"])
def test_a_run_killed_mid_epoch_resumes_bit_exactly(kind, workers, tmp_path):
    """480 rows (files: 192 training samples) in batches of 32: killed at step 5 of 15
    (files: of 6 an epoch), mid-epoch and between step checkpoints; the resumed run's last
    checkpoint (weights, optimizer, loop and loader state) equals an uninterrupted one's."""
    data = tmp_path / "data"
    reference = tmp_path / "reference"
    ProjectCLI(args=recipe_args(kind, reference, data, workers))
    interrupted = tmp_path / "interrupted"
    args = recipe_args(kind, interrupted, data, workers)
    result = killed(args, step=5)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    resumed, expected = final(interrupted), final(reference)
    assert resumed["global_step"] == expected["global_step"] > 5
    assert compare_checkpoints(resumed, expected) is None


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
@pytest.mark.parametrize("kind", ["ShardData", "FileData"])
def test_ddp_ranks_see_disjoint_samples_covering_the_epoch(kind, strategy, tmp_path):
    root = tmp_path / "run"
    args = recipe_args(kind, root, tmp_path / "data", workers=2, epochs=1)
    preset = Path("configs/presets") / f"{strategy}.yaml"
    args = [*args, f"--config={preset.resolve()}", "--trainer.devices=2"]
    result = subprocess.run(
        [sys.executable, "-m", PROJECT, *args],
        cwd=TESTS,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    seen = [
        [int(line) for line in (root / f"ids-rank{rank}.txt").read_text().split()]
        for rank in (0, 1)
    ]
    assert len(seen[0]) == len(seen[1]) and not set(seen[0]) & set(seen[1])
    every = sorted(seen[0] + seen[1])
    assert len(every) == len(set(every))
    if kind == "ShardData":
        assert every == list(range(ROWS))
    else:  # the training split: 192 of the 240 files
        assert len(every) == 192 and set(every) < set(range(240))
    assert np.all(np.diff(every) > 0)
