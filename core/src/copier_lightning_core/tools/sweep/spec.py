"""The sweep spec: the YAML file `sweep SPEC.yaml` reads, checked whole before any work.

A spec names the search space over any `fit` option (a key is the option without its
leading `--`, as `fit --help` lists it: `model.optimizer.lr`), the metric and its
direction (by default the run's `checkpoint.monitor` / `checkpoint.mode`), Optuna's
sampler and pruner by class name with their arguments, optional seeds each trial is
repeated over, `fit` options for every trial, the experiment it searches around
(`experiment: NAME`: configs/experiments/NAME.yaml stacked under every trial's options,
as `fit --experiment NAME` does; the trials' folders stay under runs/sweeps/<name>/) and
the SLURM job settings. The shipped examples in `configs/sweeps/` comment every key.

Optuna's categorical choices must be None, bool, int, float or str; a parameter with any
other choice (a list of layer widths, a dict) keeps every choice as its JSON text in the
study and gets it back, decoded, on the command line of the trial.
"""

import inspect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ...platform.paths import experiments_folder
from ...platform.yaml_guard import UnsafeYaml, load_yaml

KEYS = {
    "name",
    "experiment",
    "trials",
    "metric",
    "direction",
    "seeds",
    "fit_options",
    "space",
    "sampler",
    "pruner",
    "slurm",
}
DIRECTIONS = {"minimize": "minimize", "min": "minimize", "maximize": "maximize", "max": "maximize"}
# The SLURM settings a spec may give: submitit's names (SlurmExecutor.update_parameters).
SLURM_KEYS: dict[str, type | tuple[type, ...]] = {
    "partition": str,
    "gpus_per_node": int,
    "cpus_per_task": int,
    "mem_gb": (int, float),
    "timeout_min": int,
    "array_parallelism": int,
    "account": str,
    "qos": str,
    "constraint": str,
    "setup": list,
    "additional_parameters": dict,
}
SCALARS = (type(None), bool, int, float, str)


class SpecError(ValueError):
    """A spec that cannot run: the message names the key and the fix."""


@dataclass(frozen=True)
class Param:
    """One searched config key and its range (numbers) or choices."""

    key: str
    kind: str  # float | int | categorical
    low: float = 0.0
    high: float = 0.0
    log: bool = False
    step: float | None = None
    choices: tuple[Any, ...] = ()
    as_json: bool = False  # categorical choices kept as JSON text (see the module's doc)

    def distribution(self) -> Any:
        from optuna import distributions

        if self.kind == "float":
            return distributions.FloatDistribution(
                self.low, self.high, log=self.log, step=self.step
            )
        if self.kind == "int":
            return distributions.IntDistribution(
                int(self.low),
                int(self.high),
                log=self.log,
                step=int(self.step or 1),
            )
        return distributions.CategoricalDistribution(self.choices)

    def decode(self, value: Any) -> Any:
        """The value a trial's `fit` gets from the value Optuna stores."""
        return json.loads(value) if self.as_json else value

    def corners(self) -> list[Any]:
        """Stored values at the edges of the range, or every choice: checked against `fit`."""
        if self.kind == "categorical":
            return list(self.choices)
        return [int(v) if self.kind == "int" else v for v in (self.low, self.high)]


@dataclass
class SweepSpec:
    path: Path
    name: str
    trials: int | None
    metric: str | None
    direction: str | None
    seeds: list[int]
    fit_options: list[str]
    space: dict[str, Param]
    sampler: dict[str, Any]
    pruner: dict[str, Any] | None
    slurm: dict[str, Any] = field(default_factory=dict)

    def identity(self) -> dict[str, Any]:
        """What must not change while a sweep's trials are compared with each other."""
        return {
            "space": {key: repr(param) for key, param in self.space.items()},
            "seeds": self.seeds,
            "fit_options": self.fit_options,
        }


