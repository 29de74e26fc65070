"""`--ckpt_path FILE`: what the checkpoint's hyperparameters change in the command's config.

LightningCLI rebuilds the model of a checkpoint from the hyperparameters it records: they
replace the config's `model:` section, command-line flags included, without a word
(`validate --ckpt_path X` may build another architecture than the config names; `fit
--ckpt_path X --model.optimizer.lr 0.001` runs with the checkpoint's lr). Here:

- Before LightningCLI reads the file, it is checked (a truncated or foreign file stops
  with one paragraph) and so is the code it names (trusted_classes.py).
- Values from config files yield to the checkpoint's; each one it changed is printed.
- A value given explicitly on the command line (`--model.<key> VALUE`) that differs from
  the checkpoint's wins for `validate`, `test` and `predict` (printed too). For `fit` it
  is refused: a resume restores the optimizer and scheduler state saved with the
  checkpoint's values, so a new learning rate, say, would silently not take effect. The
  way to train on from those weights with new settings is a new run (`--init_from`).
- A resumed `fit` whose `trainer.max_epochs` / `max_steps` differ from the run that wrote
  the checkpoint is warned: a learning-rate schedule made for the run's length continues
  from its saved state, so the rate jumps, or rises again past the old end.

`--ckpt_path last` and `best` are read the same way (ckpt_path.py turns them into files).

The data goes with the model: LightningCLI rebuilds only the model, so a run trained with
classes named on the command line (`--model pkg.mine.Bert --data pkg.mine.Tokens`) and
evaluated without them got the config's example DataModule, its `num_classes` linked into
the rebuilt model. When the checkpoint's DataModule class (its hyperparameters, else the
recorded config's `data:`) is not the config's and no `--data CLASS` is typed, the `data:`
section is rebuilt from the checkpoint by the same rule as the model's (listed, code
trust-checked, explicit `--data.<key>` flags kept). A model rebuilt as another class than
the config's from a checkpoint that records no DataModule stops with one paragraph.

An argument a module keeps out of its hyperparameters (`save_hyperparameters(ignore=
["net"])`, the usual way with an injected network) is not in them, so LightningCLI would
build it from the current config, which may name another network than the run trained.
It is taken from the run's resolved config instead, which every checkpoint the CLI writes
records (provenance.py); `export` rebuilds from both the same way.
"""

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ArgumentParser, Namespace
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn

from ..checkpoints.trusted_classes import (
    DATA_SECTIONS,
    Trust,
    check_sections,
    named_in,
    taken_hyperparameters,
)
from ..platform.refusal import Refusal
from ..platform.yaml_guard import UnsafeYaml, load_yaml

_ABSENT = "(not set)"

# A checkpoint's hyperparameter sections -> the config section each was made from.
CONFIG_SECTIONS = {"hyper_parameters": "model", "datamodule_hyper_parameters": "data"}


def recorded_section(checkpoint: dict[str, Any], name: str) -> dict[str, Any]:
    """Section `name` of the run's resolved config, recorded by provenance.py; {} if none.

    The recorded text is the checkpoint's, so it is read bounded (yaml_guard.py).
    """
    recorded = (checkpoint.get("provenance") or {}).get("config")
    if not isinstance(recorded, str):
        return {}
    try:
        config = load_yaml(recorded, "the config recorded in the checkpoint (provenance)")
    except (UnsafeYaml, yaml.YAMLError) as error:
        problem = " ".join(str(error).split())  # YAML's errors span lines
        raise Refusal(
            f"{problem}. It is read to rebuild what the run trained (arguments kept "
            "out of the hyperparameters, the run's length); load only the checkpoint's "
            "weights instead with `fit --init_from FILE`."
        ) from None
    section = config.get(name) if isinstance(config, dict) else None
    return section if isinstance(section, dict) else {}


