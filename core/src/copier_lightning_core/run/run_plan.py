"""The run plan: what a Trainer command runs in and from, decided in one function.

`plan_run` is called once, right after parsing, and decides in this order:

1. the run folder: `--trainer.default_root_dir` as given, else a folder of the experiment,
   fresh or the run a checkpoint continues (run_folders.py); checked, and the loggers'
   folders pointed at it;
2. the checkpoint the command loads: `--ckpt_path` (`last`, `best`, a file, shards)
   turned into one file (ckpt_path.py) and loaded once, with a fit's `--init_from`;
3. what the checkpoint's hyperparameters change in the config, checked before
   LightningCLI applies them (checkpoint_hparams.py);
4. the lock: a fit by the launching process takes one on its folder (run_root.py);
5. the loggers: a resumed fit goes on logging to the version or run its checkpoint
   records (run_record.continue_loggers).

It writes nothing (a SLURM task 0 aside, which makes the folder the other tasks wait for):
doctor and a sweep parse a fit's command line without running it (resolve.py).
`RunPlan.claim` carries out what writes, once the checkpoint's hyperparameters are
applied and reconciled, so a command refused there writes nothing either: the fresh
folder, the lock, `command.txt`. Every hook of ProjectCLI reads the plan; a command that
stops before its first batch gives its claim back (`give_back`, failed_start.py).

The checkpoint is read once: the hyperparameters, LightningCLI's own reading of them,
the loggers a resumed fit continues, the weight check and the Trainer's load all take the
plan's dict; one resume used to unpickle its checkpoint five times, and a `last.ckpt`
that a running fit replaced meanwhile could give each reader another file. The Trainer's
own load takes the dict over (`hand_to`, through AtomicCheckpointIO.preload) and the plan
lets go of it, so nothing keeps the checkpoint alive while the run trains. The file is
loaded memory-mapped (inspect_ckpt.load_checkpoint), so holding it until the Trainer's
load costs address space, not a copy of the weights.
"""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import Strategy
from lightning.pytorch.utilities.model_helpers import is_overridden

from ..checkpoints.checkpoint_io import AtomicCheckpointIO
from ..checkpoints.load import load_checkpoint
from ..platform.paths import RunLayout, project_path
from .checkpoint_hparams import CheckpointHparams
from .ckpt_path import checkpoint_file, read_init_from
from .failed_start import RootBefore, ran_a_batch
from .run_folders import claim_fresh, experiment_folder, forget_handed_down, hand_down, planned_root
from .run_record import continue_loggers, record_end, record_invocation
from .run_root import check_run_root_path, check_writable, claim_for_fit, is_launching_process


@dataclass
class RunPlan:
    """What `plan_run` decided for one command, and what its claim has done since.

    `path` is None when the command loads no checkpoint, or one Lightning finds or reads
    itself (`hpc`, a remote path, a folder of shards the strategy reads, `last` before any
    exists). `checkpoint` is None then too, and once handed to the Trainer.
    """

    command: str
    words: list[str]  # the command line after the command, as command.txt records it
    root: Path
    chosen: bool  # no --trainer.default_root_dir: the folder of the experiment chosen here
    fresh: bool  # a new folder, made when claimed (`root-1`, ... when the name is taken)
    path: Path | None
    checkpoint: dict[str, Any] | None
    init_weights: dict[str, torch.Tensor] | None  # `fit --init_from FILE.ckpt`'s
    hparams: CheckpointHparams | None  # the checkpoint's hyperparameters, as they may be applied
    lock: bool  # a fit by the launching process: its folder is free of other runs, and locked
    loggers: dict[str, Any]  # logger class -> the version (run id) it continues
    before: RootBefore | None = field(default=None, repr=False)  # the folder before the claim
    recorded: bool = False  # command.txt records this command

    def claim(self, config: Namespace) -> None:
        """Make the folder the plan chose, lock it for a fit, record the command.

        What the folder held is noted first (launching process only): a command that
        stops before its first batch puts it back (`give_back`). A chosen folder is
        handed to the processes Lightning's DDP launcher starts from this one.
        """
        if is_launching_process():
            if self.chosen and self.fresh:
                planned, self.root = self.root, claim_fresh(self.root)
                _move_root(config, str(planned), self.root)
            if self.chosen:
                hand_down(self.root)
            self.before = RootBefore.note(self.root, fresh=self.fresh)
        check_writable(self.root)
        if self.lock:
            claim_for_fit(RunLayout(self.root), config.get("ckpt_path"))
        record_invocation(self.root, [self.command, *self.words])
        self.recorded = True

    def take_init_weights(self) -> dict[str, torch.Tensor] | None:
        """The `--init_from` weights, for InitFromWeights, which loads them; the plan lets go."""
        weights, self.init_weights = self.init_weights, None
        return weights

    def hand_to(self, trainer: Trainer) -> None:
        """The Trainer's own load of `path` gets the dict instead of reading the file, and
        the plan keeps no reference to it.

        Only where that load goes through AtomicCheckpointIO: a strategy that reads
        checkpoints itself (FSDP2's, DeepSpeed's) or another checkpoint plugin reads the
        file again, and the dict is let go of here.
        """
        checkpoint, self.checkpoint = self.checkpoint, None
        strategy = trainer.strategy
        if (
            checkpoint is not None
            and self.path is not None
            and isinstance(strategy.checkpoint_io, AtomicCheckpointIO)
            and not is_overridden("load_checkpoint", strategy, Strategy)
        ):
            strategy.checkpoint_io.preload(self.path, checkpoint)

    def give_back(self, trainer: Trainer | None) -> None:
        """Stopped before any batch: the folder as it was before the claim (failed_start.py)."""
        if self.before is not None and not ran_a_batch(trainer):
            self.before.undo()
            self.recorded = False

    def end(self, seconds: float, error: type | None) -> None:
        """The command is over: its time recorded, nothing held, nothing handed down."""
        forget_handed_down()
        self.checkpoint = self.init_weights = None  # a plan serves one command
        if self.recorded:
            record_end(self.root, seconds, error)


