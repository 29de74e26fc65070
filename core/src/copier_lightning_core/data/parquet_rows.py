"""Rows of Parquet files, streamed a row group at a time: tables and shard folders larger
than memory, split across DDP ranks and loader workers, resumed at the exact row.

    rows = ParquetRows("data/shards", columns=["features", "label"], transform=to_sample)
    DataLoader(rows, batch_size=64, num_workers=4, persistent_workers=True)

`source` is one Parquet file (a table), a folder of them (shards, every `*.parquet` under
it, in name order), a list of files, or the same on object storage: a URI such as
`s3://bucket/prefix`, with `filesystem=pyarrow.fs.S3FileSystem(endpoint_override=...)` for
an S3-compatible endpoint (MinIO, Ceph) or credentials of its own; without one, pyarrow
reads the usual AWS environment variables and files.

What it does, and why it is written here: a row group is the unit read (Parquet's own
unit of storage, a few MB to a few hundred), so memory holds one row group per worker
whatever the size of the data. Each epoch shuffles the order of the row groups and the rows
inside each (a block shuffle: the whole-data permutation a map-style dataset draws would
read a row group per sample). The epoch's rows are cut into equal, disjoint, contiguous
parts, one per DDP rank and then one per loader worker, so every rank runs the same number
of batches (DDP waits forever on a rank that has one batch more) and no row is seen twice;
the at most `world_size - 1` rows of the epoch that do not divide evenly are left out of
that epoch (a different few each epoch). The position (epoch, rows given) is the dataset's
`state_dict`, which torchdata's StatefulDataLoader saves per worker in each checkpoint (the
library makes a plain DataLoader one): a run killed mid-epoch resumes at the next row,
reading only the row group it stopped in.

Established streaming libraries were weighed: LitData and MosaicML `streaming` need
torchvision (whose index build does not load beside a CPU torch) and their own shard
formats; WebDataset keeps no position, so a resume replays or skips samples; Hugging Face
`datasets` streaming loses its shuffle buffer on resume. pyarrow reads Parquet from disk
and from S3-compatible storage itself; only the split and the position are written here.

Epochs are counted by the copy of the dataset that iterates: keep loader workers alive
between epochs (`persistent_workers=True`, which `LoaderOptions` sets), or each epoch's
workers start from the main process's copy and read the first epoch's order again.
"""

import hashlib
import posixpath
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import IterableDataset, get_worker_info

from ..platform.refusal import Refusal

Row = dict[str, Any]


@dataclass(frozen=True)
class RowGroup:
    """One unit of reading: a row group of one file."""

    path: str
    index: int
    rows: int


@dataclass(frozen=True)
class Segment:
    """Rows `start:stop` of a row group's shuffled order, read by one worker of one rank."""

    group: int  # index into ParquetRows.groups
    start: int
    stop: int


def _pyarrow() -> tuple[Any, Any, Any]:
    try:
        import pyarrow as pa
        import pyarrow.fs as pafs
        import pyarrow.parquet as pq
    except ImportError:
        raise Refusal(
            "ParquetRows reads Parquet with pyarrow, which is not installed. Install the "
            "library's `parquet` extra (`pip install 'copier-lightning-core[parquet]'`)."
        ) from None
    return pa, pafs, pq


