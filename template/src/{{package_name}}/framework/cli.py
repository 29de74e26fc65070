# Managed by the template; local edits are merged on update.
"""The command line: `python -m <package> <command> [options]`.

Trainer commands (fit, validate, test, predict) go to LightningCLI, which only knows
Trainer methods as subcommands; the project's own tools go to their own small parsers.
"""

import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_helpers import is_overridden

from .checkpoint_io import AtomicCheckpointIO
from .consolidate import consolidate_checkpoint
from .determinism import verify_determinism
from .doctor import main as doctor
from .export import export
from .finetune import InitFromWeights
from .inspect_ckpt import explain_state_dict_mismatch, inspect_checkpoint, load_checkpoint
from .paths import DEFAULT_CONFIG, project_path
from .precision import trainer_kwargs_for_accelerator
from .provenance import CheckpointProvenance
from .resume import InterruptCheckpoint
from .tune import tune

TRAINER_COMMANDS = ("fit", "validate", "test", "predict")
TOOLS: dict[str, Callable[[Sequence[str]], int]] = {
    "doctor": doctor,
    "inspect-ckpt": inspect_checkpoint,
    "verify-determinism": verify_determinism,
    "export": export,
    "consolidate-ckpt": consolidate_checkpoint,
    "tune": tune,
}


