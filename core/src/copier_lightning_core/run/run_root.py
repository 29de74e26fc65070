"""One run per root: a `fit` never writes over another run's checkpoints.

As soon as the root is known, `check_run_root_path` refuses one that cannot be reached (a
symbolic link on its path that loops) or that lies inside the package's code (`src/`, the
installed package), where checkpoints and logs do not belong.
Before any work, `check_writable` refuses a Trainer command whose run root
(`trainer.default_root_dir`) cannot be written (a read-only folder, a file in the way),
naming the folder, and `claim_for_fit` a `fit` whose run root

- already holds a run (files in `<root>/checkpoints/`) and no `--ckpt_path` is given: a
  new fit there would overwrite `last.ckpt` and the best checkpoints of the earlier run.
  The way on is to resume it (`--ckpt_path last`) or to start the new run elsewhere
  (without `--trainer.default_root_dir`, each fit gets a folder of its own:
  run_folders.py). A SLURM requeue is the exception:
  Lightning resumes it from `<root>/hpc_ckpt_*.ckpt` without `--ckpt_path`
  (configs/presets/slurm.yaml), so a root holding one is let through;
- is in use by another live `fit` (on this machine or, on a shared filesystem that
  supports locks, another one): two runs would interleave their checkpoints.

The last one is a lock on `<root>/.run.lock`, taken by the process that launches the run
(global rank 0; the DDP processes it or torchrun starts do not take it) and held until
it exits. The operating system releases it when the process ends in any way, SIGKILL
included, so a killed run never leaves a stale lock behind. Written with `fcntl.lockf`
rather than the `filelock` package: filelock uses `flock`, whose lock DataLoader workers
forked by the run share, so after a SIGKILL of the main process alone it stays held
until those workers notice and exit (up to 5 s); a `lockf` lock belongs to one process.
`validate`, `test` and `predict` take no lock and may run while a fit trains: they only
read checkpoints and write files of their own (predictions get a new name each time).
Parsing a command line alone (doctor, a sweep checking its spec) claims nothing: the run
plan claims the root after parsing, just before the model, data and Trainer are built
(RunPlan.claim, run_plan.py).
"""

import errno
import os
import sys
import tempfile
from pathlib import Path
from typing import IO

from ..platform.paths import RunLayout
from ..platform.project import package_folder, project_root
from ..platform.refusal import Refusal
from .ckpt_path import continues_run

LOCK_NAME = ".run.lock"
# Environment variables that give a process's rank under torchrun, Lightning's DDP
# launcher and SLURM's srun; the launching process has none of them, or 0 in each.
RANK_VARIABLES = ("RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_PROCID")

_held: dict[Path, IO[str]] = {}  # root -> open lock file, for as long as this process runs


def is_launching_process() -> bool:
    return all(os.environ.get(name, "0") == "0" for name in RANK_VARIABLES)


def check_run_root_path(root: Path, flag: str) -> None:
    """The run root can be reached and lies outside the package's code, or refuse.

    Checked on the path alone (nothing is made), as soon as the root is known: a folder
    named through a symbolic link that leads back to itself cannot be made or entered,
    which Python reports deep in the first write; and a run inside `src/` or the installed
    package would put checkpoints and logs among the code, where they get packaged,
    committed as source or deleted by the next install.
    """
    loop = _looping_link(root)
    if loop is not None:
        raise Refusal(
            f"the run folder {root} cannot be reached: {loop} is a symbolic link that leads "
            f"back to itself (`ls -l {loop}` shows where it points). Fix or remove the link, "
            f"or give another folder with {flag}."
        )
    resolved = root.resolve()
    for code in _code_folders():
        if resolved == code or code in resolved.parents:
            raise Refusal(
                f"the run folder {root} is inside {code}, which holds the package's code; "
                f"checkpoints and logs there would be packaged with it, or deleted by the next "
                f"install. Give a folder outside it with {flag} (by default runs go to "
                "runs/<experiment>/ in the project)."
            )


def _looping_link(root: Path) -> Path | None:
    """The first folder on the way to `root` that is a symbolic link into a loop, if any."""
    for path in reversed((root, *root.parents)):
        try:
            path.stat()
        except OSError as error:
            return path if error.errno == errno.ELOOP else None
    return None


