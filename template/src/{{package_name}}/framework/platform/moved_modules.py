# Managed by the template; local edits are merged on update.
"""Old module paths of the framework still import, as the modules that replaced them.

Class paths are written into files the framework does not own: your experiment files and
sweep specs, each run's recorded config (config.yaml) and a checkpoint's provenance. When
a release moves a module (v0.2.0 put the framework's files into rooms: `framework.health`
became `framework.callbacks.health`), a path written before must still name the same
class: `import <package>.framework.health` returns the module `framework.callbacks.health`
itself, not a second copy, so `isinstance` checks and recorded classes agree, and
`python -m <package>.framework.doctor` (an older pre-commit hook) still runs. `copier
update` rewrites the paths in your own files (the `framework-rooms` migration); this keeps
what it cannot rewrite, such as old runs, readable.

The import system has no public alias for a module name, so this is a meta path finder
(importlib's documented hook) that serves the old name from the new module.
"""

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from types import CodeType, ModuleType

# module, relative to the framework, as v0.2.0's main branch had it -> where it is now
MOVED = {
    "bad_input": "platform.bad_input",
    "checkpoint_hparams": "run.checkpoint_hparams",
    "checkpoint_io": "checkpoints.checkpoint_io",
    "compare": "tools.compare",
    "compile": "callbacks.compile",
    "consolidate": "checkpoints.consolidate",
    "determinism": "tools.determinism",
    "doctor": "tools.doctor",
    "export": "tools.export",
    "finetune": "callbacks.finetune",
    "hardware": "run.hardware",
    "health": "callbacks.health",
    "inspect_ckpt": "tools.inspect_ckpt",
    "lightning_cli": "run.lightning_cli",
    "loader_hooks": "callbacks.loader_hooks",
    "loaders": "platform.loaders",
    "log_steps": "callbacks.log_steps",
    "loggers": "run.loggers",
    "lr_scaling": "callbacks.lr_scaling",
    "monitor": "callbacks.monitor",
    "no_profiler": "callbacks.no_profiler",
    "paths": "platform.paths",
    "precision": "run.precision",
    "prediction_table": "callbacks.prediction_table",
    "predictions": "callbacks.predictions",
    "private_apis": "platform.private_apis",
    "progress": "callbacks.progress",
    "provenance": "checkpoints.provenance",
    "refusal": "platform.refusal",
    "resume": "callbacks.resume",
    "run_folders": "run.run_folders",
    "run_length": "run.run_length",
    "run_record": "run.run_record",
    "run_root": "run.run_root",
    "sharding": "callbacks.sharding",
    "signals": "platform.signals",
    "sweep": "tools.sweep",
    "throughput": "callbacks.throughput",
    "trusted_classes": "checkpoints.trusted_classes",
    "tune": "tools.tune",
    "weight_files": "checkpoints.weight_files",
    "yaml_guard": "platform.yaml_guard",
}


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds `<framework>.<old>[.sub]` as `<framework>.<new>[.sub]` (MOVED)."""

    def __init__(self, framework: str) -> None:
        self.prefix = framework + "."

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        if not fullname.startswith(self.prefix):
            return None
        head, dot, tail = fullname[len(self.prefix) :].partition(".")
        if head not in MOVED:
            return None
        new = self.prefix + MOVED[head] + dot + tail
        spec = importlib.util.find_spec(new)
        if spec is None:
            return None
        is_package = spec.submodule_search_locations is not None
        return importlib.util.spec_from_loader(fullname, _Alias(new, spec), is_package=is_package)


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module already imported (or imported now) under the new one."""

    def __init__(self, new: str, spec: importlib.machinery.ModuleSpec) -> None:
        self.new = new
        self.spec = spec

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran once, under its new name."""

    def get_code(self, fullname: str) -> CodeType | None:
        """For `python -m <old path>`: runpy runs the new module's code as `__main__`."""
        loader = self.spec.loader
        get_code = getattr(loader, "get_code", None)
        return get_code(self.new) if get_code else None


def install(framework: str) -> None:
    """Serve the framework's old module paths, once per process, before the path finders."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules(framework))