class RunConfigSaver(SaveConfigCallback):
    """Saves the resolved config of each run next to its logs, never over an earlier one.

    Lightning aborts when `config.yaml` already exists in the log dir, which happens when
    a run is resumed into the same root without a logger. The earlier config is part of
    the record, so the new one is written as `config-1.yaml`, `config-2.yaml`, ... instead.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)
        stem, suffix = "config", ".yaml"
        name, n = f"{stem}{suffix}", 0
        while (log_dir / name).exists():
            n += 1
            name = f"{stem}-{n}{suffix}"
        self.config_filename = name
        super().setup(trainer, pl_module, stage)


class ProjectCLI(LightningCLI):
    """LightningCLI in subclass mode with the project's run layout.

    - `configs/default.yaml` applies to every Trainer command, wherever it is run from.
    - Relative `trainer.default_root_dir` is taken relative to the project root; every
      output of a run lives under it: loggers' folders, the saved config, and checkpoints
      in the fixed `<root>/checkpoints/`, so `--ckpt_path last` resumes a rerun.
    - `--ckpt_path best` also works in a fresh process (validate/test/predict): it is read
      from the ModelCheckpoint state stored in `<root>/checkpoints/last.ckpt`.
    - After `fit`, the best checkpoint is tested when the module and data define a test
      step (`--test_after_fit false` to skip), then a summary is printed.
    - Precision and strategy are checked against the accelerator before the Trainer is
      built (`precision.py`): real float16 on CPU, a clear stop for what cannot run here.
    - Every checkpoint is saved atomically (`AtomicCheckpointIO`) and carries the resolved
      config in its provenance record; a resumed wandb run continues the same run id.
    - `fit --init_from PATH [--freeze NAME ...]` starts from another run's weights.
    """

    def __init__(self, args: Sequence[str] | None = None, **kwargs) -> None:
        if not DEFAULT_CONFIG.is_file():
            sys.exit(
                f"error: the default config {DEFAULT_CONFIG} is missing. It holds the run's "
                "model, data and trainer settings; restore it from git "
                f"(`git checkout -- {DEFAULT_CONFIG.relative_to(DEFAULT_CONFIG.parents[1])}`) "
                "or copy it back from the template."
            )
        # No abbreviations: `--trainer.max_epoch` must be an error, not max_epochs.
        defaults = {"default_config_files": [str(DEFAULT_CONFIG)], "allow_abbrev": False}
        super().__init__(
            model_class=LightningModule,
            datamodule_class=LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=RunConfigSaver,
            parser_kwargs={"allow_abbrev": False, **dict.fromkeys(TRAINER_COMMANDS, defaults)},
            args=args,
            **kwargs,
        )

    def _run_subcommand(self, subcommand: str) -> None:
        # torch's key-mismatch error is one long line; say which keys and why instead.
        try:
            super()._run_subcommand(subcommand)
        except RuntimeError as error:
            explain_state_dict_mismatch(error, self.config[subcommand].get("ckpt_path"))
            raise

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The best-checkpoint callback as a config section of its own, so the metric a run
        # is judged by is one key (`checkpoint.monitor`), not an entry in a callback list.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.add_argument(
            "--test_after_fit",
            type=bool,
            default=True,
            help="After fit, test the best checkpoint (when the module defines test_step).",
        )
        parser.add_argument(
            "--init_from",
            type=str | None,
            default=None,
            help="fit only: start from the weights of this .ckpt or .safetensors file.",
        )
        parser.add_argument(
            "--freeze",
            type=list[str],
            default=[],
            help="with --init_from: submodules to freeze, e.g. [net.0, net.1].",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args) -> None:
        super().parse_arguments(parser, args)
        config = self.config[self.config.subcommand]
        root = project_path(config.trainer.default_root_dir or "runs/default")
        config.trainer.default_root_dir = str(root)
        _root_loggers(config.trainer.logger, root)
        if config.get("ckpt_path") == "best" and self.config.subcommand != "fit":
            config.ckpt_path = str(_best_checkpoint(root / "checkpoints"))
        if self.config.subcommand == "fit" and config.get("ckpt_path"):
            _continue_wandb_run(config.trainer.logger, config.ckpt_path, root / "checkpoints")

    def instantiate_trainer(self, **kwargs) -> Trainer:
        trainer_config = {**self._get(self.config_init, "trainer", default={}), **kwargs}
        kwargs.update(trainer_kwargs_for_accelerator(trainer_config))
        trainer = super().instantiate_trainer(**kwargs)
        # The `checkpoint:` section's callback (the only one with a monitor) first among the
        # ModelCheckpoints, which stay last: it is then `trainer.checkpoint_callback`, whose
        # best_model_path `--ckpt_path best`, test-after-fit and the summary read.
        trainer.callbacks.sort(key=_checkpoint_rank)
        checkpoint_dir = os.path.join(trainer.default_root_dir, "checkpoints")
        for callback in trainer.callbacks:
            if isinstance(callback, ModelCheckpoint | InterruptCheckpoint) and not callback.dirpath:
                callback.dirpath = checkpoint_dir
            if isinstance(callback, CheckpointProvenance):
                subcommand = self.config.subcommand
                callback.config_yaml = self._parser(subcommand).dump(
                    self.config[subcommand], skip_none=False
                )
        if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        config = self.config[self.config.subcommand]
        if config.get("init_from"):
            trainer.callbacks.append(InitFromWeights(project_path(config.init_from), config.freeze))
        return trainer

    def after_fit(self) -> None:
        trainer, checkpoint = self.trainer, self.trainer.checkpoint_callback
        if (
            self.config.fit.test_after_fit
            and is_overridden("test_step", self.model, LightningModule)
            and is_overridden("test_dataloader", self.datamodule, LightningDataModule)
            and not trainer.interrupted
        ):
            best = checkpoint.best_model_path if isinstance(checkpoint, ModelCheckpoint) else ""
            trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)
        # log_dir is a collective call under DDP: every rank asks, only rank 0 prints.
        _print_summary(trainer, trainer.log_dir)


def _checkpoint_rank(callback) -> int:
    if not isinstance(callback, ModelCheckpoint):
        return 0
    return 1 if callback.monitor else 2


def _root_loggers(logger_config, root: Path) -> None:
    """Point every configured logger whose `save_dir` is unset at the run root."""
    entries = logger_config if isinstance(logger_config, list) else [logger_config]
    for entry in entries:
        init_args = entry.get("init_args") if isinstance(entry, Namespace) else None
        if init_args is not None and "save_dir" in init_args and init_args.save_dir is None:
            init_args.save_dir = str(root)


def _continue_wandb_run(logger_config, ckpt_path: str, checkpoint_dir: Path) -> None:
    """Resuming a fit logs to the wandb run of the checkpoint, not to a new run."""
    path = checkpoint_dir / "last.ckpt" if ckpt_path == "last" else project_path(ckpt_path)
    entries = logger_config if isinstance(logger_config, list) else [logger_config]
    wandb_entries = [
        entry.init_args
        for entry in entries
        if isinstance(entry, Namespace) and str(entry.get("class_path", "")).endswith("WandbLogger")
    ]
    if not wandb_entries or not path.is_file():
        return
    run_id = (load_checkpoint(path).get("provenance") or {}).get("loggers", {}).get("WandbLogger")
    for init_args in wandb_entries:
        if run_id and not init_args.get("id"):
            init_args.id = run_id
            init_args.resume = "allow"


def _best_checkpoint(checkpoint_dir: Path) -> Path:
    """The best checkpoint recorded by ModelCheckpoint in `last.ckpt` of a finished run."""
    last = checkpoint_dir / "last.ckpt"
    if last.is_file():
        states = load_checkpoint(last).get("callbacks", {})
        for state in states.values():
            best = Path(state.get("best_model_path") or "")
            if best.name and best.is_file():
                return best
    sys.exit(
        f"error: --ckpt_path best: no best checkpoint is recorded in {last}. Train first "
        "with the same --trainer.default_root_dir, or pass a checkpoint file "
        "(`--ckpt_path path/to/file.ckpt`, or `--ckpt_path last`)."
    )


@rank_zero_only
def _print_summary(trainer: Trainer, log_dir: str | None) -> None:
    checkpoint = trainer.checkpoint_callback
    lines = [f"run root        {trainer.default_root_dir}"]
    if log_dir:
        lines.append(f"logs            {log_dir}")
    lines.append(f"trained         {trainer.current_epoch} epochs, {trainer.global_step} steps")
    if isinstance(checkpoint, ModelCheckpoint):
        if checkpoint.best_model_path:
            score = checkpoint.best_model_score
            value = f"{score.item():.4f}" if score is not None else "n/a"
            lines.append(f"best checkpoint {checkpoint.best_model_path}")
            lines.append(f"best {checkpoint.monitor:<10} {value}")
        if checkpoint.last_model_path:
            lines.append(
                f"last checkpoint {checkpoint.last_model_path}  (resume: --ckpt_path last)"
            )
    for name, value in trainer.callback_metrics.items():
        if name.startswith("test/"):
            lines.append(f"{name:<15} {value.item():.4f}")
    width = max(map(len, lines))
    print("\n".join(["", "=" * width, *lines, "=" * width]))


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to a project tool by name, else to LightningCLI."""
    words = list(sys.argv[1:] if argv is None else argv)
    if words and words[0] in TOOLS:
        return TOOLS[words[0]](words[1:])
    if words and not words[0].startswith("-") and words[0] not in TRAINER_COMMANDS:
        commands = ", ".join([*TRAINER_COMMANDS, *TOOLS])
        sys.exit(f"error: unknown command {words[0]!r}. Commands: {commands}.")
    # From the shell, LightningCLI reads sys.argv itself: passing it as `args=` too makes
    # Lightning warn on every command that both were given.
    ProjectCLI(args=None if argv is None else words)
    _close_process_group()
    return 0


def _close_process_group() -> None:
    """Shut down DDP's process group before the process exits.

    Lightning leaves it open; a process that exits with a live gloo group can abort at
    interpreter shutdown ("terminate called without an active exception", seen under
    torchrun), turning a finished run into a failed one.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
