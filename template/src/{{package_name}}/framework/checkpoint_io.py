# Managed by the template; local edits are merged on update.
"""Every checkpoint save is atomic; every load is weights-only with a clear error.

Lightning's own save is not atomic: it writes a temporary file under $TMPDIR and moves it
(a copy when that is another filesystem), without fsync, so a kill or power loss during
a save can leave a truncated `last.ckpt` and nothing to resume from. The CLI installs
`AtomicCheckpointIO` on every Trainer, so every save (ModelCheckpoint, interrupts,
`trainer.save_checkpoint`) writes a temporary file in the checkpoint's own folder, flushes
and fsyncs it, then renames it over the target: a reader sees the old file or the new one,
never half of one. A save killed midway leaves only a `.*.partial` file behind.
"""

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from .inspect_ckpt import load_checkpoint
from .provenance import warn_if_environment_differs


class AtomicCheckpointIO(TorchCheckpointIO):
    """Atomic local saves (temp file, flush, fsync, rename); remote paths are left to fsspec."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # The name holds no "last": `--ckpt_path last` must never pick up a partial file.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".partial")
        try:
            with os.fdopen(fd, "wb") as handle:
                torch.save(checkpoint, handle)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        _fsync_directory(path.parent)

    def load_checkpoint(
        self, path: str | Path, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if "://" in str(path):
            return super().load_checkpoint(path, map_location, weights_only=True)
        checkpoint = load_checkpoint(Path(path))
        warn_if_environment_differs(checkpoint.get("provenance"), path)
        return checkpoint


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (POSIX); Windows has no directory handles to sync."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
