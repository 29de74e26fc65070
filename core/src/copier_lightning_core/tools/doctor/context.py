"""What the checks look at: the resolved config, this machine, the environment, the sources.

The machine is probed once into plain facts (`Machine`), so every check is a pure function
of its `Context` and a test can ask "what would doctor say on a 2-GPU node?" on a laptop.
Where the run trains (device, processes, precision) is not decided here: `Context.plan`
is, on this machine (`doctor` itself), what Lightning builds for the config, judged as
`fit` judges it (run/lightning_plan.py); for a machine described as data, the prediction
of `run.hardware.resolve`.
"""

import importlib.util
import os
import platform
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from ...platform.loader_rules import available_cpus
from ...run.hardware import Hardware, Plan, probe, resolve


@dataclass(frozen=True)
class Machine(Hardware):
    """The facts about this machine that the checks need: its `Hardware` and more."""

    system: str  # platform.system(): "Linux", "Darwin" or "Windows"
    cpus: int  # CPU cores this process may use
    torch_version: str
    cxx: str | None  # the C++ compiler inductor would call on CPU, if any
    modules: frozenset[str]  # optional packages present (e.g. transformer_engine)
    dynamo_supported: bool | None = None  # probed only when a compile callback is configured
    compile_modes: frozenset[str] | None = None  # torch.compile modes this torch knows


def probe_machine(with_compiler: bool) -> Machine:
    """This machine's facts; dynamo and inductor are imported only `with_compiler` (seconds)."""
    import torch

    from ...platform.private_apis import dynamo_supports_this_python, known_compile_modes

    dynamo_supported = compile_modes = None
    if with_compiler:
        dynamo_supported = dynamo_supports_this_python()
        compile_modes = known_compile_modes()
    return Machine(
        **asdict(probe()),
        system=platform.system(),
        cpus=available_cpus(),
        torch_version=torch.__version__.split("+")[0],
        cxx=_cxx(),
        modules=frozenset(
            name for name in ("transformer_engine",) if importlib.util.find_spec(name)
        ),
        dynamo_supported=dynamo_supported,
        compile_modes=compile_modes,
    )


def _cxx() -> str | None:
    """The compiler inductor picks: $CXX, else the platform's usual names."""
    usual: tuple[str, ...] = (
        ("cl",) if platform.system() == "Windows" else ("g++", "clang++", "c++")
    )
    for name in (os.environ.get("CXX"), *usual):
        if name and (found := shutil.which(name)):
            return found
    return None


@dataclass(frozen=True)
class Context:
    """Everything one doctor run reads."""

    config: dict[str, Any]  # the resolved `fit` config as plain data (class_path / init_args dicts)
    machine: Machine | None  # None in static mode
    env: Mapping[str, str]
    root: Path  # the project root: sources are scanned and git is asked here
    files: tuple[Path, ...] | None = None  # static mode: scan only these files
    provenance_class: str | None = None  # the project's checkpoint provenance callback, if any
    here: bool = False  # `machine` is the one running: Lightning itself resolves the plan

    @property
    def trainer(self) -> dict[str, Any]:
        return self.config.get("trainer") or {}

    @cached_property
    def plan(self) -> Plan:
        """Where and how `fit` would train this config on this machine, or why it would not."""
        assert self.machine is not None, "a static doctor run has no machine to plan for"
        if self.here:
            from ...run.lightning_plan import built_plan  # imports Lightning: not in static mode

            return built_plan(self.trainer)
        return resolve(self.trainer, self.machine)

    @property
    def data_args(self) -> dict[str, Any] | None:
        """init_args of the data module, or None when the config names no class."""
        data = self.config.get("data")
        return (data.get("init_args") or {}) if isinstance(data, dict) else None

    def entries(self, key: str) -> list[dict[str, Any]]:
        """`trainer.callbacks` / `trainer.plugins` as a list of class_path entries."""
        value = self.trainer.get(key) or []
        value = value if isinstance(value, list) else [value]
        return [entry for entry in value if isinstance(entry, dict) and "class_path" in entry]

    def callbacks_named(self, class_name: str) -> list[dict[str, Any]]:
        """The callback entries whose class is called `class_name` (from any module)."""
        return [e for e in self.entries("callbacks") if class_of(e) == class_name]


def class_of(entry: dict[str, Any]) -> str:
    return str(entry["class_path"]).rsplit(".", 1)[-1]


def init_args(entry: dict[str, Any] | None) -> dict[str, Any]:
    return (entry or {}).get("init_args") or {}
