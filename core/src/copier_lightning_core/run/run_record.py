"""What a run root records about itself, and how `compare` and `sweep` read it back.

Written by every Trainer command (ProjectCLI):

- `<root>/command.txt`: each invocation appended (time, host, working directory, the
  command line), so a folder says how it was made and resumed; when it ends, a line
  `# ended ... after N s` (its whole time: data setup, sanity check, every epoch with its
  validation, test after fit, checkpoint writes; not the Python start before parsing).
- A resumed `fit` continues the loggers recorded in its checkpoint's provenance: the same
  CSV / TensorBoard `version` folder (CSV rows are appended, loggers.py) and the same wandb
  or MLflow run, instead of a new `version_N` (run) per resume.

Read back, from what runs already write (so runs made before this module read too): the
resolved config (the checkpoint's provenance, else the saved `config*.yaml`), the
provenance record, the checkpoint's callback states (the best score of
`checkpoint.monitor`, Lightning's `Timer`) and the CSV logger's `metrics.csv`, merged
over versions. The checkpoint's parts come from the JSON summary saved beside it while it
matches the file (checkpoints/summary.py): thousands of runs read without unpickling.
"""

import csv
import os
import re
import shlex
import socket
import sys
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from lightning.pytorch.utilities import rank_zero_only

from ..checkpoints.load import load_checkpoint
from ..checkpoints.summary import CONFIG, SUMMARIZED, read_summary
from ..platform.paths import RunLayout
from ..platform.project import program
from ..platform.yaml_guard import UnsafeYaml, load_yaml


@rank_zero_only
def record_invocation(root: Path, words: list[str]) -> None:
    """Append this command line to `<root>/command.txt` (rank 0 only)."""
    layout = RunLayout(root)
    layout.root.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
    with layout.command.open("a", encoding="utf-8") as file:
        file.write(f"# {stamp} on {socket.gethostname()} in {os.getcwd()}\n")
        file.write(f"{program()} {shlex.join(words)}\n")


@rank_zero_only
def record_end(root: Path, seconds: float, error: type | None) -> None:
    """Append how long the command recorded last took, and how it ended (rank 0 only)."""
    layout = RunLayout(root)
    if not layout.command.is_file():
        return
    stamp = datetime.now().astimezone().isoformat(timespec="seconds")
    how = "" if error is None else f" ({error.__name__})"
    with layout.command.open("a", encoding="utf-8") as file:
        file.write(f"# ended {stamp} after {seconds:.1f} s{how}\n")


def command_seconds(root: Path, command: str = "fit") -> float | None:
    """The summed time of every `command` run on this root that recorded its end."""
    layout = RunLayout(root)
    if not layout.command.is_file():
        return None
    total, current, found = 0.0, None, False
    for line in layout.command.read_text(encoding="utf-8", errors="replace").splitlines():
        ended = re.match(r"# ended \S+ after ([0-9.]+) s", line)
        if ended and current == command:
            total, found = total + float(ended[1]), True
        elif not line.startswith("#") and line.strip():
            words = line.split()
            current = words[3] if len(words) > 3 else None  # python -m <package> <command>
    return total if found else None


def continue_loggers(logger_config: Any, checkpoint: dict[str, Any]) -> dict[str, Any]:
    """Point the configured loggers at the versions / run the checkpoint was logged to;
    returns each continued logger's class name -> the version (run id) it was given.

    The provenance record names each logger class with its version (CheckpointProvenance);
    a logger whose version (wandb: id, MLflow: run_id) is set explicitly keeps it. A
    recorded version that is not a plain name (`../..`) is not followed: loggers make a
    folder of it, and a checkpoint from elsewhere must not choose where the run writes.
    """
    entries = logger_config if isinstance(logger_config, list) else [logger_config]
    entries = [
        entry for entry in entries if isinstance(entry, Namespace) and entry.get("init_args")
    ]
    recorded = (checkpoint.get("provenance") or {}).get("loggers") or {}
    continued: dict[str, Any] = {}
    for entry in entries:
        name = str(entry.get("class_path", "")).rsplit(".", 1)[-1]
        version = recorded.get(name)
        init_args = entry.init_args
        if version is None or version == "None" or not _plain_name(str(version)):
            continue
        if name.endswith("WandbLogger"):
            if not init_args.get("id"):
                init_args.id = continued[name] = version
                init_args.resume = "allow"
        elif name.endswith("MLFlowLogger"):
            if not init_args.get("run_id"):
                init_args.run_id = continued[name] = version
        elif init_args.get("version") is None:
            # Recorded as text; "0" must become 0 again, or the folder is "0", not "version_0".
            init_args.version = continued[name] = int(version) if version.isdigit() else version
    return continued


def _plain_name(version: str) -> bool:
    """A logger version that names one folder inside the run (no separator, no `..`)."""
    return re.fullmatch(r"[\w.-]+", version) is not None and version not in {".", ".."}


