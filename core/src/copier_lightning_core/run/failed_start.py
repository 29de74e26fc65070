"""A command that stops before its first batch leaves its run folder as it found it.

The run root is claimed before anything is built (the lock: run_root.py; `command.txt`:
run_record.py), and the loggers' folders and the saved config are written as the Trainer
sets up. When the model, the data, the Trainer or the optimizer then fail to build (an
argument torch refuses, an error in your module's `__init__` or `configure_optimizers`),
those files told of a run that never ran a step. So the launching process notes what the
root held before its claim (`RootBefore.note`), and on such a failure (`undo`):

- a folder this command made (a fresh run folder, or a `--trainer.default_root_dir` that
  did not exist yet) is removed, up to the first folder on its path it had to make;
- a folder that existed, claimed by a fit (a resumed run: run_root.py's lock keeps other
  fits out) gets back what it held: what is new in it is removed, and `command.txt` is cut
  back to its earlier length. A `validate`, `test` or `predict` into an existing folder
  takes no lock and may run beside a fit there, so it leaves that folder as it is.

Checkpoints are never removed: a new folder that holds one is left as it is, and nothing
in a `checkpoints/` folder is touched. Once any batch has run (training, validation, test
or predict), the folder is the record of a command that did work, and stays.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch import Trainer

from ..platform.paths import RunLayout
from .run_folders import holds_a_run
from .run_root import release_run_root


@dataclass(frozen=True)
class RootBefore:
    """What a run root held before this command claimed it."""

    root: Path
    made: Path | None  # the first folder on the way to the root that this command makes
    paths: frozenset[Path]  # what the root held, relative to it
    command_size: int  # the length of its command.txt

    @classmethod
    def note(cls, root: Path, fresh: bool) -> RootBefore:
        """`fresh`: the root is a run folder this command has just made (run_folders.py)."""
        missing = [path for path in (root, *root.parents) if not path.exists()]
        made = root if fresh else (missing[-1] if missing else None)
        command = RunLayout(root).command
        size = command.stat().st_size if made is None and command.is_file() else 0
        return cls(root, made, frozenset() if made else _contents(root), size)

    def undo(self) -> None:
        """Put the root back as it was noted; see the module's docstring."""
        locked = release_run_root(self.root)
        if self.made is not None:
            if not holds_a_run(self.root):
                shutil.rmtree(self.made, ignore_errors=True)
            return
        if not locked:  # not this command's to tidy: a validate may write beside a live fit
            return
        checkpoints = RunLayout(self.root).checkpoints.relative_to(self.root)
        new = _contents(self.root) - self.paths
        for path in sorted(new, key=lambda path: len(path.parts), reverse=True):
            if path.parts[0] == checkpoints.name or path.name.startswith("hpc_ckpt_"):
                continue
            target = self.root / path
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        command = RunLayout(self.root).command
        if command.is_file() and command.stat().st_size > self.command_size:
            os.truncate(command, self.command_size)


def ran_a_batch(trainer: Trainer | None) -> bool:
    """Whether any of the Trainer's loops has fetched a batch (a resumed fit: restored ones)."""
    if trainer is None:
        return False
    loops = (
        trainer.fit_loop.epoch_loop,
        trainer.fit_loop.epoch_loop.val_loop,
        trainer.validate_loop,
        trainer.test_loop,
        trainer.predict_loop,
    )
    return any(loop.batch_progress.total.ready for loop in loops)


def _contents(root: Path) -> frozenset[Path]:
    """Every file and folder under `root`, relative to it; links are not followed."""
    found: set[Path] = set()
    for folder, names, files in os.walk(root):
        base = Path(folder).relative_to(root)
        found.update(base / name for name in (*names, *files))
    return frozenset(found)
