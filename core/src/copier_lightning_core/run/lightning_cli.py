"""`ProjectCLI`: LightningCLI with the project's defaults, run layout and checks.

It is what `python -m <package> fit|validate|test|predict` runs (cli.py dispatches to it).
A command reads top to bottom: `parse_arguments` parses, checks the values and makes the
run plan (`plan_run`, run_plan.py: the run folder, the checkpoint read once, its
hyperparameters, the lock, the loggers' continuation), the one thing the CLI keeps of the
command; every later hook reads it. LightningCLI's public hooks are used:
`add_arguments_to_parser` (options, links), `parse_arguments`,
`before_instantiate_classes` (the hyperparameters reconciled, then the plan's claim of the
folder), `instantiate_trainer` (the checkpoint folder, the progress-bar flag,
`--init_from`) and the `before_<command>` / `after_<command>` methods; one private method
is replaced, `_parse_ckpt_path`, so that LightningCLI takes the checkpoint's
hyperparameters from the plan instead of reading the file again (private_apis.py says
more). Every callback
and plugin of a run is named in the config (`fit --print_config` prints them); the CLI
adds none but `InitFromWeights`, which `--init_from` asks for, and LightningCLI's saver
of the config (`RunConfigSaver`, which needs the parser, so no config entry can name it).
"""

import pydoc
import re
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal, NoReturn

import yaml
from jsonargparse import Namespace
from lightning.pytorch import LightningDataModule, LightningModule, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint, ProgressBar
from lightning.pytorch.cli import (
    ArgsType,
    LightningArgumentParser,
    LightningCLI,
    SaveConfigCallback,
)
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_helpers import is_overridden

from ..callbacks.finetune import InitFromWeights
from ..callbacks.predictions import PredictionWriter
from ..checkpoints.checkpoint_io import AtomicCheckpointIO
from ..checkpoints.load import check_weights_fit
from ..checkpoints.provenance import CheckpointProvenance
from ..platform.bad_input import refuse_bad_input
from ..platform.paths import (
    DEFAULT_EXPERIMENT,
    RUNS,
    RunLayout,
    default_config,
    project_path,
    unused_name,
)
from ..platform.private_apis import command_config_dump, subcommand_parser
from ..platform.project import program
from ..platform.refusal import Refusal
from ..platform.yaml_guard import checked_config_words, guard_jsonargparse_yaml
from .parse_errors import one_paragraph
from .parser_once import ParsesOnce, filling_in, validated_once
from .precision import check_built_trainer, lightning_refusals
from .run_folders import experiment_config
from .run_length import ProjectTrainer
from .run_plan import RunPlan, plan_run

TRAINER_COMMANDS = ("fit", "validate", "test", "predict")
PREDICT_LOADERS = ("predict_dataloader", "val_dataloader", "test_dataloader")


class RunConfigSaver(SaveConfigCallback):
    """Saves the resolved config of each run next to its logs, never over an earlier one.

    Lightning aborts when `config.yaml` already exists in the log dir, which happens when
    a run is resumed into the same root without a logger. The earlier config is part of
    the record, so the new one is written as `config-1.yaml`, `config-2.yaml`, ... instead.
    """

    def setup(self, trainer: Trainer, pl_module: LightningModule, stage: str) -> None:
        log_dir = Path(trainer.log_dir or trainer.default_root_dir)
        self.config_filename = unused_name(log_dir, "config", ".yaml") + ".yaml"
        super().setup(trainer, pl_module, stage)


class ErrorOnlyParser(ParsesOnce):
    """LightningCLI's parser, whose error is the error and the `--help` tip, no usage first.

    jsonargparse prints the whole usage of the command (some 70 lines for `fit`) before
    "error: unrecognized arguments: --trainer.max_epoch 3"; the error then scrolls out of
    sight. `--help` still prints the usage with the help. A value its type refuses
    (`--data.num_workers -1` against `NonNegativeInt | Literal["auto"]`) is one paragraph
    naming the option, the value and the type it takes (parse_errors.py), not the tree of
    every type jsonargparse tried.
    """

    def print_usage(self, file: object = None) -> None:
        return  # jsonargparse calls it only on an error (argparse's help prints its own)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        if self.exit_on_error:  # the parser that reports; nested ones raise to it
            parser = getattr(ex, "subcommand_parser", None) or self
            message = one_paragraph(message, parser.prog.replace(" [options]", ""))
        super().error(message, ex)