def recorded_arguments(checkpoint: dict[str, Any], key: str = "hyper_parameters") -> dict[str, Any]:
    """Init arguments of the run's recorded config that the hyperparameters under `key` lack.

    Only for the class those hyperparameters name; {} for a checkpoint written without
    the CLI (no class path, no recorded config).
    """
    hparams = checkpoint.get(key) or {}
    if not hparams.get("_class_path"):
        return {}
    section = recorded_section(checkpoint, CONFIG_SECTIONS[key])
    if section.get("class_path") != hparams["_class_path"]:
        return {}
    init_args = section.get("init_args") or {}
    return {name: value for name, value in init_args.items() if name not in hparams}


def recorded_run_length(checkpoint: dict[str, Any]) -> dict[str, Any]:
    """`max_epochs` and `max_steps` of the run that wrote the checkpoint; {} if unrecorded."""
    trainer = recorded_section(checkpoint, "trainer")
    return {key: trainer[key] for key in ("max_epochs", "max_steps") if key in trainer}


def checkpoint_data(checkpoint: dict[str, Any]) -> dict[str, Any] | None:
    """The DataModule the run trained with, as hyperparameters with `_class_path`; None if
    the checkpoint records none (a DataModule without save_hyperparameters, or no CLI):
    its hyperparameters completed from the recorded config, else the recorded `data:`.
    """
    hparams = checkpoint.get(DATA_SECTIONS[0])
    if isinstance(hparams, dict) and hparams.get("_class_path"):
        return {**hparams, **recorded_arguments(checkpoint, DATA_SECTIONS[0])}
    section = recorded_section(checkpoint, "data")
    if not isinstance(section.get("class_path"), str):
        return None
    init_args = section.get("init_args")
    return {"_class_path": section["class_path"], **(init_args or {})}


def _as_model_section(hparams: dict[str, Any]) -> dict[str, Any] | None:
    """Hyperparameters as LightningCLI applies them to `model:` when it reads `--ckpt_path`
    (its `_parse_ckpt_path`): a class with `_class_path`, its arguments as `dict_kwargs`;
    None without any."""
    hparams = dict(hparams)
    hparams.pop("_instantiator", None)
    if not hparams:
        return None
    if "_class_path" in hparams:
        return {"class_path": hparams.pop("_class_path"), "dict_kwargs": hparams}
    return hparams


def _class_path_of(section: Any) -> str | None:
    """The class path a config section names (`model:`, `data:`); None if it names none."""
    class_path = section.get("class_path") if isinstance(section, Namespace) else None
    return class_path if isinstance(class_path, str) else None


def _refuse_replaced_on_resume(path: Path, replaced: dict[str, Any], config: Namespace) -> None:
    """Stop a resume whose command line gives a value the checkpoint holds otherwise, for a
    key whose checkpoint value is not taken from a file (the same value goes on)."""
    differing = [key for key, value in replaced.items() if _value_at(config, key) != value]
    if not differing:
        return
    raise Refusal(
        f"fit --ckpt_path {path}: the command line sets {', '.join(differing)} to other values "
        "than the checkpoint holds, whose values are not taken from a file (no plain type "
        "declared, or a class outside this project, torch and Lightning). Resuming restores "
        "the optimizer and scheduler state saved with the checkpoint's values, so a run "
        "continued with other values would not be the same run. To resume, give the "
        "checkpoint's values (`inspect-ckpt FILE --config` shows them); to train from these "
        f"weights with yours, start a new run: `fit --init_from {path}`."
    )


def _value_at(config: Namespace, key: str) -> Any:
    """The plain value of `model.<a>.<b>` in a parsed config (through `init_args` levels)."""
    node: Any = config
    for part in key.split("."):
        if isinstance(node, Namespace) and part not in node and "init_args" in node:
            node = node.get("init_args")
        if not isinstance(node, Namespace) or part not in node:
            return None
        node = node[part]
    return node.as_dict() if isinstance(node, Namespace) else node