def _code_folders() -> tuple[Path, ...]:
    """The project's sources, its installed package (outside them when not installed
    editable) and this library's."""
    sources = (project_root() / "src").resolve()
    return (sources, package_folder(), Path(__file__).resolve().parents[1])


def check_writable(root: Path) -> None:
    """The run root, or the folder it will be made in, accepts new files (checkpoints, logs).

    Tried by making and removing a folder there, not asked with `os.access`, which says
    yes to root on a read-only mount point that no one can write.
    """
    existing = next(folder for folder in (root, *root.parents) if folder.exists())
    try:
        if not existing.is_dir():
            raise NotADirectoryError(errno.ENOTDIR, "a file is in the way", str(existing))
        os.rmdir(tempfile.mkdtemp(prefix=".write-test-", dir=existing))
    except OSError as error:
        raise Refusal(
            f"the run folder {root} cannot be written ({existing}: "
            f"{error.strerror or error}). A run writes its checkpoints and logs there: choose "
            "a folder you can write with `--trainer.default_root_dir`, or fix its permissions."
        ) from None


def claim_for_fit(layout: RunLayout, ckpt_path: str | None) -> None:
    """Refuse a second run into a root, or a root in use; then lock it.

    A resume counts as the same run when its checkpoint is `last` or lies in this root;
    a checkpoint from elsewhere starts a new run here (ckpt_path.continues_run). Only
    the launching process claims (the run plan decides: run_plan.py); the processes it
    or torchrun starts run into the folder it holds.
    """
    if (
        not continues_run(layout.root, ckpt_path)
        and _holds_a_run(layout)
        and not _slurm_requeue(layout)
    ):
        raise Refusal(
            f"{layout.root} already holds a run (checkpoints in {layout.checkpoints}); "
            "a new fit there would overwrite them. To continue that run, add `--ckpt_path "
            "last`. To start a new run, leave out --trainer.default_root_dir (each fit then "
            "gets its own runs/<experiment>/<date>_<time>/) or give another folder. "
            "(Nothing was written.)"
        )
    _lock(layout.root)


def _holds_a_run(layout: RunLayout) -> bool:
    """Checkpoints (files or sharded folders) in `<root>/checkpoints/`; temporary ones aside."""
    if not layout.checkpoints.is_dir():
        return False
    return any(not entry.name.startswith(".") for entry in layout.checkpoints.iterdir())


def _slurm_requeue(layout: RunLayout) -> bool:
    return any(layout.root.glob("hpc_ckpt_*.ckpt"))


def _lock(root: Path) -> None:
    """Hold `<root>/.run.lock` until this process exits, or refuse: another run holds it."""
    root = root.resolve()
    if root in _held:  # this process runs a second command into the root (tests, `tune`)
        return
    root.mkdir(parents=True, exist_ok=True)
    handle = open(root / LOCK_NAME, "a+")  # noqa: SIM115  (held open until the process exits)
    if not _try_lock(handle):
        owner = _read_owner(handle)
        handle.close()
        raise Refusal(
            f"another fit is running into {root} (process {owner}, which holds "
            f"{root / LOCK_NAME}); two runs in one folder would overwrite each other's "
            "checkpoints. Wait for it to finish (or stop it: it then writes last.ckpt, and "
            "`--ckpt_path last` resumes it), or run in another folder with "
            "`--trainer.default_root_dir`."
        )
    handle.seek(0)
    handle.truncate()
    handle.write(f"{os.getpid()} on {_host()}\n")
    handle.flush()
    _held[root] = handle


def release_run_root(root: Path) -> bool:
    """Let go of this process's lock on `root`; whether it held one (a command that stopped
    before its first batch gives its claim back: failed_start.py)."""
    handle = _held.pop(root.resolve(), None)
    if handle is not None:
        handle.close()
    return handle is not None


def _read_owner(handle: IO[str]) -> str:
    try:
        handle.seek(0)
        return handle.read().strip() or "unknown"
    except OSError:  # Windows: the holder's lock keeps others from reading it
        return "unknown"


def _try_lock(handle: IO[str]) -> bool:
    if sys.platform == "win32":  # a lock on the first byte, also released when the process ends
        import msvcrt

        handle.seek(0)
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.lockf(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def _host() -> str:
    import socket

    return socket.gethostname()