class ProjectCLI(LightningCLI):
    """LightningCLI in subclass mode with the project's run layout.

    - `configs/default.yaml` applies to every Trainer command, wherever it is run from.
    - Relative `trainer.default_root_dir` is taken relative to the project root; every
      output of a run lives under it (paths.RunLayout): loggers' folders, the saved
      config, checkpoints in the fixed `<root>/checkpoints/` (so `--ckpt_path last`
      resumes a rerun) and predictions. Without one, each fit gets a fresh folder
      `runs/<experiment>/<date>_<time>/`, and `--ckpt_path last|best` reads the newest
      run of the experiment (run_folders.py). `--experiment NAME` stacks
      `configs/experiments/NAME.yaml` on the defaults and names the runs' folder.
    - `--ckpt_path best` also works in a fresh process (validate/test/predict): it is read
      from the ModelCheckpoint state stored in `<root>/checkpoints/last.ckpt`.
    - Weights that do not fit the model stop before loading, listing the keys.
    - `num_classes` is declared once, in the `data:` section, and linked into the model
      and its network.
    - A class named in place of the example's (`--model my.Net`, or in another --config)
      starts from its own defaults: configs/default.yaml's values for the example's class
      never reach it.
    - After `fit`, the best checkpoint is tested when the module and data define a test
      step (`--test_after_fit false` to skip), then a summary is printed.
    - `predict --dataloader val_dataloader` predicts another split of the DataModule.
    - The Trainer Lightning built is checked before any work (`precision.py`): its
      refusals as one paragraph, real float16 on CPU, a clear stop for what cannot run here.
    - Every checkpoint carries the resolved config in its provenance record
      (CheckpointProvenance, when the callbacks list names it); a resumed wandb run
      continues the same run id.
    - `fit --init_from PATH [--freeze NAME ...]` starts from another run's weights.
    - An empty `--config` file is no overrides; YAML whose aliases expand past a bound is
      refused unread (yaml_guard.py). A fit without a length stops when the module's
      schedule asks for its number of steps (run_length.py).
    - `--trainer.enable_progress_bar false` turns off the bar the callbacks list names.
    - Nothing else is added or replaced here: the progress bar, profiler, checkpoint I/O,
      loader checks and monitor check are entries of configs/default.yaml, each removable.
    """

    plan: RunPlan  # what the command runs in and from, made once after parsing (run_plan.py)

    def __init__(self, args: list[str] | None = None, **kwargs: Any) -> None:
        started = time.monotonic()
        try:
            self._init(args, **kwargs)
        except BaseException:
            if hasattr(self, "plan"):  # stopped before any batch: the folder as it was
                self.plan.give_back(getattr(self, "trainer", None))
            raise
        finally:
            if hasattr(self, "plan"):
                self.plan.end(time.monotonic() - started, sys.exc_info()[0])

    def _init(self, args: list[str] | None = None, **kwargs: Any) -> None:
        defaults_file = default_config()
        if not defaults_file.is_file():
            raise Refusal(
                f"the default config {defaults_file} is missing. It holds the run's "
                "model, data and trainer settings; restore it from git "
                f"(`git checkout -- {defaults_file.relative_to(defaults_file.parents[1])}`) "
                "or copy it back from the template."
            )
        guard_jsonargparse_yaml()  # a YAML alias bomb is refused, not expanded (yaml_guard.py)
        # No abbreviations: `--trainer.max_epoch` must be an error, not max_epochs.
        defaults = {"default_config_files": [str(defaults_file)], "allow_abbrev": False}
        kwargs.setdefault("trainer_class", ProjectTrainer)  # a run without length: run_length.py
        kwargs.setdefault("parser_class", ErrorOnlyParser)
        first = next(iter(sys.argv[1:] if args is None else args), None)
        self._commands = (first,) if first in TRAINER_COMMANDS else TRAINER_COMMANDS
        super().__init__(
            model_class=LightningModule,
            datamodule_class=LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            save_config_callback=RunConfigSaver,
            parser_kwargs={
                "allow_abbrev": False,
                "prog": program(),
                **dict.fromkeys(self._commands, defaults),
            },
            args=args,
            **kwargs,
        )

    def subcommands(self) -> dict[str, set[str]]:  # type: ignore[override]
        """Lightning's subcommands, only the one this command runs when it names one.

        LightningCLI builds a parser for each subcommand it lists (the Trainer's, model's
        and data's options, every time), and a process runs one: the other three cost
        every command about 0.1 s. `subcommands` is LightningCLI's documented way to
        choose them; a command that names none (`--print_config` first) lists all four,
        so jsonargparse's error names them.
        """
        every = LightningCLI.subcommands()
        return {command: every[command] for command in self._commands}

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # The best-checkpoint callback as a config section of its own, so the metric a run
        # is judged by is one key (`checkpoint.monitor`), not an entry in a callback list.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        # num_classes, declared once in `data:`. jsonargparse (subclass mode) skips a link
        # whose source or target the chosen class lacks, so a DataModule or a module
        # without num_classes (a regressor) parses as before: no condition needed. A value
        # given for a target (`--model.num_classes`) is replaced by the data's. The value
        # linked from the example's data does not stay behind in a class named in place of
        # the example's: that class starts from its own defaults (_parse_with_own_defaults).
        parser.link_arguments("data.init_args.num_classes", "model.init_args.num_classes")
        parser.link_arguments(
            "data.init_args.num_classes", "model.init_args.net.init_args.num_classes"
        )
        parser.add_argument(
            "--experiment",
            type=str,
            default=DEFAULT_EXPERIMENT,
            help="Stacks configs/experiments/NAME.yaml on the defaults; without "
            "--trainer.default_root_dir, runs go to runs/NAME/<date>_<time>/.",
        )
        parser.add_argument(
            "--runs_dir",
            type=str,
            default=RUNS,
            help="The folder of the experiments' run folders (relative to the project).",
        )
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
        parser.add_argument(
            "--dataloader",
            type=Literal[PREDICT_LOADERS],
            default="predict_dataloader",
            help="predict only: the DataModule method whose loader is predicted.",
        )
        parser.add_argument(
            "--predictions_format",
            type=Literal["pt", "csv", "parquet"] | None,
            default=None,
            help="predict only: the file the PredictionWriter writes, for this call "
            "(pt, or a table: csv, parquet); default: its `format` in the config.",
        )

    def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
        given = sys.argv[1:] if args is None else args
        if not isinstance(given, list):  # LightningCLI also takes a dict or a Namespace
            raise TypeError(
                f"ProjectCLI takes its arguments as words, not a {type(given).__name__}"
            )
        words = [str(word) for word in given]
        self.config = _parse_with_own_defaults(
            parser, checked_config_words(_with_experiment(words))
        )
        command = self.config.subcommand
        refuse_bad_input(command, self.config[command])
        with filling_in(parser, self.config):
            self.plan = plan_run(command, self.config[command], words[1:])

    def _parse_ckpt_path(self) -> None:
        """LightningCLI's own read of `--ckpt_path`, from the run plan's checkpoint.

        LightningCLI loads the whole file (every tensor into memory) to apply its
        hyperparameters to `model:`; they come from the checkpoint the plan read instead,
        applied the same way (private_apis.py names this override).
        """
        hparams = self.plan.hparams
        if hparams is None:
            super()._parse_ckpt_path()
            return
        self.config = hparams.apply_saved(self.parser, self.config)

    def before_instantiate_classes(self) -> None:
        """Reconcile the checkpoint's hyperparameters, then claim the plan's run folder.

        In this order, so a fit refused by its checkpoint writes nothing, not even
        `command.txt` (RunPlan.claim). The config is validated once here, before the claim
        (what a checkpoint's hyperparameters changed); its two dumps do not validate it
        again (parser_once.py).
        """
        hparams = self.plan.hparams
        if hparams is not None:  # LightningCLI has applied the saved ones by now
            self.config = hparams.apply_recorded(self.parser, self.config)
            hparams.reconcile(self.config[self.plan.command])
        command = self.plan.command
        with validated_once(self.parser, subcommand_parser(self, command), self.config):
            self.plan.claim(self.config[command])

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        config = self.config_init[self.subcommand]
        if config.trainer.get("enable_progress_bar") is False:
            # The flag that turns Lightning's own bar off turns off the one the callbacks
            # list names too (ThrottledProgressBar in default.yaml); Lightning would refuse
            # the pair, and `--trainer.enable_progress_bar false` is the documented switch.
            config.trainer.callbacks = [
                c for c in _listed(config.trainer.callbacks) if not isinstance(c, ProgressBar)
            ]
        # Lightning resolves accelerator, devices, strategy and precision as it builds the
        # Trainer; the guard checks what it built, before any work (precision.py).
        settings = {**config.trainer, **kwargs}
        with lightning_refusals(settings):
            trainer = super().instantiate_trainer(**kwargs)
        check_built_trainer(trainer, settings)
        # `dirpath: null` means `<root>/checkpoints` (said next to each ModelCheckpoint in
        # configs/default.yaml), not Lightning's `<root>/<logger>/version_N/checkpoints`:
        # one fixed folder, so `--ckpt_path last` of a rerun finds last.ckpt.
        checkpoint_dir = str(RunLayout(trainer.default_root_dir).checkpoints)
        for callback in trainer.checkpoint_callbacks:
            if isinstance(callback, ModelCheckpoint) and not callback.dirpath:
                callback.dirpath = checkpoint_dir
        # Set by Lightning's callback connector; Trainer does not declare the attribute.
        for callback in trainer.callbacks:  # type: ignore[attr-defined]
            if isinstance(callback, CheckpointProvenance):
                callback.config_yaml = self._config_yaml()
        if config.get("init_from"):  # `init_from:` in the printed config names this file
            weights = self.plan.take_init_weights()
            trainer.callbacks.append(  # type: ignore[attr-defined]
                InitFromWeights(project_path(config.init_from), config.freeze, weights)
            )
        return trainer

    def _config_yaml(self) -> str:
        """The resolved config of this command, as `--config` takes it back."""
        text: str = yaml.safe_dump(command_config_dump(self), sort_keys=False)
        return text

    def before_fit(self) -> None:
        self._check_and_hand_over()

    def before_validate(self) -> None:
        self._check_and_hand_over()

    def before_test(self) -> None:
        self._check_and_hand_over()

    def before_predict(self) -> None:
        self._check_and_hand_over()
        self._set_predictions_format()
        method = self.config_init.predict.dataloader
        if method == "predict_dataloader" or self.datamodule is None:
            return
        if not is_overridden(method, self.datamodule, LightningDataModule):
            raise Refusal(
                f"--dataloader {method}: {type(self.datamodule).__name__} does not "
                f"define {method}(). Choose one it defines: {', '.join(PREDICT_LOADERS)}."
            )
        # Lightning's predict takes its loader from the DataModule's `predict_dataloader`
        # (LightningCLI passes the DataModule, not loaders): for this process, that hook
        # returns the chosen split's loader. `setup` still sees the stage "predict".
        self.datamodule.predict_dataloader = getattr(self.datamodule, method)

    def _set_predictions_format(self) -> None:
        """`--predictions_format` for this call, without editing the callback list.

        (jsonargparse addresses a list's callback on the command line only when it is the
        last one added, so the writer's own `format` cannot be typed there.)
        """
        chosen = self.config_init.predict.get("predictions_format")
        if chosen is None:
            return
        callbacks = getattr(self.trainer, "callbacks", [])  # set by Lightning, undeclared
        writers = [callback for callback in callbacks if isinstance(callback, PredictionWriter)]
        if not writers:
            raise Refusal(
                f"--predictions_format {chosen}: this run has no PredictionWriter in "
                "trainer.callbacks to write predictions with. Add it back to the callbacks "
                "of configs/default.yaml (`- class_path: "
                f"{PredictionWriter.__module__}.PredictionWriter`)."
            )
        for writer in writers:
            writer.format = chosen

    def _check_and_hand_over(self) -> None:
        """Names and shapes of the checkpoint's weights against the model's, before loading;
        then the checkpoint goes to the Trainer's load (RunPlan.hand_to). Every load of this
        command may rebuild left-out frozen weights from the model (left_out.py).

        Skipped for a module that builds layers in `configure_model` (they do not exist
        yet) and for anything but a checkpoint file (a sharded folder, a missing path:
        Lightning reports those).
        """
        io = self.trainer.strategy.checkpoint_io
        if isinstance(io, AtomicCheckpointIO):  # any load: --ckpt_path, the test after fit
            io.rebuild_left_out_with(self.model)
        plan = self.plan
        configured = is_overridden("configure_model", self.model, LightningModule)
        if plan.path is not None and plan.checkpoint is not None and not configured:
            check_weights_fit(self.model, plan.checkpoint, plan.path)
        plan.hand_to(self.trainer)

    def after_fit(self) -> None:
        trainer, checkpoint = self.trainer, self.trainer.checkpoint_callback
        tested: list[Mapping[str, float]] = []
        if (
            self.config.fit.test_after_fit
            and is_overridden("test_step", self.model, LightningModule)
            and is_overridden("test_dataloader", self.datamodule, LightningDataModule)
            and not trainer.interrupted
        ):
            best = checkpoint.best_model_path if isinstance(checkpoint, ModelCheckpoint) else ""
            tested = trainer.test(self.model, datamodule=self.datamodule, ckpt_path=best or None)
        # log_dir is a collective call under DDP: every rank asks, only rank 0 prints.
        _print_summary(trainer, trainer.log_dir, tested)


