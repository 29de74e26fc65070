"""`python -m copier_lightning_core.checkpoints.weight_files FILE...`: refuse weights and checkpoints in git.

A pre-commit hook. A file is refused when its name says it holds weights, in any case and
with a backup suffix (`MODEL.CKPT`, `weights.bin`, `last.ckpt.bak`, `model.pt~`), or when
its first bytes do whatever its name says: a torch checkpoint (a zip archive holding
`data.pkl`, or a bare pickle), a safetensors file, a NumPy array. An archive (zip, tar,
tar.gz/.tgz/.bz2/.xz, or a single gzipped file), recognised by its bytes, is refused when a
member is, by the same rules, and the message names that member; archives inside archives
are not opened. Large files of any kind are refused by the `check-added-large-files` hook.
Runs need no torch import.
"""

import gzip
import re
import struct
import sys
import tarfile
import zipfile
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import IO

# Opens a file's, or an archive member's, whole content.
Opener = Callable[[], IO[bytes] | gzip.GzipFile]

WEIGHT_NAME = re.compile(r"\.(ckpt|pt|pth|bin|safetensors|onnx|npy|npz)([.~][^/\\]*)?$", re.I)
PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")
# The first bytes of a compressed stream that tarfile opens (gzip, bzip2, xz), and of a tar.
COMPRESSED = (b"\x1f\x8b", b"BZh", b"\xfd7zXZ\x00")
TAR_MAGIC_OFFSET = 257  # "ustar" in a POSIX or GNU tar header
READ_ERRORS = (OSError, EOFError, ValueError, zipfile.BadZipFile, tarfile.TarError)


def weight_kind(path: Path) -> str | None:
    """What weights `path` holds ("a checkpoint name", "a torch checkpoint"...), or None."""
    if WEIGHT_NAME.search(path.name):
        return "a checkpoint or weights file name"
    try:
        with open(path, "rb") as handle:
            head = handle.read(TAR_MAGIC_OFFSET + 5)
            size = path.stat().st_size
            kind = _content_kind(head, size, lambda: handle)
            if kind is None and _is_archive(head):
                kind = _archive_kind(path, head)
    except READ_ERRORS:
        return None
    return kind


def _content_kind(head: bytes, size: int, stream: Opener) -> str | None:
    """What the bytes of a file (or of an archive's member) say it holds, or None.

    `stream` opens the whole content, seekable, only for a zip (a torch checkpoint's format).
    """
    if head.startswith(b"PK\x03\x04") and _is_torch_zip(stream):
        return "a torch checkpoint (torch.save's zip format)"
    if head[:2] in PICKLE_PROTOCOLS:
        return "a pickle (torch.save's legacy format, or pickled objects)"
    if head.startswith(b"\x93NUMPY"):
        return "a NumPy array"
    if len(head) >= 9 and head[8:9] == b"{":
        (header_length,) = struct.unpack("<Q", head[:8])
        if 0 < header_length <= size - 8:
            return "a safetensors file"
    return None


def _is_torch_zip(stream: Opener) -> bool:
    try:
        with zipfile.ZipFile(stream()) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except READ_ERRORS:
        return False


def _is_archive(head: bytes) -> bool:
    return (
        head.startswith(b"PK\x03\x04")
        or head.startswith(COMPRESSED)
        or head[TAR_MAGIC_OFFSET : TAR_MAGIC_OFFSET + 5] == b"ustar"
    )


def _archive_kind(path: Path, head: bytes) -> str | None:
    """'an archive whose member "<name>" is <what>' for the first member refused, or None."""
    for member, kind in _member_kinds(path, head):
        if kind:
            return f'an archive whose member "{member}" is {kind}'
    return None


def _member_kinds(path: Path, head: bytes) -> Iterator[tuple[str, str | None]]:
    """Each member of the archive at `path` and what it holds (None: nothing refused)."""
    if head.startswith(b"PK\x03\x04"):
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.is_dir():
                    opened = partial(archive.open, info)
                    yield info.filename, _member_kind(info.filename, info.file_size, opened)
        return
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if member.isfile():
                    extracted = partial(_extracted, archive, member)
                    yield member.name, _member_kind(member.name, member.size, extracted)
        return
    except tarfile.ReadError:
        if not head.startswith(b"\x1f\x8b"):
            raise
    # A single gzipped file: the member is the file the name says, less ".gz".
    inner = path.name[: -len(".gz")] if path.name.lower().endswith(".gz") else path.name
    with open(path, "rb") as handle:  # gzip's trailer: the size, modulo 2**32
        handle.seek(-4, 2)
        (size,) = struct.unpack("<I", handle.read(4))
    yield inner, _member_kind(inner, size, partial(gzip.GzipFile, path, "rb"))


def _member_kind(name: str, size: int, stream: Opener) -> str | None:
    if WEIGHT_NAME.search(name.rsplit("/", 1)[-1]):
        return "a checkpoint or weights file name"
    with stream() as handle:
        member_head = handle.read(16)
    return _content_kind(member_head, size, stream)


def _extracted(archive: tarfile.TarFile, member: tarfile.TarInfo) -> IO[bytes]:
    handle = archive.extractfile(member)
    if handle is None:  # not a regular file: isfile() was checked
        raise tarfile.TarError(f"{member.name} is not a regular file")
    return handle


def main(argv: Sequence[str]) -> int:
    found = [(name, kind) for name in argv if (kind := weight_kind(Path(name)))]
    for name, kind in found:
        print(
            f"{name}: {kind}. Keep weights out of git: runs/ is ignored; share them as "
            "files or with git-lfs, and commit the config that made them instead."
        )
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