class ParquetRows(IterableDataset[Any]):
    """The rows of Parquet files, one row group in memory at a time (see the module's text).

    Args:
        source: a Parquet file, a folder of them, a list of files, or a URI (`s3://...`).
        columns: the columns to read (all when None).
        transform: turns a row (column name -> value; numbers and fixed-size lists as numpy
            values, strings and bytes as Python ones) into a sample; None gives the row with
            numpy values as tensors.
        shuffle: a new block-shuffled order each epoch (training); False reads in file order.
        seed: of the shuffles; None takes torch's seed at construction, which a run seeded
            by `seed_everything` sets (and a resumed run sets again).
        filesystem: a pyarrow filesystem to read `source` from (None: the local disk, or the
            one the URI names).
    """

    def __init__(
        self,
        source: str | Path | Sequence[str | Path],
        columns: Sequence[str] | None = None,
        transform: Callable[[Row], Any] | None = None,
        shuffle: bool = True,
        seed: int | None = None,
        filesystem: Any = None,
    ) -> None:
        super().__init__()
        self.source = source
        self.columns = list(columns) if columns is not None else None
        self.transform = transform
        self.shuffle = shuffle
        self.seed = int(torch.initial_seed() if seed is None else seed) % 2**63
        self.filesystem, paths = _resolve(source, filesystem)
        self.groups = _row_groups(self.filesystem, paths, source, self.columns)
        self.total_rows = sum(group.rows for group in self.groups)
        # What a saved position depends on: the row groups' sizes in order and the shuffle
        # (not the files' paths, which a resume on another machine may change). Hashed once:
        # torchdata asks every worker for its state after each batch.
        sizes = ",".join(str(group.rows) for group in self.groups)
        self._layout = hashlib.sha256(f"{sizes};{self.seed};{shuffle}".encode()).hexdigest()
        self._epoch = 0  # the epoch of the pass this copy is in (or begins first)
        self._began = False  # a pass of `_epoch` began: the next one reads the next epoch
        self._given = 0  # rows this copy gave in that pass
        self._resume = False  # a state was loaded: the next pass continues it, if unfinished
        self._placement: tuple[int, int] | None = None  # rank, world: set when pickled
        self.batch_size: int | None = None  # the loader's, once told (`batched_by`)
        self._kept: tuple[RowGroup, dict[str, Any]] | None = None  # the last row group read
        self.drop_last = False

    # -- what the epoch reads, where -----------------------------------------------------

    def rows_per_rank(self, world_size: int) -> int:
        """Rows each of `world_size` ranks reads in an epoch (the remainder is left out)."""
        return self.total_rows // world_size

    def segments(
        self, epoch: int, rank: int, world_size: int, worker: int, workers: int
    ) -> list[Segment]:
        """The parts of row groups one worker of one rank reads in `epoch`, in order."""
        order = (
            np.random.default_rng([self.seed, epoch]).permutation(len(self.groups))
            if self.shuffle
            else np.arange(len(self.groups))
        )
        offset = rank * self.rows_per_rank(world_size)
        wanted = [
            (offset + a, offset + b) for a, b in self._worker_ranges(world_size, worker, workers)
        ]
        segments: list[Segment] = []
        at = 0
        for group in order.tolist():
            rows = self.groups[group].rows
            for first, last in wanted:
                start, stop = max(first, at), min(last, at + rows)
                if start < stop:
                    segments.append(Segment(group, start - at, stop - at))
            at += rows
        return segments

    def _worker_ranges(self, world_size: int, worker: int, workers: int) -> list[tuple[int, int]]:
        """The rows of its rank's part one worker reads, as ranges in that part. Told the
        loader's batch size (`batched_by`), each worker reads whole batches, the k-th worker
        batches k, k + workers, ... (the order the loader takes them in), so that the
        loader's length is exact; otherwise a contiguous share."""
        per_rank = self.rows_per_rank(world_size)
        if self.batch_size is None:
            return [(worker * per_rank // workers, (worker + 1) * per_rank // workers)]
        size = self.batch_size
        return [
            (start, min(start + size, per_rank))
            for start in range(worker * size, per_rank, workers * size)
        ]

    def batched_by(self, batch_size: int, drop_last: bool) -> None:
        """Told the DataLoader's batching (the library's loader hooks tell it): each worker
        then reads whole batches and `len()` is exact, so Lightning, which prefetches a batch
        from a loader of unknown length, prefetches none, and the position a checkpoint
        saves is that of the batch trained last."""
        self.batch_size, self.drop_last = batch_size, drop_last
        # Lightning warns about every IterableDataset with a length that workers could
        # make wrong; this one's is exact. The filter is by message: it also quiets the
        # warning for other IterableDatasets of this process.
        warnings.filterwarnings("ignore", message="Your `IterableDataset` has `__len__`")

    def __len__(self) -> int:
        """Rows this rank reads an epoch; known once the loader's batching is (`batched_by`):
        before, the DataLoader's length would not count the workers' partial batches."""
        if self.batch_size is None:
            raise TypeError("ParquetRows has a length once batched_by() told its batch size")
        rows = self.rows_per_rank(self._rank_and_world()[1])
        return rows - rows % self.batch_size if self.drop_last else rows

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint records about the data: the files (named from their common
        folder, so data moved to another disk or machine is the same data), their row
        groups and the seed."""
        paths = sorted({group.path for group in self.groups})
        top = posixpath.dirname(paths[0]) if len(paths) == 1 else posixpath.commonpath(paths)
        listing = "\n".join(
            f"{posixpath.relpath(g.path, top)}\t{g.index}\t{g.rows}" for g in self.groups
        )
        return {
            "parquet_row_groups_sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "rows": self.total_rows,
            "shuffle_seed": self.seed if self.shuffle else None,
        }

    # -- iterating -----------------------------------------------------------------------

    def __iter__(self) -> Iterator[Any]:
        rank, world_size = self._rank_and_world()
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        segments = self.segments(self._epoch, rank, world_size, worker, workers)
        mine = sum(segment.stop - segment.start for segment in segments)
        if self._began and not (self._resume and self._given < mine):  # the next epoch
            self._epoch, self._given = self._epoch + 1, 0
            segments = self.segments(self._epoch, rank, world_size, worker, workers)
        self._began, self._resume = True, False
        skip = self._given
        for segment in segments:
            size = segment.stop - segment.start
            if skip >= size:  # read before the checkpoint: not even opened
                skip -= size
                continue
            for row in self._read(segment, skip):
                self._given += 1
                yield row
            skip = 0

    def _read(self, segment: Segment, skip: int) -> Iterator[Any]:
        group = self.groups[segment.group]
        columns = self._columns(group)
        order = np.arange(group.rows)
        if self.shuffle:
            order = np.random.default_rng([self.seed, self._epoch, segment.group]).permutation(
                group.rows
            )
        for position in order[segment.start + skip : segment.stop].tolist():
            row = {name: values[position] for name, values in columns.items()}
            yield self.transform(row) if self.transform is not None else _as_tensors(row)

    def _columns(self, group: RowGroup) -> dict[str, Any]:
        """One row group's columns, as numpy arrays where they are numbers; the last one
        read is kept, as a worker's next batch is mostly in the same row group."""
        if self._kept is not None and self._kept[0] == group:
            return self._kept[1]
        self._kept = None  # let the previous group go before reading the next
        pa, _, pq = _pyarrow()
        try:
            with self.filesystem.open_input_file(group.path) as stream:
                table = pq.ParquetFile(stream).read_row_group(group.index, columns=self.columns)
        except (OSError, pa.ArrowException) as error:
            raise Refusal(
                f"row group {group.index} of {group.path} ({group.rows} rows) could not be "
                f"read: {type(error).__name__}: {error}. The file is damaged or was changed "
                "after the run listed it: write it again (or remove it from the source) and "
                "run again; `--ckpt_path last` continues from the last checkpoint."
            ) from None
        columns = {name: _numpy_or_list(table.column(name)) for name in table.column_names}
        self._kept = (group, columns)
        return columns

    # -- where this copy runs ------------------------------------------------------------

    def _rank_and_world(self) -> tuple[int, int]:
        """This process's DDP rank and the world size. A loader worker started by fork
        inherits the process group; one started by spawn reads what pickling recorded."""
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return self._placement or (0, 1)

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_kept"] = None  # rows are read where they are used, never sent
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            state["_placement"] = self._rank_and_world()
        return state

    # -- the position, for StatefulDataLoader --------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self._epoch, "given": self._given, "layout": self._layout}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("layout") != self._layout:
            raise Refusal(
                f"the checkpoint's position in {self.source} was saved for Parquet files of "
                "other row groups, or another shuffle seed: resuming would skip or repeat "
                "rows. Resume with the files and seed the run started with (they may have "
                "moved: only their row groups count), or start a new run (no `--ckpt_path`)."
            )
        self._epoch, self._given = int(state["epoch"]), int(state["given"])
        self._began = self._resume = True


def _resolve(source: Any, filesystem: Any) -> tuple[Any, list[str]]:
    """The filesystem and the Parquet files `source` names, in name order."""
    _, pafs, _ = _pyarrow()
    sources = [source] if isinstance(source, (str, Path)) else list(source)
    if not sources:
        raise Refusal("ParquetRows was given an empty list of files: name at least one.")
    paths: list[str] = []
    for entry in sources:
        text = str(entry)
        try:
            if filesystem is None and "://" in text:
                filesystem, text = pafs.FileSystem.from_uri(text)
            filesystem = filesystem or pafs.LocalFileSystem()
            if "://" not in str(entry) and isinstance(filesystem, pafs.LocalFileSystem):
                text = str(Path(text).resolve())
            info = filesystem.get_file_info(text)
            if info.type == pafs.FileType.Directory:
                found = filesystem.get_file_info(pafs.FileSelector(text, recursive=True))
                paths += sorted(f.path for f in found if f.path.endswith(".parquet"))
            elif info.type == pafs.FileType.File:
                paths.append(text)
            else:
                raise Refusal(
                    f"{entry} does not exist: ParquetRows reads a Parquet file, a folder of "
                    "them or a list of files. Check the path (relative paths are relative "
                    "to the working folder), or write the data there first."
                )
        except Refusal:
            raise
        except Exception as error:  # pyarrow's OSError, or a URI it cannot parse
            raise Refusal(
                f"{entry} could not be listed: {type(error).__name__}: {error}. Check that the "
                "storage is reachable from here (the endpoint, for S3-compatible storage "
                "`filesystem=pyarrow.fs.S3FileSystem(endpoint_override=...)`) and that the "
                "credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) allow listing it."
            ) from None
    if not paths:
        raise Refusal(f"{source} holds no `.parquet` file: write the shards there first.")
    return filesystem, paths


def _row_groups(
    filesystem: Any, paths: list[str], source: Any, columns: list[str] | None
) -> list[RowGroup]:
    """Every row group of every file, read from the files' footers (no rows are read); a
    column asked for that a file lacks is refused here (pyarrow would leave it out)."""
    pa, _, pq = _pyarrow()
    groups = []
    for path in paths:
        try:
            with filesystem.open_input_file(path) as stream:
                metadata = pq.ParquetFile(stream).metadata
            names = metadata.schema.to_arrow_schema().names
        except (OSError, pa.ArrowException) as error:
            raise Refusal(
                f"{path} is not a readable Parquet file ({type(error).__name__}: {error}); a "
                "file cut short by an interrupted copy or write has no footer. Write or copy "
                f"it again, or remove it from {source}, then run again."
            ) from None
        missing = [name for name in columns or [] if name not in names]
        if missing:
            raise Refusal(
                f"{path} has no column {', '.join(map(repr, missing))}: its columns are "
                f"{', '.join(map(repr, names))}. Name those in `columns` (or leave it None to "
                "read them all)."
            )
        groups += [
            RowGroup(path, index, metadata.row_group(index).num_rows)
            for index in range(metadata.num_row_groups)
            if metadata.row_group(index).num_rows
        ]
    return groups


def _numpy_or_list(column: Any) -> Any:
    """A column as numpy (numbers; fixed-size lists of numbers as 2-D), else Python values."""
    pa, _, _ = _pyarrow()
    chunk = column.combine_chunks()
    # Writable copies (one per row group): arrays over Arrow's buffers are read-only, and
    # torch.from_numpy warns for each one a transform turns into a tensor.
    if pa.types.is_fixed_size_list(chunk.type) and chunk.null_count == 0:
        width = chunk.type.list_size
        return chunk.flatten().to_numpy(zero_copy_only=False, writable=True).reshape(-1, width)
    if (pa.types.is_integer(chunk.type) or pa.types.is_floating(chunk.type)) and (
        chunk.null_count == 0
    ):
        return chunk.to_numpy(zero_copy_only=False, writable=True)
    return chunk.to_pylist()


def _as_tensors(row: Row) -> Row:
    return {
        name: torch.as_tensor(value) if isinstance(value, (np.ndarray, np.generic)) else value
        for name, value in row.items()
    }
