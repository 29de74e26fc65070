"""The data recipes: files on disk (FileSamples) and Parquet rows streamed by row group
(ParquetRows), each behind a plain DataLoader, proven as the matrix proves models: where
each sample goes (ranks, workers, epochs), a kill -9 mid-epoch resumed bit-exactly, DDP
ranks that see disjoint samples covering the epoch, and a damaged sample named in one
paragraph. The DataModules and the recording model are in recipes.py.
"""

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pyarrow.fs
import pyarrow.parquet as pq
import pytest
import torch
from torch.utils.data import DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import FileSamples, ParquetRows, Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.loaders import resume_gaps
from copier_lightning_core.platform.worker_start import forks_can_hang
from copier_lightning_core.testing import launch
from copier_lightning_core.tools.determinism import compare_checkpoints
from copier_lightning_core.tools.doctor.command import main as doctor
from harness import FAST, PROJECT, killed_run, let_go_of_loader_workers
from recipes import as_pair, write_files, write_shards, write_wide_files, write_wide_shards

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


def test_each_row_group_is_read_once_an_epoch_though_batches_cut_through_it(shards, monkeypatch):
    reads = []
    read_row_group = pq.ParquetFile.read_row_group

    def counted(self, index, *args, **kwargs):
        reads.append(index)
        return read_row_group(self, index, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read_row_group", counted)
    rows = ParquetRows(shards, transform=as_pair, seed=4)
    rows.batched_by(32, drop_last=False)  # batches of 32 across row groups of 40
    assert sorted(ids_of(DataLoader(rows, batch_size=32))) == list(range(ROWS))
    assert len(reads) == 12


def test_one_table_file_is_a_source_as_a_folder_is(shards):
    table = shards / "shard-001.parquet"
    rows = ParquetRows(table, transform=as_pair, shuffle=False)
    assert [g.index for g in rows.groups] == [0, 1, 2, 3] and rows.total_rows == 160
    assert ids_of(DataLoader(rows, batch_size=40)) == list(range(160, 320))
    assert rows.fingerprint()["rows"] == 160


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


def test_a_column_the_files_lack_is_refused_naming_the_columns_they_have(shards):
    with pytest.raises(Refusal) as refused:
        ParquetRows(shards, columns=["features", "label"])
    assert "no column 'label'" in str(refused.value) and "'target'" in str(refused.value)


def test_rows_hold_writable_arrays_that_become_tensors_without_a_warning(shards):
    row = next(iter(ParquetRows(shards, transform=lambda row: row)))
    assert row["features"].flags.writeable
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns for a read-only array
        torch.from_numpy(row["features"])


def test_a_position_saved_for_other_row_groups_is_refused(shards, tmp_path):
    state = ParquetRows(shards, seed=0).state_dict()
    write_shards(tmp_path, rows=ROWS, shards=3, row_group=30, num_features=8)
    with pytest.raises(Refusal, match="other row groups"):
        ParquetRows(tmp_path, seed=0).load_state_dict(state)


def test_a_stream_with_a_position_but_no_length_is_named_as_a_skipped_batch(shards):
    """Lightning reads one batch ahead of a loader of unknown length: the saved position
    is past the batch trained last. Told its batch size, ParquetRows has a length."""
    rows = ParquetRows(shards, transform=as_pair)
    (gap,) = resume_gaps(StatefulDataLoader(rows, batch_size=32))
    assert "ParquetRows" in gap and "skips that batch" in gap and "__len__" in gap
    rows.batched_by(32, drop_last=False)
    assert resume_gaps(StatefulDataLoader(rows, batch_size=32)) == []


@pytest.mark.slow
def test_doctor_try_names_a_train_loader_whose_position_a_checkpoint_cannot_hold(
    shards, monkeypatch, capsys
):
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)  # recipes.py, importable in the trial's process
    data = ["--data=recipes.PositionlessShardData", f"--data.folder={shards}"]
    status = doctor(["--try", "--model=recipes.RecordingRegressor", *data, *FAST])
    (row,) = [r for r in capsys.readouterr().out.splitlines() if r.startswith("the default run")]
    assert status == 0 and " warn " in row  # it trains: named, not failed
    assert "a resumed run would not be exact" in row and "RowsWithoutPosition" in row
    assert "state_dict()" in row  # and the fix


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
    with pytest.raises(Refusal, match=r"split 'val' of .* gets no file of the 240"):
        samples.split({"train": 0.999, "val": 0.001}, seed=1)


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
    let_go_of_loader_workers(refused)
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