class CheckpointHparams:
    """The model and data sections before the checkpoint is applied, the flags typed, and
    the checkpoint's hyperparameters as they may be applied (trusted_classes.py)."""

    def __init__(
        self,
        command: str,
        config: Namespace,
        path: Path,
        checkpoint: dict[str, Any],
        words: Sequence[str],
    ) -> None:
        """`words`: the command line as typed, whose `--model.<key>` flags are explicit."""
        self.explicit = {section: explicit_keys(words, section) for section in SECTIONS}
        self.data = _data_to_rebuild(checkpoint, config.get("data"), self.explicit["data"])
        check_sections(checkpoint, path, ("hyper_parameters", *DATA_SECTIONS))
        trust = Trust(
            named=frozenset(named_in(config)),
            explicit=frozenset(key for keys in self.explicit.values() for key in keys),
            mappings=frozenset(
                key for keys in self.explicit.values() for key, whole in keys.items() if whole
            ),
        )
        self.command, self.path = command, path
        hparams = dict(checkpoint.get("hyper_parameters") or {})
        hparams.pop("_instantiator", None)
        self.class_path = hparams.get("_class_path")
        recorded = recorded_arguments(checkpoint)
        model_class = _class_path_of(config.get("model"))
        taken, replaced = taken_hyperparameters(
            {**hparams, **recorded}, "model", path, trust, model_class
        )
        if self.data is not None:
            data, replaced_data = taken_hyperparameters(self.data, "data", path, trust)
            self.data, replaced = data, {**replaced, **replaced_data}
        if command == "fit":
            _refuse_replaced_on_resume(path, replaced, config)
        self.saved = _as_model_section({k: v for k, v in taken.items() if k not in recorded})
        self.recorded = {key: value for key, value in taken.items() if key in recorded}
        self.run_length = recorded_run_length(checkpoint)
        self.epochs_done = _epochs_done(checkpoint)
        if self.data is None:
            _refuse_data_without_record(path, checkpoint, config, self.class_path, self.explicit)
        self.before_config = Namespace(  # type: ignore[no-untyped-call]  # unannotated in jsonargparse
            model=_copy(config.model), data=_copy(config.get("data"))
        )
        self.before = self.before_config.model

    def apply_saved(self, parser: ArgumentParser, config: Namespace) -> Namespace:
        """The full config with the checkpoint's hyperparameters applied to `model:`, as
        LightningCLI applies them from the file (ProjectCLI has it take them from here)."""
        if self.saved is None:
            return config
        try:
            applied: Namespace = parser.parse_object({self.command: {"model": self.saved}}, config)
        except SystemExit:
            sys.stderr.write("Parsing of ckpt_path hyperparameters failed!\n")
            raise
        return applied

    def apply_recorded(self, parser: ArgumentParser, config: Namespace) -> Namespace:
        """The full config, with what the hyperparameters lack taken from the recorded config,
        and the checkpoint's DataModule where it is to be rebuilt.

        Applied as LightningCLI applies the hyperparameters themselves, so `reconcile`
        treats all alike: listed, and yielding to flags typed on the command line.
        """
        if self.recorded and self.class_path:
            model = {"class_path": self.class_path, "dict_kwargs": self.recorded}
            config = parser.parse_object({self.command: {"model": model}}, config)
        if self.data is not None:
            init_args = {key: value for key, value in self.data.items() if key != "_class_path"}
            init_args.pop("_instantiator", None)
            config[self.command].data = None  # the class's own defaults, not the config's
            data = {"class_path": self.data["_class_path"], "init_args": init_args}
            config = parser.parse_object({self.command: {"data": data}}, config)
        return config

    def reconcile(self, config: Namespace) -> None:
        """After LightningCLI applied the checkpoint: explicit flags win (or, for fit, stop)."""
        if self.command == "fit":
            self._warn_if_the_length_changed(config.trainer)
        for section in SECTIONS:
            if section == "model" or self.data is not None:
                self._reconcile(config, section)

    def _reconcile(self, config: Namespace, section: str) -> None:
        before_section, after_section = self.before_config[section], config[section]
        changed = _changed(before_section, after_section, section)
        conflicts = [key for key in changed if self._explicit(key, section)]
        if conflicts and self.command == "fit" and section == "model":
            before, after = _leaves(self.before, section), _leaves(config.model, section)
            listed = "; ".join(
                f"--{key} {_shown(before, key)} (checkpoint: {_shown(after, key)})"
                for key in conflicts
            )
            raise Refusal(
                f"fit --ckpt_path {self.path}: the command line sets {listed}. "
                "Resuming restores the optimizer and scheduler state saved with the "
                "checkpoint's values, so new ones would not (or only partly) take effect. To "
                "continue the run as it was, drop these flags. To train from these weights "
                f"with new settings, start a new run: `fit --init_from {self.path}` with "
                "your flags (a new run folder, runs/<experiment>/<date>_<time>/)."
            )
        kept = []
        for key in sorted(conflicts, key=len):  # a whole class before its arguments
            node = _node_path(before_section, key, section)
            # A data flag whose key the checkpoint's class lacks stays behind with the config's.
            if node is not None and _node_path(after_section, key, section) is not None:
                config[node] = _copy(self.before_config[node])
                kept.append(key)
        changed = _changed(before_section, config[section], section)
        if changed or kept:
            before, after = _leaves(before_section, section), _leaves(config[section], section)
            what = "the model is" if section == "model" else "the DataModule is"
            lines = [f"--ckpt_path {self.path}: {what} rebuilt from its hyperparameters."]
            lines += [
                f"  {key}: {_shown(before, key)} (config) -> {_shown(after, key)} (checkpoint)"
                for key in changed
            ]
            lines += [f"  {key}: kept from the command line" for key in kept]
            rank_zero_info("\n".join(lines))

    def _warn_if_the_length_changed(self, trainer: Namespace) -> None:
        max_epochs = trainer.get("max_epochs")
        if max_epochs not in (None, -1) and self.epochs_done > max_epochs:
            # Lightning stops the same resume later, with a traceback (its restore_loops).
            raise Refusal(
                f"fit --ckpt_path {self.path} --trainer.max_epochs {max_epochs}: the checkpoint "
                f"has {self.epochs_done} epochs done already, more than the run may train. "
                f"Give a larger --trainer.max_epochs to train on, or evaluate it as it is "
                f"(`validate --ckpt_path {self.path}`)."
            )
        changed = [
            f"{key} {before} -> {trainer.get(key)}"
            for key, before in self.run_length.items()
            if trainer.get(key) != before
        ]
        if not changed:
            return
        rank_zero_warn(
            f"fit --ckpt_path {self.path}: the run's length changed ({', '.join(changed)}). "
            "A learning-rate schedule made for the run's length (warmup then cosine decay, "
            "a `T_max` or `total_steps`) does not stretch on a resume: it "
            "continues from its saved state, so the rate jumps, or rises again past the old "
            "end. To train longer on a schedule made for the new length, start a new run "
            f"from these weights: `fit --init_from {self.path}` with the new length (a new "
            "run folder)."
        )

    def _explicit(self, key: str, section: str = "model") -> bool:
        """Typed on the command line: the key itself, or a mapping given for a parent."""
        explicit = self.explicit[section]
        parts = key.split(".")
        prefixes = (".".join(parts[:n]) for n in range(1, len(parts)))
        return key in explicit or any(explicit.get(prefix) for prefix in prefixes)