def plan_run(command: str, config: Namespace, words: Sequence[str]) -> RunPlan:
    """The plan of `command`, from its parsed `config` and the `words` typed after it.

    Fills in the config what the plan decided: `trainer.default_root_dir`, the loggers'
    `save_dir`, `ckpt_path` as the file it names, a continued logger's version.
    """
    # 1. The run folder.
    given = config.trainer.default_root_dir
    folder = experiment_folder(config.runs_dir, config.experiment)
    root, fresh = (
        (project_path(given), False)
        if given
        else planned_root(command, folder, config.get("ckpt_path"))
    )
    check_run_root_path(root, "--trainer.default_root_dir" if given else "--runs_dir")
    config.trainer.default_root_dir = str(root)
    _root_loggers(config.trainer.logger, root)
    # 2. The checkpoint, loaded once (and `--init_from`'s weights).
    init_weights = read_init_from(config) if command == "fit" else None
    path = checkpoint_file(command, config, RunLayout(root))
    checkpoint = load_checkpoint(path) if path is not None else None
    # 3. Its hyperparameters, and the code they name, checked.
    hparams = None
    if path is not None and checkpoint is not None:
        hparams = CheckpointHparams(command, config, path, checkpoint, words)
    # 4. The lock.
    lock = command == "fit" and is_launching_process()
    # 5. The loggers a resumed fit continues.
    loggers: dict[str, Any] = {}
    if command == "fit" and checkpoint is not None:
        loggers = continue_loggers(config.trainer.logger, checkpoint)
    return RunPlan(
        command=command,
        words=list(words),
        root=root,
        chosen=not given,
        fresh=fresh,
        path=path,
        checkpoint=checkpoint,
        init_weights=init_weights,
        hparams=hparams,
        lock=lock,
        loggers=loggers,
    )


def _root_loggers(logger_config: Any, root: Path) -> None:
    """Point every configured logger whose `save_dir` is unset at the run root."""
    for entry in _logger_entries(logger_config):
        init_args = entry.get("init_args")
        if init_args is not None and "save_dir" in init_args and init_args.save_dir is None:
            init_args.save_dir = str(root)


def _move_root(config: Namespace, old: str, new: Path) -> None:
    """The run root, and the loggers' folders pointed at it, moved to the claimed folder."""
    config.trainer.default_root_dir = str(new)
    for entry in _logger_entries(config.trainer.logger):
        init_args = entry.get("init_args")
        if init_args is not None and init_args.get("save_dir") == old:
            init_args.save_dir = str(new)


def _logger_entries(logger_config: Any) -> list[Namespace]:
    """The configured loggers (`trainer.logger`: one, a list, or a bool) named by class."""
    entries = logger_config if isinstance(logger_config, list) else [logger_config]
    return [entry for entry in entries if isinstance(entry, Namespace)]
