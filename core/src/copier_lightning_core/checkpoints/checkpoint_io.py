"""Every checkpoint save is atomic; every load is weights-only with a clear error.

Lightning's own save is not atomic: it writes a temporary file under $TMPDIR and moves it
(a copy when that is another filesystem), without fsync, so a kill or power loss during
a save can leave a truncated `last.ckpt` and nothing to resume from. configs/default.yaml
names `AtomicCheckpointIO` in `trainer.plugins`, so every save (ModelCheckpoint, interrupts,
`trainer.save_checkpoint`) writes a temporary file in the checkpoint's own folder, flushes
and fsyncs it, then renames it over the target: a reader sees the old file or the new one,
never half of one; a small JSON summary of the saved checkpoint goes beside it for
`compare` (summary.py). A save killed midway leaves only a `.<name>.<pid>.partial` file
behind (`.save.<owner>.<random>.partial`), which the next save into that folder deletes
once its process is gone. A save that finds the disk full stops the run with one
paragraph naming the file and the free space (the earlier checkpoints stay as they
were). The file gets the permissions any file the process writes gets (the umask), like
the run's logs, not the owner-only 0600 of a temporary file.

Loads go through `load_checkpoint` (load.py), put back the frozen weights a checkpoint
left out (left_out.py) from the model the command built, and warn where the checkpoint's
code or versions differ from this run's (provenance.py). A checkpoint the command has
read already (run_plan.py) is handed over with `preload` and given back to the
Trainer's load of that path instead of a second read of the file.
"""

import contextlib
import errno
import hashlib
import os
import re
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from ..platform.paths import FILE_MODE
from ..platform.refusal import Refusal
from .left_out import left_out_names, restore_left_out
from .load import load_checkpoint
from .provenance import warn_if_environment_differs
from .summary import SUMMARY, summary_of


class AtomicCheckpointIO(TorchCheckpointIO):
    """Atomic local saves (temp file, flush, fsync, rename); remote paths are left to fsspec."""

    _preloaded: tuple[Path, dict[str, Any]] | None = None
    _module: torch.nn.Module | None = None  # rebuilds the weights a checkpoint left out

    def rebuild_left_out_with(self, module: torch.nn.Module) -> None:
        """Loads take the frozen weights a checkpoint left out (left_out.py) from `module`,
        the model the command built from its config."""
        self._module = module

    def preload(self, path: str | Path, checkpoint: dict[str, Any]) -> None:
        """Give `checkpoint`, read from `path` already, to the next load instead of the file.

        Held for that one load only, whichever path it asks for: Lightning then owns the
        dict (and frees it once restored); it may change it, as it migrates old formats.
        """
        self._preloaded = (Path(path).absolute(), checkpoint)

    def __getstate__(self) -> dict[str, Any]:
        """A process started with a copy of this plugin (`ddp_spawn`) reads the file itself:
        a preloaded checkpoint is not pickled into it (a copy per process)."""
        state = self.__dict__.copy()
        state.pop("_preloaded", None)
        state.pop("_module", None)
        return state

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            super().save_checkpoint(checkpoint, path, storage_options)
            return
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        _remove_abandoned_partials(path.parent)
        try:
            _write_atomically(path, lambda handle: torch.save(checkpoint, handle), durable=True)
        except BaseException as error:
            if _disk_full(error):
                raise Refusal(_no_space(path)) from None
            raise
        with contextlib.suppress(OSError):  # saved; a stale summary no longer matches it
            summary = summary_of(checkpoint, path)
            _write_atomically(path.parent / SUMMARY, lambda handle: handle.write(summary))

    def load_checkpoint(
        self, path: str | Path, map_location: Any = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        preloaded, self._preloaded = self._preloaded, None
        if "://" in str(path):
            return super().load_checkpoint(path, map_location, weights_only=True)
        if preloaded is not None and preloaded[0] == Path(path).absolute():
            checkpoint = preloaded[1]
        else:
            checkpoint = load_checkpoint(Path(path))
        warn_if_environment_differs(checkpoint.get("provenance"), path)
        if left_out_names(checkpoint):
            if self._module is None:
                raise Refusal(
                    f"{path} was saved without its frozen weights (LeaveOutFrozenWeights) and "
                    "this load has no model to rebuild them from; load it through the "
                    "project's commands (`--ckpt_path`, `export`), which build the model first."
                )
            restore_left_out(checkpoint, self._module, Path(path))
        return checkpoint


def _write_atomically(
    path: Path, write: Callable[[BinaryIO], object], durable: bool = False
) -> None:
    """`write` into a temporary file beside `path`, renamed over it: a reader sees the old
    file or the new one, never half of one. `durable`: flushed and fsynced, the rename too.

    The temporary name holds no "last": Lightning's `--ckpt_path last` takes the newest
    file whose name holds "last", and must never pick up a partial one. Its owner in the
    name lets the next save delete it once that process is gone.
    """
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".save.{_owner()}.", suffix=".partial")
    try:
        if hasattr(os, "fchmod"):  # POSIX; Windows files have no mode bits to set
            os.fchmod(fd, FILE_MODE)
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            if durable:
                handle.flush()
                os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    if durable:
        _fsync_directory(path.parent)


def _disk_full(error: BaseException) -> bool:
    """Whether a save failed for want of space (or quota): torch's zip writer reports the
    OSError of the file's write as a RuntimeError of its own, the OSError its context."""
    seen: BaseException | None = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _FULL:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


_FULL = {errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)}


def _no_space(path: Path) -> str:
    """The refusal of a save that found the disk full: the file, the free space, the fix."""
    free = shutil.disk_usage(path.parent).free
    kept = "keeps its previous version" if path.exists() else "was not written"
    return (
        f"no space left to write the checkpoint {path} ({free / 2**20:.0f} MiB free on the "
        f"disk of {path.parent}); the run stopped there. The checkpoints saved before are "
        f"intact ({path.name} {kept}; the partial file was removed). Free space on that disk "
        "(old runs, or fewer kept checkpoints: `--checkpoint.save_top_k`), then resume with "
        "`--ckpt_path last` in the same run folder."
    )


def _owner() -> str:
    """Who writes a partial file (process id, hash of the host name: no dots, any host)."""
    return f"p{os.getpid()}h{_HOST}"


_HOST = hashlib.sha256(socket.gethostname().encode()).hexdigest()[:8]
_PARTIAL_OWNER = re.compile(r"\.p(\d+)h([0-9a-f]{8})\.[^.]+\.partial$")


def _remove_abandoned_partials(folder: Path) -> None:
    """Delete `.*.partial` files of saves whose process on this host is gone (killed mid-save)."""
    for partial in folder.glob(".*.partial"):
        owner = _PARTIAL_OWNER.search(partial.name)
        if owner and owner[2] == _HOST and not _alive(int(owner[1])):
            partial.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs here; a zombie (killed, not yet reaped) does not."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    stat = Path(f"/proc/{pid}/stat")
    try:
        fields = stat.read_text().rsplit(")", 1)[-1].split()  # state first, after the name
    except OSError:  # no /proc (macOS): os.kill's answer stands
        return True
    return fields[:1] != ["Z"]


def _fsync_directory(folder: Path) -> None:
    """Make the rename itself durable (POSIX); Windows has no directory handles to sync."""
    if os.name != "posix":
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
