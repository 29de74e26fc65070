"""The atomic checkpoint writer: file modes follow the umask; abandoned partial files go; a
full disk stops the run with one paragraph, the checkpoints saved before intact."""

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from copier_lightning_core import Refusal
from copier_lightning_core.checkpoints.checkpoint_io import _HOST, AtomicCheckpointIO
from copier_lightning_core.cli import ProjectCLI
from harness import FAST, FLAVOURS

STATE = {"state_dict": {"w": torch.ones(3)}}


@pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")
def test_a_checkpoint_gets_the_mode_the_umask_gives_like_the_logs(tmp_path):
    path = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint(STATE, path)
    (tmp_path / "log.txt").write_text("a log line\n")
    # not the owner-only 0600 of a temporary file, unless the umask itself says so
    assert stat.S_IMODE(path.stat().st_mode) == stat.S_IMODE((tmp_path / "log.txt").stat().st_mode)


def abandoned_partial(folder: Path, pid: int) -> Path:
    """The temporary file a save killed midway in process `pid` would have left."""
    partial = folder / f".save.p{pid}h{_HOST}.k1ll3d.partial"
    partial.write_bytes(b"half a checkpoint")
    return partial


def test_the_next_save_deletes_partial_files_of_processes_that_are_gone(tmp_path):
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    leftover = abandoned_partial(tmp_path, int(gone.stdout))
    mine = abandoned_partial(tmp_path, os.getpid())  # a save of this very process: kept
    foreign = tmp_path / ".notes.partial"  # not written by the checkpoint writer: kept
    foreign.write_text("someone else's")
    AtomicCheckpointIO().save_checkpoint(STATE, tmp_path / "last.ckpt")
    assert not leftover.exists()
    assert mine.exists() and foreign.exists()
    assert (tmp_path / "last.ckpt").is_file()


def test_a_full_disk_stops_the_fit_with_one_paragraph_and_keeps_the_checkpoints(
    tmp_path, monkeypatch
):
    """A save that met ENOSPC was a traceback of some 100 lines from torch's zip writer."""
    root = tmp_path / "run"
    args = ["fit", *FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={root}"]
    args += ["--trainer.logger=false", "--test_after_fit=false"]
    ProjectCLI(args=args)
    last = root / "checkpoints" / "last.ckpt"
    saved = {path.name: path.read_bytes() for path in last.parent.iterdir()}
    real_save = torch.save

    def save_on_a_full_disk(obj, handle, *rest, **options):
        """torch's own writer, over a file whose writes fail as on a full disk."""

        class Full:
            def write(self, data):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

            def flush(self):
                pass

        real_save(obj, Full(), *rest, **options)

    monkeypatch.setattr(torch, "save", save_on_a_full_disk)
    with pytest.raises(Refusal) as stopped:
        ProjectCLI(args=[*args, "--trainer.max_epochs=2", "--ckpt_path=last"])
    message = str(stopped.value)
    assert message.startswith("error: no space left to write the checkpoint ")
    assert "MiB free on the disk of" in message and "--ckpt_path last" in message
    assert "\n" not in message
    assert {path.name: path.read_bytes() for path in last.parent.iterdir()} == saved
