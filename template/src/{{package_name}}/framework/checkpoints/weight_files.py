# Managed by the template; local edits are merged on update.
"""`python -m <package>.framework.checkpoints.weight_files FILE...`: refuse weights and checkpoints in git.

A pre-commit hook. A file is refused when its name says it holds weights, in any case and
with a backup suffix (`MODEL.CKPT`, `weights.bin`, `last.ckpt.bak`, `model.pt~`), or when
its first bytes do whatever its name says: a torch checkpoint (a zip archive holding
`data.pkl`, or a bare pickle), a safetensors file, a NumPy array. Large files of any
kind are refused by the `check-added-large-files` hook. Runs need no torch import.
"""

import re
import struct
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path

WEIGHT_NAME = re.compile(r"\.(ckpt|pt|pth|bin|safetensors|onnx|npy|npz)([.~][^/\\]*)?$", re.I)
PICKLE_PROTOCOLS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def weight_kind(path: Path) -> str | None:
    """What weights `path` holds ("a checkpoint name", "a torch checkpoint"...), or None."""
    if WEIGHT_NAME.search(path.name):
        return "a checkpoint or weights file name"
    try:
        with open(path, "rb") as handle:
            head = handle.read(16)
        size = path.stat().st_size
    except OSError:
        return None
    if head.startswith(b"PK\x03\x04") and _is_torch_zip(path):
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


def _is_torch_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/data.pkl") for name in archive.namelist())
    except zipfile.BadZipFile:
        return False
    except OSError:
        return False


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