SECTIONS = ("model", "data")


def _epochs_done(checkpoint: dict[str, Any]) -> int:
    """The epochs a fit resumed from `checkpoint` counts as done: what Lightning restores
    as `current_epoch` (its fit loop's completed epochs), else the saved epoch."""
    loops = checkpoint.get("loops") or {}
    try:
        return int(loops["fit_loop"]["epoch_progress"]["current"]["completed"])
    except (KeyError, TypeError, ValueError):
        return int(checkpoint.get("epoch") or 0)


def _data_to_rebuild(
    checkpoint: dict[str, Any], data: Any, explicit: dict[str, bool]
) -> dict[str, Any] | None:
    """The checkpoint's DataModule (checkpoint_data) when it replaces the config's: its
    class is not the config's and no `--data CLASS` (or a mapping for `--data`) was typed."""
    if "data" in explicit:
        return None
    recorded = checkpoint_data(checkpoint)
    if recorded is None or not isinstance(recorded.get("_class_path"), str):
        return None
    config_class = data.get("class_path") if isinstance(data, Namespace) else None
    return None if _same_class(config_class, recorded["_class_path"]) else recorded


def _same_class(named: str | None, class_path: str) -> bool:
    """Whether a config's class path names `class_path` (a bare name: its last part)."""
    if not named:
        return False
    return named == class_path or ("." not in named and named == class_path.rsplit(".", 1)[-1])