def final(root: Path) -> dict:
    return torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """(recipe, workers) -> (its data folder, the last checkpoint of an uninterrupted run).

    ParquetRows' batches do not depend on the worker count (the k-th worker reads batches
    k, k + workers, ...): one run without workers is the reference for every count. A
    shuffled map-style loader draws its workers' seeds from its own generator, so the
    order of its later epochs depends on the count: a reference per count."""
    made: dict[tuple[str, int], tuple[Path, dict]] = {}

    def reference(kind: str, workers: int) -> tuple[Path, dict]:
        key = (kind, 0 if kind == "ShardData" else workers)
        if key not in made:
            folder = tmp_path_factory.mktemp(f"uninterrupted-{kind}")
            ProjectCLI(args=recipe_args(kind, folder / "run", folder / "data", key[1]))
            made[key] = folder / "data", final(folder / "run")
        return made[key]

    return reference


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("kind", ["ShardData", "FileData"])
def test_a_run_killed_mid_epoch_resumes_bit_exactly(kind, workers, tmp_path, uninterrupted):
    """480 rows (files: 192 training samples) in batches of 32: killed at step 5 of 15
    (files: of 6 an epoch), mid-epoch and between step checkpoints; the resumed run's last
    checkpoint (weights, optimizer, schedule) equals an uninterrupted run's."""
    data, expected = uninterrupted(kind, workers)
    interrupted = tmp_path / "interrupted"
    args = recipe_args(kind, interrupted, data, workers)
    result = killed_run(args, "train_batch", 5)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    resumed = final(interrupted)
    assert resumed["global_step"] == expected["global_step"] > 5
    assert compare_checkpoints(resumed, expected) is None