def _parse_with_own_defaults(parser: LightningArgumentParser, words: list[str]) -> Namespace:
    """Parse `words`; a `model:` or `data:` class other than the example's gets its own defaults.

    When a class_path changes, jsonargparse keeps every init_arg the new class also accepts
    (its documented rule, meant for interactive overrides; jsonargparse #460). Applied to
    configs/default.yaml, that hands the example's values to the user's classes: `--data
    my.Data` would read the example's `data_dir` and `batch_size`, and `--model my.Net` kept
    the `num_classes` linked from the example's data even when my.Data declares none. The
    values in default.yaml belong to the classes named there, so a section whose class ends
    up another one is parsed from `null` and that class: its own defaults, then only what
    the user gave (command line, other --config files), in their order. A swap inside a kept
    example (`--model.optimizer torch.optim.SGD`) still keeps `lr`: the context the
    example's values were chosen for is still there.

    Which class a section ends up with is known only once every `--config` file and flag is
    merged, which is what a parse does; jsonargparse has no setting that drops init_args on
    a class change (kept by design, jsonargparse #460). So the parse starts from the classes
    the words name as `--model CLASS` / `--data CLASS` (_named_classes), and is done again,
    from the classes it ended with, only where those differ (a `--config` file or
    `--model.class_path` chose another) or `--print_config` was given (left out of the first
    parse, which would print and exit). The one parse is the same as the two: the words that
    named a class still come after the `null`, so the last class named wins in both.
    """
    shown = [word for word in words if word.split("=", 1)[0] != "--print_config"]
    example = yaml.safe_load(default_config().read_text()) or {}
    # The class words go after the command; words that do not start with one are parsed as
    # they are, to the error that names the commands.
    leads = bool(words) and words[0] in TRAINER_COMMANDS
    named = _fresh_words(_named_classes(words[1:]), example) if leads else []
    config = parser.parse_args([*shown[:1], *named, *shown[1:]])
    fresh = _fresh_words(_chosen_classes(config[config.subcommand]), example)
    if fresh != named or shown != words:
        config = parser.parse_args([words[0], *fresh, *words[1:]])
    return config


