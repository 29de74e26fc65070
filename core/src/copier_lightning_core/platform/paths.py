"""Where the project lives on disk, so commands behave the same from any folder in it.

Relative paths in configs and on the command line (run roots, data folders) are taken
relative to the project root, not the working directory: `python -m <package> fit`
run from `src/` or `tests/` writes to the same `runs/` as from the root. Inside a run
root, `RunLayout` names where each output goes.
"""

import os
from pathlib import Path

from .project import project_root

RUNS = "runs"  # runs/<experiment>/<date>_<time>/ when a config sets no default_root_dir
DEFAULT_EXPERIMENT = "default"
LAST_CHECKPOINT = "last.ckpt"  # ModelCheckpoint's save_last name, which `--ckpt_path last` reads


def project_path(path: str | Path) -> Path:
    """`path` itself when absolute, else the same path under the project root."""
    path = Path(path).expanduser()
    return path if path.is_absolute() else project_root() / path


def default_config() -> Path:
    """configs/default.yaml: applied to every trainer command."""
    return project_root() / "configs" / "default.yaml"


def experiments_folder() -> Path:
    """configs/experiments/: `--experiment <name>` reads `<name>.yaml` there."""
    return project_root() / "configs" / "experiments"


class RunLayout:
    """Where each output of a run lives under its root (`trainer.default_root_dir`).

    The one place these names are spelled: the CLI, the callbacks that write checkpoints
    or predictions, and the README's tree all follow it. The checkpoint folder is fixed
    (no version number), so `--ckpt_path last` of a rerun finds the earlier `last.ckpt`.
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last(self) -> Path:
        return self.checkpoints / LAST_CHECKPOINT

    @property
    def predictions(self) -> Path:
        return self.root / "predictions"

    @property
    def command(self) -> Path:
        """Every command line run on this root, appended (run_record.py)."""
        return self.root / "command.txt"


def unused_name(folder: Path, stem: str, suffix: str) -> str:
    """`stem`, else `stem-1`, `stem-2`, ...: the first name no file in `folder` starts with.

    A file `<name><suffix>` or `<name>-rank<N><suffix>` (one per process) takes the name,
    so an output of an earlier command is never overwritten, whatever the process count.
    """
    name, n = stem, 0
    while (folder / f"{name}{suffix}").exists() or any(folder.glob(f"{name}-rank*{suffix}")):
        n += 1
        name = f"{stem}-{n}"
    return name


def _read_umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(mask)
    return mask


# The permissions any file this process creates gets (the umask): given to the files that
# a writer makes through a temporary file of owner-only 0600 (checkpoints, their summary,
# exported weights), so they read like the run's logs.
FILE_MODE = 0o666 & ~_read_umask()


def follow_umask(written: Path) -> None:
    """Give a file, or every file in a folder, that a library wrote owner-only (0600:
    safetensors, peft) the umask's permissions, as the run's other files have."""
    for file in [written] if written.is_file() else written.rglob("*"):
        if file.is_file():
            file.chmod(FILE_MODE)