def _refuse_data_without_record(
    path: Path,
    checkpoint: dict[str, Any],
    config: Namespace,
    model_class: Any,
    explicit: dict[str, dict[str, bool]],
) -> None:
    """Stop when the model is rebuilt as another class than the config's and the checkpoint
    records no DataModule: the config's would feed the model data it never saw."""
    data, model = config.get("data"), config.get("model")
    if (
        not isinstance(data, Namespace)
        or "data" in explicit["data"]
        or "model" in explicit["model"]
    ):
        return
    if not isinstance(model_class, str) or checkpoint_data(checkpoint) is not None:
        return
    if _same_class(model.get("class_path") if isinstance(model, Namespace) else None, model_class):
        return
    raise Refusal(
        f"--ckpt_path {path}: its model is {model_class} (the config names "
        f"{model.get('class_path') if isinstance(model, Namespace) else None}), rebuilt from "
        "the checkpoint, but the checkpoint records no DataModule (no datamodule "
        "hyperparameters, no recorded config), so the data it was trained on cannot be "
        f"rebuilt, and the config's {data.get('class_path')} may not be data that model "
        "reads. Name the data class the run used on the command line: `--data CLASS` (with "
        "its arguments, `--data.<key> VALUE`)."
    )


def explicit_keys(args: Sequence[str], section: str = "model") -> dict[str, bool]:
    """`--<section>.<key>` flags typed on the command line -> whether the value is a mapping.

    Keys drop jsonargparse's `init_args` level: `--model.init_args.optimizer.init_args.lr`
    and `--model.optimizer.lr` are both `model.optimizer.lr`; `--model X` is `model`.
    """
    keys: dict[str, bool] = {}
    flag = f"--{section}"
    for index, token in enumerate(args):
        if not (token == flag or token.startswith((f"{flag}.", f"{flag}="))):
            continue
        name, equals, value = token[2:].partition("=")
        if not equals and index + 1 < len(args):
            value = args[index + 1]
        parts = [part for part in name.split(".") if part not in ("init_args", "dict_kwargs")]
        keys[".".join(parts)] = value.lstrip().startswith("{")
    return keys


def _leaves(section: Any, prefix: str = "model") -> dict[str, Any]:
    """A model section as flat keys: a class's own key holds its class path."""
    if isinstance(section, Namespace):
        section = section.as_dict()
    if not isinstance(section, dict):
        return {prefix: section}
    flat: dict[str, Any] = {}
    if "class_path" in section:
        flat[prefix] = section["class_path"]
        for key in ("init_args", "dict_kwargs"):
            for name, value in (section.get(key) or {}).items():
                flat.update(_leaves(value, f"{prefix}.{name}"))
        return flat
    for name, value in section.items():
        flat.update(_leaves(value, f"{prefix}.{name}"))
    return flat


def _changed(before: Any, after: Any, prefix: str = "model") -> list[str]:
    old, new = _leaves(before, prefix), _leaves(after, prefix)
    return sorted(
        key for key in old.keys() | new.keys() if old.get(key, _ABSENT) != new.get(key, _ABSENT)
    )


def _node_path(section: Any, key: str, prefix: str = "model") -> str | None:
    """Where `model.<a>.<b>` lives: `model.init_args.a.init_args.b`; None if absent."""
    node, path = section, [prefix]
    for part in key.split(".")[1:]:
        if isinstance(node, Namespace) and "class_path" in node and part not in node:
            node, path = node.get("init_args"), [*path, "init_args"]
        if not isinstance(node, Namespace) or part not in node:
            return None
        node, path = node[part], [*path, part]
    return ".".join(path)


def _copy(value: Any) -> Any:
    return value.clone() if isinstance(value, Namespace) else value


def _shown(flat: dict[str, Any], key: str) -> str:
    value = flat.get(key, _ABSENT)
    return value if isinstance(value, str) else repr(value)