_CLASS_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")


def _named_classes(words: list[str]) -> dict[str, str]:
    """The class each of `model`/`data` is last given as a dotted path in `words` (`--model
    my.Net`, `--data=my.Data`); a section whose last class word is anything else (YAML, a
    file, a bare name) is left out, and found by the parse instead."""
    named: dict[str, str] = {}
    for index, word in enumerate(words):
        key, equals, value = word.partition("=")
        if key not in ("--model", "--data"):
            continue
        if not equals:
            value = words[index + 1] if index + 1 < len(words) else ""
        section = key.removeprefix("--")
        if _CLASS_PATH.fullmatch(value):
            named[section] = value
        else:
            named.pop(section, None)
    return named


def _chosen_classes(config: Namespace) -> dict[str, str]:
    """The class_path each of `model`/`data` ended up with in a parsed command's config."""
    chosen = {key: config.get(key) for key in ("model", "data")}
    return {key: value.class_path for key, value in chosen.items() if value is not None}


def _fresh_words(classes: Mapping[str, str], example: dict[str, Any]) -> list[str]:
    """`--model=null --model=CLASS` (and for `data`) where CLASS is not the one `example`
    (configs/default.yaml, read) names."""
    words = []
    for key in ("model", "data"):
        chosen = classes.get(key)
        if chosen is not None and not _is_example_class(example.get(key), chosen):
            words += [f"--{key}=null", f"--{key}={chosen}"]
    return words