@pytest.mark.slow
def test_a_ddp_run_streaming_rows_killed_mid_epoch_resumes_bit_exactly(tmp_path):
    """Two processes, each its own part of the rows: Lightning gives an IterableDataset no
    DistributedSampler, so its plain DataLoader is rebuilt as a StatefulDataLoader there
    too, and each rank resumes at its own next row (the parts are equal: rank 0's saved
    position is every rank's)."""
    data = tmp_path / "data"
    ddp = [f"--config={Path('configs/presets/ddp.yaml').resolve()}", "--trainer.devices=2"]

    def args(root: Path) -> list[str]:
        return [*recipe_args("ShardData", root, data, workers=2), *ddp]

    reference = launch.run(
        [sys.executable, "-m", PROJECT, *args(tmp_path / "reference")], cwd=TESTS, timeout=600
    )
    assert reference.returncode == 0, reference.stderr[-3000:]
    assert "will not be bit-identical" not in reference.stderr
    result = killed_run(args(tmp_path / "interrupted"), "train_batch", 3)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    resumed = launch.run(
        [sys.executable, "-m", PROJECT, *args(tmp_path / "interrupted"), "--ckpt_path=last"],
        cwd=TESTS,
        timeout=600,
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    expected, got = final(tmp_path / "reference"), final(tmp_path / "interrupted")
    assert got["global_step"] == expected["global_step"] == 16  # 2 epochs of 240 rows / 32
    assert compare_checkpoints(got, expected) is None


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
@pytest.mark.parametrize("kind", ["ShardData", "FileData"])
def test_ddp_ranks_see_disjoint_samples_covering_the_epoch(kind, strategy, tmp_path):
    every = samples_seen_by_two_ranks(kind, tmp_path / "data", strategy, tmp_path / "run")
    if kind == "ShardData":
        assert every == list(range(ROWS))
    else:  # the training split: 192 of the 240 files
        assert len(every) == 192 and set(every) < set(range(240))


def samples_seen_by_two_ranks(kind: str, data: Path | str, strategy: str, root: Path) -> list:
    """One epoch on 2 CPU processes: the ids both ranks trained on, sorted, after checking
    that the ranks saw as many samples each and none in common."""
    args = recipe_args(kind, root, data, workers=2, epochs=1)
    preset = Path("configs/presets") / f"{strategy}.yaml"
    args = [*args, f"--config={preset.resolve()}", "--trainer.devices=2"]
    result = launch.run([sys.executable, "-m", PROJECT, *args], cwd=TESTS, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    # Where forked workers can hang (CPython gh-112275), they started from a forkserver.
    said = "DataLoader workers start from a forkserver" in result.stdout + result.stderr
    assert said is forks_can_hang()
    seen = [
        [int(line) for line in (root / f"ids-rank{rank}.txt").read_text().split()]
        for rank in (0, 1)
    ]
    assert len(seen[0]) == len(seen[1]) and not set(seen[0]) & set(seen[1])
    every = sorted(seen[0] + seen[1])
    assert len(every) == len(set(every))
    return every


@pytest.mark.slow
def test_a_checkpoint_loaded_on_changed_files_names_what_changed(files, tmp_path):
    """The fingerprint a checkpoint records is compared with the data's when it is loaded:
    a file removed changes the list, so the split a resumed fit would continue is another
    (torchdata's sampler then stops with a bare StopIteration): the fit is refused."""
    data = tmp_path / "data"
    shutil.copytree(files, data)
    root = tmp_path / "run"
    ProjectCLI(args=recipe_args("FileData", root, data, workers=0, epochs=1))
    next(data.glob("class_0/*.npy")).unlink()
    args = recipe_args("FileData", root, data, workers=0, epochs=2)
    with pytest.raises(Refusal) as refused:  # a fit: refused before training
        ProjectCLI(args=[*args, "--ckpt_path=last"])
    message = str(refused.value)
    assert "the data differs from what this checkpoint was trained on" in message
    assert "files 240 then, 239 now" in message and "files_sha256" in message
    assert "--init_from" in message
    evaluate = ["validate", *args[1:], "--ckpt_path=last"]
    with pytest.warns(UserWarning, match="The data differs from what this checkpoint"):
        ProjectCLI(args=evaluate)  # evaluating on other data: said, and done


# --- memory: a table larger than the memory a run may use ---------------------------------

# Features per sample: 64 KiB rows in row groups of 64; 1 MiB files (fewer files to write).
WIDE = {"ShardData": 16383, "FileData": 262143}
BATCH = {"ShardData": 64, "FileData": 16}


def write_wide(kind: str, folder: Path, samples: int) -> int:
    """`samples` wide samples of the recipe under `folder`; bytes on disk."""
    if kind == "ShardData":
        return write_wide_shards(folder, rows=samples, width=WIDE[kind], row_group=64, shards=8)
    return write_wide_files(folder, count=samples, width=WIDE[kind])


def peak_rss_of_fit(kind: str, root: Path, data: Path, limit: int | None = None) -> tuple[int, str]:
    """One epoch of the wide data with no loader workers (one process holds it all): the
    process's peak resident memory in bytes, as the kernel counted it, and its output. With
    `limit`, a watchdog ends the run as soon as its resident memory passes that many bytes,
    as a cluster's memory limit would."""
    args = [
        *recipe_args(kind, root, data, workers=0, epochs=1)[:-1],  # no step checkpoints
        "--trainer.limit_val_batches=0",
        # the claim is one epoch under the limit: a test pass would read the data again
        "--test_after_fit=false",
        f"--model.num_features={WIDE[kind]}",
        f"--data.batch_size={BATCH[kind]}",
    ]
    process = subprocess.Popen(
        [sys.executable, "-m", PROJECT, *args],
        cwd=TESTS,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    killed_at: list[int] = []

    def watch() -> None:
        # Reads /proc only (not poll(), which could reap the process before wait4 does);
        # an exited process's status has no VmRSS line.
        status = Path(f"/proc/{process.pid}/status")
        while True:
            try:
                lines = status.read_text().splitlines()
                rss = int(next(line for line in lines if line.startswith("VmRSS")).split()[1])
            except (OSError, StopIteration):
                return
            if limit is not None and rss * 1024 > limit:
                killed_at.append(rss * 1024)
                process.kill()
                return
            threading.Event().wait(0.01)

    watchdog = threading.Thread(target=watch, daemon=True)
    watchdog.start()
    output = process.stdout.read() if process.stdout else ""
    _, status, usage = os.wait4(process.pid, 0)
    watchdog.join()
    process.returncode = os.waitstatus_to_exitcode(status)
    assert not killed_at, f"over the limit of {limit} bytes: {killed_at[0]}"
    assert process.returncode == 0, output[-3000:]
    return usage.ru_maxrss * 1024, output


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("kind", ["ShardData", "FileData"])
def test_data_four_times_the_memory_limit_trains_in_the_memory_of_a_small_set(
    kind, tmp_path, record_property
):
    """The limit is the small run's peak plus 25 %; the large data is at least 4 times that
    on disk (uncompressed, random: nothing to squeeze), read in one epoch under it.

    A run's peak is not one number: resident memory moves in steps of 16 MiB (a batch, the
    wide layer's gradient, Adam's temporaries), and a peak is the moment most of them
    coexist, which a run of more steps meets more often. Six runs each on a quiet machine:
    small runs (256 files) 522-571 MiB, large runs (2,200) 540-571 MiB, and 7,000 files
    574 MiB: bounded, but one CI run's large FileData run passed its small run's 658 MiB
    by 10.03 %, the limit this test had. 25 % is eight or more such buffers above the small
    peak; a loader that kept what it read would pass the limit by gigabytes."""
    write_wide(kind, tmp_path / "small", 256)
    small_peak, _ = peak_rss_of_fit(kind, tmp_path / "small-run", tmp_path / "small")
    limit = int(small_peak * 1.25)
    samples = 4 * limit // ((WIDE[kind] + 2) * 4) + 256
    on_disk = write_wide(kind, tmp_path / "large", samples)
    assert on_disk >= 4 * limit
    large_peak, _ = peak_rss_of_fit(kind, tmp_path / "large-run", tmp_path / "large", limit)
    for name, value in {"small run peak": small_peak, "limit": limit, "data": on_disk,
                        "large run peak": large_peak}.items():  # fmt: skip
        record_property(name, f"{value / 2**20:.0f} MiB")  # for docs/data-recipes.md
    assert large_peak <= limit, (small_peak, large_peak)
    seen = sorted(map(int, (tmp_path / "large-run" / "ids-rank0.txt").read_text().split()))
    if kind == "ShardData":
        assert seen == list(range(samples))  # every row of it, once
    else:  # the training split: 80 % of the files, each once
        assert len(seen) == len(set(seen)) == round(0.8 * samples)


# --- shards on S3-compatible storage -------------------------------------------------------


@pytest.fixture(scope="module")
def bucket(shards) -> str:
    """The shards in a bucket of an S3-compatible server on localhost (moto's): the URI
    ParquetRows and the command line read them by, endpoint included.

    The server runs in a process of its own, as a real endpoint does. In a thread of the
    test process, its replies shared the interpreter lock with the in-process fits of that
    process, and two whole-suite runs each spent about 90 s in one bucket test.
    """
    pytest.importorskip("moto.server")
    server, endpoint = start_moto_server()
    try:
        s3 = pyarrow.fs.S3FileSystem(
            endpoint_override=endpoint, scheme="http", access_key="test", secret_key="test",
            region="us-east-1", allow_bucket_creation=True,
        )  # fmt: skip
        s3.create_dir("recipes")
        for path in shards.iterdir():
            with s3.open_output_stream(f"recipes/shards/{path.name}") as out:
                out.write(path.read_bytes())
        yield f"s3://recipes/shards?endpoint_override={endpoint}&scheme=http&region=us-east-1"
    finally:
        server.terminate()
        server.wait(timeout=60)


def start_moto_server(tries: int = 3) -> tuple[subprocess.Popen, str]:
    """`python -m moto.server` on a free port of localhost, once it accepts connections:
    the process and its `host:port`. A port taken between choosing and binding it ends
    the server at once: another port is tried."""
    for _ in range(tries):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        server = subprocess.Popen(
            [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 120
        while server.poll() is None and time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return server, f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        server.kill()
        server.wait()
    raise RuntimeError(f"moto's server did not start on localhost in {tries} tries")


@pytest.fixture
def s3_credentials(monkeypatch):
    """What pyarrow reads credentials from, as on a cluster (moto takes any)."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")


def test_shards_in_a_bucket_read_as_from_a_folder(bucket, shards, s3_credentials):
    remote = ParquetRows(bucket, transform=as_pair, seed=2)
    local = ParquetRows(shards, transform=as_pair, seed=2)
    assert [(g.index, g.rows) for g in remote.groups] == [(g.index, g.rows) for g in local.groups]
    remote.batched_by(32, drop_last=False)
    local.batched_by(32, drop_last=False)
    loader = StatefulDataLoader(remote, batch_size=32, num_workers=2, persistent_workers=True)
    # Told the batch size, two workers give the batches in one process's order.
    assert ids_of(loader) == ids_of(DataLoader(local, batch_size=32, num_workers=0))


@pytest.mark.slow
@pytest.mark.parametrize("workers", [0, 2])
def test_a_run_streaming_from_a_bucket_killed_mid_epoch_resumes_bit_exactly(
    bucket, s3_credentials, tmp_path, workers
):
    reference = tmp_path / "reference"
    ProjectCLI(args=recipe_args("ShardData", reference, bucket, workers=workers))
    interrupted = tmp_path / "interrupted"
    args = recipe_args("ShardData", interrupted, bucket, workers=workers)
    result = killed_run(args, "train_batch", 5)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    resumed, expected = final(interrupted), final(reference)
    assert resumed["global_step"] == expected["global_step"] > 5
    assert compare_checkpoints(resumed, expected) is None


@pytest.mark.slow
@pytest.mark.parametrize("strategy", ["ddp", "fsdp2"])
def test_ddp_ranks_streaming_from_a_bucket_see_disjoint_rows_covering_the_epoch(
    bucket, s3_credentials, tmp_path, strategy
):
    every = samples_seen_by_two_ranks("ShardData", bucket, strategy, tmp_path / "run")
    assert every == list(range(ROWS))