def fit_value(value: Any) -> str:
    """A Python value as the text `fit --key=<text>` parses back to it."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value)


def load_spec(path: Path, name: str | None = None) -> SweepSpec:
    """Read and check a spec; `SpecError` names the first problem and its fix.

    `name` (the `--name` flag) replaces the spec's name: another folder, another sweep.
    """
    where = f"sweep spec {path}"
    if not path.is_file():
        raise SpecError(
            f"{where} does not exist. Pass a YAML file, e.g. one of configs/sweeps/ "
            "(copy one and edit its `space:`)."
        )
    try:
        data = load_yaml(path.read_text(encoding="utf-8"), where)
    except UnsafeYaml as error:
        raise SpecError(f"{error}.") from None
    except UnicodeDecodeError:
        raise SpecError(f"{where} is not a text file (UTF-8 YAML). Pass a spec.") from None
    except yaml.YAMLError as error:
        raise SpecError(f"{where} is not valid YAML ({error}). Fix the line it names.") from None
    if not isinstance(data, dict):
        raise SpecError(f"{where} must be a mapping with at least a `space:` section.")
    unknown = sorted(set(data) - KEYS)
    if unknown:
        raise SpecError(
            f"{where}: unknown key(s) {', '.join(unknown)}. A spec takes: "
            f"{', '.join(sorted(KEYS))} (see configs/sweeps/ for each one's meaning)."
        )
    name = str(name or data.get("name") or path.stem)
    if not re.fullmatch(r"[A-Za-z0-9._-]+", name):
        raise SpecError(
            f"{where}: `name: {name}` is used as a folder name (runs/sweeps/<name>/); use "
            "letters, digits, dots, dashes and underscores only."
        )
    trials = data.get("trials")
    if trials is not None and (
        not isinstance(trials, int) or isinstance(trials, bool) or trials < 1
    ):
        raise SpecError(f"{where}: `trials: {trials}` must be a whole number of at least 1.")
    metric = data.get("metric")
    if metric is not None and not isinstance(metric, str):
        raise SpecError(f"{where}: `metric:` must be a key your validation logs, e.g. val/loss.")
    direction = data.get("direction")
    if direction is not None:
        if direction not in DIRECTIONS:
            raise SpecError(
                f"{where}: `direction: {direction}` must be minimize (a loss) or maximize "
                "(an accuracy); leave it out to follow checkpoint.mode."
            )
        direction = DIRECTIONS[direction]
    seeds = _seeds(data.get("seeds"), where)
    fit_options = data.get("fit_options") or []
    if not isinstance(fit_options, list) or not all(
        isinstance(option, str) and option.startswith("--") for option in fit_options
    ):
        raise SpecError(
            f"{where}: `fit_options:` must be a list of `fit` options, each starting with "
            "`--`, e.g. [--trainer.max_epochs=2]."
        )
    experiment = _experiment(data.get("experiment"), where)
    if experiment is not None:  # under every other option: the spec's, then the command line's
        fit_options = [f"--experiment={experiment}", *fit_options]
    space = _space(data.get("space"), where)
    sampler = _component(data.get("sampler") or {"name": "TPESampler"}, "sampler", where)
    pruner = data.get("pruner")
    if pruner is not None:
        pruner = _component(pruner, "pruner", where)
    spec = SweepSpec(
        path=path,
        name=name,
        trials=trials,
        metric=metric,
        direction=direction,
        seeds=seeds,
        fit_options=fit_options,
        space=space,
        sampler=sampler,
        pruner=pruner,
        slurm=_slurm(data.get("slurm") or {}, where),
    )
    make_sampler(spec)  # the constructors' own checks of their arguments, now
    make_pruner(spec.pruner, path)
    return spec


def _experiment(name: Any, where: str) -> str | None:
    if name is None:
        return None
    known = sorted(path.stem for path in experiments_folder().glob("*.yaml"))
    if not isinstance(name, str) or name not in known:
        raise SpecError(
            f"{where}: `experiment: {name}` names no file configs/experiments/<name>.yaml. "
            f"Choose one of: {', '.join(known) or '(none yet)'}, or leave the key out."
        )
    return name


def _seeds(seeds: Any, where: str) -> list[int]:
    if seeds is None:
        return []
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise SpecError(
            f"{where}: `seeds: {seeds}` must be a list of different whole numbers, e.g. "
            "[1, 2, 3]: each trial is trained once per seed and judged by the mean."
        )
    return seeds


def _space(space: Any, where: str) -> dict[str, Param]:
    example = "model.optimizer.lr: {type: float, low: 1.0e-4, high: 1.0e-1, log: true}"
    if not isinstance(space, dict) or not space:
        raise SpecError(
            f"{where}: `space:` must map `fit` options (without the leading --) to their "
            f"range, e.g. `{example}`."
        )
    return {
        str(key): _param(str(key), value, f"{where}: space.{key}") for key, value in space.items()
    }


def _param(key: str, value: Any, where: str) -> Param:
    if key.startswith("-"):
        raise SpecError(f"{where}: write the key without its leading dashes ({key.lstrip('-')}).")
    if not isinstance(value, dict) or value.get("type") not in ("float", "int", "categorical"):
        raise SpecError(
            f"{where} must be a mapping with `type: float`, `type: int` (with low, high, "
            "optional log or step) or `type: categorical` (with choices)."
        )
    kind = value["type"]
    if kind == "categorical":
        extra = sorted(set(value) - {"type", "choices"})
        choices = value.get("choices")
        if extra or not isinstance(choices, list) or not choices:
            raise SpecError(
                f"{where}: a categorical parameter takes only `choices:`, a non-empty list "
                f"(got {', '.join(extra) or choices!r})."
            )
        as_json = not all(isinstance(choice, SCALARS) for choice in choices)
        stored = tuple(json.dumps(c) for c in choices) if as_json else tuple(choices)
        if len(set(stored)) != len(stored):
            raise SpecError(f"{where}: `choices:` lists a value twice; list each once.")
        return Param(key, kind, choices=stored, as_json=as_json)
    extra = sorted(set(value) - {"type", "low", "high", "log", "step"})
    if extra:
        raise SpecError(
            f"{where}: unknown setting(s) {', '.join(extra)}; use low, high, log, step."
        )
    number = int if kind == "int" else (int, float)
    low, high = value.get("low"), value.get("high")
    log, step = value.get("log", False), value.get("step")
    if not all(isinstance(v, number) and not isinstance(v, bool) for v in (low, high)):
        raise SpecError(
            f"{where}: `low` and `high` must both be {'whole numbers' if kind == 'int' else 'numbers'} "
            f"(got {low!r}, {high!r}); YAML reads 1e-4 as text, write 1.0e-4."
        )
    low, high = float(value["low"]), float(value["high"])  # an int parameter's are whole
    if not low < high:
        raise SpecError(f"{where}: `low` ({low}) must be below `high` ({high}).")
    if not isinstance(log, bool):
        raise SpecError(f"{where}: `log` must be true or false.")
    if log and low <= 0:
        raise SpecError(f"{where}: a log scale needs `low` above 0 (got {low}).")
    if step is not None and (log or not isinstance(step, number) or step <= 0):
        raise SpecError(
            f"{where}: `step` must be a positive number, and cannot be combined with `log: true`."
        )
    return Param(key, kind, low=low, high=high, log=log, step=step)


def _component(value: Any, what: str, where: str) -> dict[str, Any]:
    if isinstance(value, str):
        value = {"name": value}
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise SpecError(
            f"{where}: `{what}:` must be a mapping with `name:` (an optuna.{what}s class, e.g. "
            f"{'TPESampler' if what == 'sampler' else 'MedianPruner'}) and that class's arguments."
        )
    return dict(value)


def _slurm(slurm: Any, where: str) -> dict[str, Any]:
    if not isinstance(slurm, dict):
        raise SpecError(f"{where}: `slurm:` must be a mapping of job settings.")
    slurm = {key: value for key, value in slurm.items() if value is not None}  # null: unset
    for key, value in slurm.items():
        kind = SLURM_KEYS.get(key)
        if kind is None:
            raise SpecError(
                f"{where}: slurm.{key} is not a setting the sweep passes on. It takes: "
                f"{', '.join(sorted(SLURM_KEYS))}; put any other sbatch option under "
                "`additional_parameters:` (e.g. {mail_type: END})."
            )
        if not isinstance(value, kind) or isinstance(value, bool):
            raise SpecError(f"{where}: slurm.{key}: {value!r} has the wrong type.")
    return dict(slurm)


def _build(
    module: Any, what: str, config: dict[str, Any], path: Path, spec: SweepSpec | None
) -> Any:
    name, kwargs = config["name"], {k: v for k, v in config.items() if k != "name"}
    cls = getattr(module, name, None)
    if not inspect.isclass(cls) or name.startswith("_"):
        known = ", ".join(n for n in module.__all__ if n.endswith(what.capitalize()))
        raise SpecError(
            f"sweep spec {path}: {what} `{name}` is not in optuna.{what}s. Choose one of: {known}."
        )
    if name == "GridSampler" and "search_space" not in kwargs and spec is not None:
        kwargs["search_space"] = _grid(spec)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as error:
        raise SpecError(
            f"sweep spec {path}: optuna.{what}s.{name} refuses its arguments "
            f"({', '.join(map(str, kwargs)) or 'none'}): {error}. See its documentation "
            "for the arguments it takes."
        ) from None


def _grid(spec: SweepSpec) -> dict[str, list[Any]]:
    numeric = [key for key, param in spec.space.items() if param.kind != "categorical"]
    if numeric:
        raise SpecError(
            f"sweep spec {spec.path}: GridSampler tries every combination of choices, so every "
            f"parameter must be categorical; {', '.join(numeric)} is a range. List its values "
            "as `type: categorical` with `choices:`."
        )
    return {key: list(param.choices) for key, param in spec.space.items()}


def make_sampler(spec: SweepSpec, trial: int | None = None) -> Any:
    """The spec's sampler; with a seed and `trial`, a sampler seeded for that trial alone.

    Optuna's samplers keep their random state in memory: a sweep resumed in a new process
    builds its sampler from the seed again and replays nothing, so it would draw other
    values than a run that was never stopped. Seeded from (seed, trial number) through
    numpy's SeedSequence, trial k draws the same values in every run that reaches it with
    the same trials before it, stopped and resumed or not. QMCSampler keeps the spec's
    seed: it chooses the scrambled sequence, and Optuna keeps the position in it in the
    study.
    """
    import numpy as np
    import optuna

    config = dict(spec.sampler)
    seed = config.get("seed")
    if seed is not None and (
        not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32
    ):
        raise SpecError(
            f"sweep spec {spec.path}: the sampler's `seed: {seed}` must be a whole number "
            f"from 0 to {2**32 - 1} (numpy's seeds), or left out for a new sequence each run."
        )
    if trial is not None and seed is not None and config["name"] != "QMCSampler":
        config["seed"] = int(np.random.SeedSequence([seed, trial]).generate_state(1)[0])
    return _build(optuna.samplers, "sampler", config, spec.path, spec)


def make_pruner(config: dict[str, Any] | None, path: Path) -> Any:
    """The pruner a spec names; also built in each trial's `fit` (pruning.py)."""
    import optuna

    if config is None:
        return optuna.pruners.NopPruner()
    return _build(optuna.pruners, "pruner", config, path, None)
