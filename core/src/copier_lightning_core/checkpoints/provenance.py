"""What produced a checkpoint: code version, environment, config, seed and data.

`CheckpointProvenance` (in the default callbacks) writes a `provenance` record into every
checkpoint and sends the same record to the loggers' hyperparameters, so a TensorBoard or
wandb run shows the commit it was trained from. Every load through the CLI compares the
record with the running environment and warns, naming both sides, when the commit or a
version differs (`warn_if_environment_differs`). The record is plain str/int/bool/dict,
so checkpoints stay loadable with `torch.load(weights_only=True)`.
"""

import functools
import hashlib
import importlib.metadata
import os
import platform
import socket
import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import lightning
import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

from ..platform.project import LIBRARY, project_package, project_root
from ..platform.refusal import Refusal

# Recorded fields whose difference is worth a warning when a checkpoint is loaded.
COMPARED = {
    "git commit": ("git", "commit"),
    "package version": ("versions", "package"),
    "library version": ("versions", "library"),
    "torch": ("versions", "torch"),
    "lightning": ("versions", "lightning"),
    "python": ("versions", "python"),
    "uncommitted changes (sha256 of the diff)": ("git", "diff_sha256"),
}


def git_state(root: Path | None = None) -> dict[str, Any]:
    """Commit, branch, dirty flag and a hash of the uncommitted diff; why not, without git."""

    folder = project_root() if root is None else root

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=30
        ).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        diff = git("diff", "HEAD", "--binary")
        untracked = git("ls-files", "--others", "--exclude-standard")
        branch = git("rev-parse", "--abbrev-ref", "HEAD").strip()
    except FileNotFoundError:
        return {"available": False, "reason": "git is not installed"}
    except subprocess.CalledProcessError as error:
        reason = (error.stderr or "").strip().splitlines() or ["git failed"]
        return {"available": False, "reason": reason[0]}
    except subprocess.TimeoutExpired:
        return {"available": False, "reason": "git timed out"}
    return {
        "available": True,
        "commit": commit,
        "branch": branch,
        "dirty": bool(diff or untracked),
        "diff_sha256": hashlib.sha256((diff + untracked).encode()).hexdigest(),
    }


def package_version(package: str | None = None) -> str:
    """The installed version of `package` (default: the project's)."""
    try:
        return importlib.metadata.version(package or project_package())
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment() -> dict[str, Any]:
    """The facts of the running process that a checkpoint is compared against."""
    return {
        "git": git_state(),
        "versions": {
            "package": package_version(),
            "library": package_version(LIBRARY),
            "torch": str(torch.__version__),
            "lightning": str(lightning.__version__),
            "python": platform.python_version(),
            "cuda": str(torch.version.cuda),
        },
        "host": socket.gethostname(),
    }


class CheckpointProvenance(L.Callback):
    """Adds a `provenance` record to every checkpoint and to the loggers' hyperparameters.

    The record: git (commit, branch, dirty, diff hash), versions (package, torch, lightning,
    python, CUDA), host, start time, seed, the resolved config (set by the CLI as YAML) and,
    when the DataModule has a `fingerprint()` method, the dataset fingerprint it returns.
    """

    def __init__(self) -> None:
        self.config_yaml: str | None = None  # filled in by the CLI
        self.record: dict[str, Any] = {}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        record = {
            **environment(),
            "time": datetime.now().astimezone().isoformat(timespec="seconds"),
            "seed": int(os.environ["PL_GLOBAL_SEED"]) if "PL_GLOBAL_SEED" in os.environ else None,
            "dataset": _dataset_fingerprint(trainer),
            "loggers": {type(lg).__name__: str(lg.version) for lg in trainer.loggers},
        }
        for logger in trainer.loggers:
            logger.log_hyperparams({"provenance": record})
        self.record = {**record, "config": self.config_yaml}

    def on_save_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        checkpoint["provenance"] = self.record

    def on_load_checkpoint(
        self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        """Compare the data with what the checkpoint was trained on (both fingerprints):
        a fit resumed on other data is refused, since the split and the loader position
        it would continue belong to the checkpoint's data (with other files they skip,
        repeat or run past samples); evaluating on other data is warned about."""
        then = (checkpoint.get("provenance") or {}).get("dataset")
        now = self.record.get("dataset")
        if not isinstance(then, dict) or not isinstance(now, dict) or then == now:
            return
        changed = sorted(key for key in then.keys() | now.keys() if then.get(key) != now.get(key))
        what = ", ".join(f"{key} {then.get(key)!r} then, {now.get(key)!r} now" for key in changed)
        if trainer.state.fn == "fit":
            raise Refusal(
                f"the data differs from what this checkpoint was trained on ({what}): a "
                "resumed fit would continue a split and a loader position that belong to the "
                "checkpoint's data. Restore that data to resume, or start a new run from "
                "these weights with `--init_from <checkpoint>` instead of `--ckpt_path`."
            )
        rank_zero_warn(
            f"The data differs from what this checkpoint was trained on ({what}): the "
            "results are for this data, not the checkpoint's."
        )


def _dataset_fingerprint(trainer: L.Trainer) -> dict[str, Any] | None:
    # `datamodule` is set by Lightning's data connector; Trainer does not declare it.
    fingerprint = getattr(trainer.datamodule, "fingerprint", None)  # type: ignore[attr-defined]
    if callable(fingerprint):
        facts: dict[str, Any] | None = fingerprint()
        return facts
    _warn_once(
        "CheckpointProvenance: the DataModule has no `fingerprint()` method, so checkpoints "
        "do not record which data they were trained on. Add one that returns a dict (e.g. a "
        "hash of the dataset recipe or file list, and the split seed)."
    )
    return None


@functools.cache  # fit and the test after it set up twice: one warning is enough
def _warn_once(message: str) -> None:
    rank_zero_warn(message)


def warn_if_environment_differs(recorded: dict[str, Any] | None, path: str | Path) -> None:
    """Warn, naming both values, where the checkpoint's code or versions differ from this run."""
    if not recorded:
        rank_zero_warn(
            f"{path} carries no provenance record (written without CheckpointProvenance): "
            "the code and versions that produced it are unknown."
        )
        return
    current = environment()
    for label, (group, key) in COMPARED.items():
        then, now = recorded.get(group, {}).get(key), current[group].get(key)
        if then != now:
            rank_zero_warn(
                f"{path} was written with {label} {then or 'unknown'}; this run has "
                f"{now or 'unknown'}. Results may differ from the run that saved it."
            )