@dataclass
class RunRecord:
    """One run root as `compare` shows it."""

    root: Path
    config: dict[str, Any]
    provenance: dict[str, Any]
    checkpoint: dict[str, Any]  # the newest checkpoint's counters and callback states
    metrics: dict[str, dict[int, float]] = field(default_factory=dict)  # name -> step -> value

    @property
    def monitor(self) -> tuple[str | None, str]:
        section = self.config.get("checkpoint") or {}
        return section.get("monitor"), section.get("mode") or "min"

    @property
    def steps(self) -> int | None:
        if "global_step" in self.checkpoint:
            return int(self.checkpoint["global_step"])
        steps = [step for series in self.metrics.values() for step in series]
        return max(steps) if steps else None

    @property
    def train_seconds(self) -> float | None:
        """Lightning's Timer over every resume: the fit loop from its start to the last
        checkpoint, validation included; not the startup, data setup or test after fit."""
        for key, state in (self.checkpoint.get("callbacks") or {}).items():
            if str(key).startswith("Timer") and isinstance(state, dict):
                return float(state.get("time_elapsed", {}).get("train", 0.0)) or None
        return None

    @property
    def wall_seconds(self) -> float | None:
        """The `fit` commands on this root from parsing to exit, summed (command.txt)."""
        return command_seconds(self.root)

    @property
    def commit(self) -> str:
        git = self.provenance.get("git") or {}
        if not git.get("available"):
            return "n/a"
        commit: str = git["commit"]
        return commit[:8] + ("+dirty" if git.get("dirty") else "")

    def scores(self, monitor: str) -> tuple[float | None, float | None]:
        """(best, final) of `monitor`: from the CSV metrics, else the checkpoint's record."""
        series = self.metrics.get(monitor)
        if series:
            values = [series[step] for step in sorted(series)]
            best = min(values) if self.monitor[1] == "min" else max(values)
            return best, values[-1]
        return best_score(self.checkpoint, monitor), None


def best_score(checkpoint: dict[str, Any], monitor: str) -> float | None:
    """The best `monitor` value a ModelCheckpoint recorded in the checkpoint."""
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, dict) and state.get("monitor") == monitor:
            score = state.get("best_model_score")
            if score is not None:
                return float(score)
    return None


def is_run(folder: Path) -> bool:
    layout = RunLayout(folder)
    return (
        layout.checkpoints.is_dir()
        or layout.command.is_file()
        or any(folder.glob("*/version_*/metrics.csv"))
    )


def newest_checkpoint(folder: Path) -> Path | None:
    layout = RunLayout(folder)
    if layout.last.is_file():
        return layout.last
    found = sorted(layout.checkpoints.glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


class UnreadableRun(ValueError):
    """A run folder with a record that cannot be read; the message names the file and why."""


def read_run(folder: Path) -> RunRecord:
    """The run's records; UnreadableRun when its config or metrics cannot be read."""
    path = newest_checkpoint(folder)
    checkpoint = (read_summary(path) or _shown(load_checkpoint(path))) if path else {}
    provenance = checkpoint.pop("provenance", None) or {}
    parsed = checkpoint.pop(CONFIG, None)  # the summary's, parsed when it was saved
    if isinstance(parsed, dict):
        return RunRecord(folder, parsed, provenance, checkpoint, read_metrics(folder))
    recorded = provenance.get("config")
    source = f"the config recorded in {path}" if recorded else None
    if not recorded:
        source, recorded = _saved_config(folder)
    try:
        config = load_yaml(recorded, source or "the run's config") if recorded else {}
    except UnsafeYaml as error:
        raise UnreadableRun(str(error)) from None
    except yaml.YAMLError as error:
        raise UnreadableRun(
            f"{source} is not valid YAML ({' '.join(str(error).split())})"
        ) from None
    if not isinstance(config, dict):
        raise UnreadableRun(f"{source} is not a mapping of settings")
    return RunRecord(folder, config, provenance, checkpoint, read_metrics(folder))


def _shown(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """What a record keeps of a checkpoint, as its summary holds it: counters, callback
    states (Timer, best scores) and provenance, not the weights and optimizer states of
    thousands of runs at once."""
    return {key: value for key, value in checkpoint.items() if key in SUMMARIZED}


def _saved_config(folder: Path) -> tuple[str | None, str | None]:
    """(the newest saved config's path, its text), or (None, None)."""
    saved = sorted(folder.glob("config*.yaml")) + sorted(folder.glob("*/version_*/config*.yaml"))
    newest = max(saved, key=lambda p: p.stat().st_mtime, default=None)
    if newest is None:
        return None, None
    try:
        return str(newest), newest.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UnreadableRun(f"{newest} is not text ({error})") from None


def read_metrics(folder: Path) -> dict[str, dict[int, float]]:
    """`metrics.csv` of every CSV logger version, oldest first; a later row of a step wins.

    A resumed run repeats the steps logged after its checkpoint; runs resumed before
    versions were continued have one version per resume: merged in order, each step
    keeps the value of the run that went on from it.
    """
    files = sorted(folder.glob("*/version_*/metrics.csv"), key=_version_number)
    metrics: dict[str, dict[int, float]] = {}
    for path in files:
        try:
            with path.open(newline="", encoding="utf-8") as file:
                for row in csv.DictReader(file):
                    step = row.pop("step", "")
                    if not step:
                        continue
                    for name, value in row.items():
                        if value not in ("", None) and name != "epoch":
                            metrics.setdefault(name, {})[int(float(step))] = float(value)
        except (UnicodeDecodeError, csv.Error, ValueError, TypeError, OverflowError) as error:
            # Not the CSV the logger writes: damaged, or another file under that name.
            raise UnreadableRun(f"{path} is not a readable metrics file ({error})") from None
    return metrics


def _version_number(path: Path) -> tuple[str, int]:
    version = path.parent.name.removeprefix("version_")
    return path.parent.parent.name, int(version) if version.isdigit() else sys.maxsize