def _is_example_class(section: Any, class_path: str) -> bool:
    """Whether default.yaml's `section` names the class at `class_path` (however spelt), or none."""
    named: str | None = section.get("class_path") if isinstance(section, dict) else section
    if not named:
        return True
    if "." not in named:  # a bare class name, which jsonargparse looks up among the subclasses
        return named == class_path.rsplit(".", 1)[-1]
    return pydoc.locate(named) is pydoc.locate(class_path)


def _with_experiment(words: list[str]) -> list[str]:
    """`--config configs/experiments/NAME.yaml` after the command when `--experiment NAME` is
    given: stacked on configs/default.yaml, under every other `--config` and flag typed."""
    name = None
    for index, word in enumerate(words):
        if word == "--experiment" and index + 1 < len(words):
            name = words[index + 1]
        elif word.startswith("--experiment="):
            name = word.split("=", 1)[1]
    path = experiment_config(name) if name else None
    return [words[0], f"--config={path}", *words[1:]] if path else words


def _listed(value: Any) -> list[Any]:
    """A Trainer `callbacks` value (None, one callback or a list) as a list."""
    return [] if value is None else list(value) if isinstance(value, list) else [value]


@rank_zero_only
def _print_summary(
    trainer: Trainer, log_dir: str | None, tested: list[Mapping[str, float]]
) -> None:
    """Where the run is, its best checkpoint and score, and what the test after fit logged.

    `tested` is what `trainer.test` returned (one dict per test loader): every metric the
    module's test_step logged, whatever its name.
    """
    checkpoint = trainer.checkpoint_callback
    lines = [f"run root        {trainer.default_root_dir}"]
    if log_dir:
        lines.append(f"logs            {log_dir}")
    lines.append(f"trained         {trainer.current_epoch} epochs, {trainer.global_step} steps")
    if isinstance(checkpoint, ModelCheckpoint):
        if checkpoint.best_model_path:
            score = checkpoint.best_model_score
            shown = f"{score.item():.4f}" if score is not None else "n/a"
            lines.append(f"best checkpoint {checkpoint.best_model_path}")
            lines.append(f"best {checkpoint.monitor:<10} {shown}")
        if checkpoint.last_model_path:
            lines.append(
                f"last checkpoint {checkpoint.last_model_path}  (resume: --ckpt_path last)"
            )
    for metrics in tested:
        lines += [f"{name:<15} {value:.4f}" for name, value in metrics.items()]
    width = max(map(len, lines))
    print("\n".join(["", "=" * width, *lines, "=" * width]))
