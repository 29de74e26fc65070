"""copier-lightning-core: the run library of projects made by the copier-lightning template.

A project holds its model, data and networks, and its configs; `python -m <package>` hands
the command line to `cli.main`, and every callback, plugin and logger its configs name by
class path lives here. A project's own code imports from the library only what `__all__`
lists (`from copier_lightning_core import LoaderOptions`): these names stay stable across
releases of the same major version; every other module may be renamed or moved (the class
paths of older releases still read, platform/old_paths.py).

Names are imported on first use, so `import copier_lightning_core.tools.doctor` (a
pre-commit hook) does not pay for importing Lightning.
"""

import importlib
from typing import Any

# name -> module (relative to this package) that defines it
PUBLIC = {
    "FileSamples": ".data.files",
    "LoaderOptions": ".platform.loaders",
    "ParquetRows": ".data.parquet_rows",
    "ProjectCLI": ".run.lightning_cli",
    "Refusal": ".platform.refusal",
    "logs_this_step": ".callbacks.log_steps",
    "project_path": ".platform.paths",
}
__all__ = sorted(PUBLIC)
# The rooms, top to bottom: each imports only the rooms after it (cli.py, above them all,
# imports any). The library's tests/test_layers.py holds the code to this; the docs draw it.
ROOMS = ("tools", "run", "callbacks", "checkpoints", "data", "platform")


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name], __name__), name)
