"""Where and how `fit` trains on this machine, as Lightning itself resolves it: doctor's plan.

doctor asks Lightning what `fit` asks it: a Trainer built from the config's hardware
settings (accelerator, devices, num_nodes, strategy, precision, plugins, sync_batchnorm;
no logger, checkpoints, progress bar or model summary) is resolved by Lightning's
accelerator connector, which refuses what it cannot build; building it makes no process
group and starts no process, for DDP and FSDP2 as for one device (the library's
tests/test_resolver.py checks both on CPU). The guard's rules (precision.py) then judge
what was built, as they judge `fit`'s Trainer. So on this machine doctor's answer is
`fit`'s; `hardware.resolve` predicts it only for a machine described as data.
"""

import functools
import logging
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.strategies import ParallelStrategy

from .hardware import PRECISION_ALIASES, PRECISION_FLAGS, Plan, Unrunnable, device_kind
from .precision import (
    HARDWARE_SETTINGS,
    REFUSED_BY_LIGHTNING,
    bf16_in_place_of_fp16,
    given_settings,
    precision_plugin,
    unrunnable,
)

# What a Trainer built only to resolve its hardware leaves out: nothing it would write or print.
QUIET: dict[str, Any] = {
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def built_plan(trainer_config: Mapping[str, Any]) -> Plan:
    """The `Plan` Lightning builds for the parsed `trainer:` section, or its refusal.

    A refusal is reported under the settings at fault: the precision ones when the same
    settings without them build (DR005), else the device ones (DR008).
    """
    given = {key: trainer_config[key] for key in HARDWARE_SETTINGS if key in trainer_config}
    settings = _instantiated(given)
    try:
        trainer = _trainer(settings)
    except REFUSED_BY_LIGHTNING as error:
        return _refused(given, settings, error)
    plugin = precision_plugin(settings.get("plugins"))
    cpu_fp16 = bf16_in_place_of_fp16(trainer, settings)
    return Plan(
        device=device_kind(trainer.accelerator),
        devices_per_node=trainer.num_devices,
        num_nodes=trainer.num_nodes,
        distributed=isinstance(trainer.strategy, ParallelStrategy),
        precision="16-mixed" if cpu_fp16 else str(trainer.precision),
        precision_plugin=_entry_of(plugin, given.get("plugins"), settings.get("plugins")),
        cpu_fp16=cpu_fp16,
        refusals=tuple(unrunnable(trainer, settings)),
    )


@functools.cache
def trainer_parser() -> LightningArgumentParser:
    """The Trainer's arguments as LightningCLI adds them (strategy, plugins: class_path)."""
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(Trainer, "trainer")
    return parser


def _instantiated(given: Mapping[str, Any]) -> dict[str, Any]:
    """The settings with their classes built, as LightningCLI builds them for `fit`."""
    parser = trainer_parser()
    with warnings.catch_warnings():  # jsonargparse's deprecation notes, LightningCLI's to heed
        warnings.simplefilter("ignore")
        parsed = parser.parse_object({"trainer": dict(given)})
        trainer = parser.instantiate_classes(parsed).trainer
    return {key: trainer[key] for key in given}


def _trainer(settings: Mapping[str, Any]) -> Trainer:
    with _silenced():
        return Trainer(**settings, **QUIET)


@contextmanager
def _silenced() -> Iterator[None]:
    """Lightning's notes while it builds (devices found, a precision replaced): doctor's
    table says what matters of them."""
    loggers = [logging.getLogger(name) for name in ("lightning.pytorch", "lightning.fabric")]
    levels = [logger.level for logger in loggers]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for logger in loggers:
            logger.setLevel(logging.ERROR)
        try:
            yield
        finally:
            for logger, level in zip(loggers, levels, strict=True):
                logger.setLevel(level)


def _refused(given: Mapping[str, Any], settings: Mapping[str, Any], error: Exception) -> Plan:
    """The plan of settings Lightning refuses: its reason, under the settings at fault."""
    others = [p for p in _listed(settings.get("plugins")) if precision_plugin(p) is None]
    without_precision = {**settings, "precision": None, "plugins": others or None}
    try:
        _trainer(without_precision)
        shown = {
            "precision": settings.get("precision"),
            "plugins": precision_plugin(settings.get("plugins")),
        }
    except REFUSED_BY_LIGHTNING:
        shown = {key: value for key, value in settings.items() if key not in PRECISION_FLAGS}
    at_fault = [key for key, value in shown.items() if value is not None] or ["accelerator"]
    flag = str(given.get("precision"))
    return Plan(
        device=str(given.get("accelerator") or "auto"),
        devices_per_node=None,
        num_nodes=int(given.get("num_nodes") or 1),
        distributed=False,
        precision=PRECISION_ALIASES.get(flag, flag) if given.get("precision") else "32-true",
        precision_plugin=None,
        cpu_fp16=False,
        refusals=(
            Unrunnable(
                at_fault[0],
                "",
                f"Lightning refuses them: {error}",
                "Change what it names; `fit` stops with the same reason as it builds the Trainer.",
                given=given_settings(shown),
            ),
        ),
    )


def _entry_of(plugin: Any, entries: Any, built: Any) -> Any:
    """The config entry (class_path and init_args) that `plugin` was built from."""
    if plugin is None:
        return None
    pairs = zip(_listed(entries), _listed(built), strict=False)
    return next((entry for entry, made in pairs if made is plugin), None)


def _listed(value: Any) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list | tuple) else [value]
