"""Samples stored one per file (images, arrays), listed once and decoded lazily in the
loader workers.

    samples = FileSamples("data/images")           # data/images/<class>/<file>, or a list file
    splits = samples.split({"train": 0.9, "val": 0.1}, seed=0)
    DataLoader(splits["train"], batch_size=64, shuffle=True, num_workers=4)

A map-style dataset and a plain DataLoader are all it takes: the library rebuilds the
DataLoader as torchdata's StatefulDataLoader, whose position a checkpoint holds (a killed
run resumes with the next batch), and Lightning gives each DDP rank a disjoint part of
every epoch through a DistributedSampler. What is written here is what neither does: the
listing, the split and the class list recorded for the checkpoint (`fingerprint`), and a
file that cannot be read named in one paragraph instead of a worker's traceback.
"""

import hashlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from ..platform.refusal import Refusal

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})


def decode_file(path: Path) -> torch.Tensor:
    """The default decoder: `.npy` arrays as they are, images (with Pillow) as uint8 (C, H, W)."""
    if path.suffix == ".npy":
        return torch.from_numpy(np.load(path, allow_pickle=False))
    if path.suffix.lower() in IMAGE_SUFFIXES:
        from PIL import Image  # only where images are read: Pillow is the owner's dependency

        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB"))
        return torch.from_numpy(pixels.copy()).permute(2, 0, 1)
    raise ValueError(f"no decoder for {path.suffix!r} files: pass FileSamples(decode=...)")


class FileSamples(Dataset[tuple[Any, int]]):
    """Labelled files: `root/<class>/<file>`, or a list file of `<path> <class>` lines.

    Args:
        root: a folder of class folders (the class list is their names, sorted), or a text
            file listing one sample per line, its path (relative to the list's folder) and
            its class name, separated by whitespace.
        decode: path -> sample; `decode_file` reads `.npy` arrays and images.
        transform: applied to each decoded sample in the worker that read it.
        suffixes: the files taken from class folders (None: every file).
    """

    def __init__(
        self,
        root: str | Path,
        decode: Callable[[Path], Any] = decode_file,
        transform: Callable[[Any], Any] | None = None,
        suffixes: frozenset[str] | None = None,
    ) -> None:
        self.root = Path(root)
        self.decode, self.transform = decode, transform
        if self.root.is_file():
            listed = _listed(self.root)
        elif self.root.is_dir():
            listed = _in_class_folders(self.root, suffixes)
        else:
            raise Refusal(
                f"{self.root} does not exist: FileSamples reads a folder of class folders "
                "(`<root>/<class>/<file>`) or a list file of `<path> <class>` lines. Check "
                "the path (relative paths are relative to the working folder)."
            )
        if not listed:
            raise Refusal(
                f"{self.root} lists no sample: put each class's files in a folder named "
                "after the class, or list them in a text file, one `<path> <class>` a line."
            )
        self.classes = sorted({name for _, name in listed})
        index = {name: number for number, name in enumerate(self.classes)}
        self.files = [path for path, _ in listed]
        self.labels = [index[name] for _, name in listed]
        self.splits: dict[str, Any] = {}

    def __len__(self) -> int:
        return len(self.files)

    def __getitem__(self, index: int) -> tuple[Any, int]:
        path = self.files[index]
        try:
            sample = self.decode(path)
        except Exception as error:  # whatever the decoder raises: one paragraph naming it
            raise Refusal(
                f"sample {index} ({path}, class {self.classes[self.labels[index]]!r}) could "
                f"not be read: {type(error).__name__}: {error}. Replace the file with a good "
                "copy, then run again: `--ckpt_path last` continues from the last checkpoint. "
                f"Removing it from {self.root} changes the list of files, so the split and "
                "the position a checkpoint saved: start a new run then (no `--ckpt_path`)."
            ) from None
        if self.transform is not None:
            sample = self.transform(sample)
        return sample, self.labels[index]

    def split(self, fractions: Mapping[str, float], seed: int) -> dict[str, Subset[Any]]:
        """Disjoint random splits of the given fractions (summing to 1), the same for the
        same files and seed; recorded for `fingerprint`."""
        if any(f <= 0 for f in fractions.values()) or abs(sum(fractions.values()) - 1) > 1e-6:
            raise Refusal(
                f"split fractions {dict(fractions)} must be positive and sum to 1, e.g. "
                "{'train': 0.9, 'val': 0.1}."
            )
        order = np.random.default_rng(seed).permutation(len(self)).tolist()
        bounds = np.rint(np.cumsum([0, *fractions.values()]) * len(self)).astype(int)
        splits = {
            name: Subset(self, order[start:stop])
            for name, start, stop in zip(fractions, bounds[:-1], bounds[1:], strict=True)
        }
        empty = [name for name, subset in splits.items() if not len(subset)]
        if empty:
            raise Refusal(
                f"split {', '.join(map(repr, empty))} of {dict(fractions)} gets no file of "
                f"the {len(self)} in {self.root}: give it a larger fraction, or add files."
            )
        self.splits = {"seed": seed, "sizes": {name: len(s) for name, s in splits.items()}}
        return splits

    def fingerprint(self) -> dict[str, Any]:
        """What a checkpoint records about the data: the files (names and sizes), the class
        list, and the split made of them."""
        listing = "\n".join(
            f"{_relative(path, self.root)}\t{label}\t{_size(path)}"
            for path, label in zip(self.files, self.labels, strict=True)
        )
        return {
            "files_sha256": hashlib.sha256(listing.encode()).hexdigest(),
            "files": len(self.files),
            "classes": self.classes,
            "split": self.splits,
        }


def _in_class_folders(root: Path, suffixes: frozenset[str] | None) -> list[tuple[Path, str]]:
    return [
        (path, folder.name)
        for folder in sorted(p for p in root.iterdir() if p.is_dir())
        for path in sorted(folder.rglob("*"))
        if path.is_file() and (suffixes is None or path.suffix.lower() in suffixes)
    ]


def _listed(list_file: Path) -> list[tuple[Path, str]]:
    listed = []
    for number, line in enumerate(list_file.read_text().splitlines(), start=1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 2:
            raise Refusal(
                f"{list_file}, line {number}: {line!r} is not `<path> <class>` (two fields "
                "separated by whitespace; a path with spaces needs a class folder instead)."
            )
        listed.append((list_file.parent / parts[0], parts[1]))
    return listed


def _relative(path: Path, root: Path) -> str:
    base = root.parent if root.is_file() else root
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)


def _size(path: Path) -> int:
    """The file's size, or -1 for one gone since listing (its read will name it)."""
    try:
        return path.stat().st_size
    except OSError:
        return -1
