# Managed by the template; local edits are merged on update.
"""The framework around your model and data, and the few names your code may import from it.

Your files (`model.py`, `nets.py`, `data.py`, your tests) import from the framework only
what `__all__` lists, as `from <package>.framework import LoaderOptions`. These names are
kept stable across template releases; everything else in this folder may be renamed or
moved by a `copier update`, which never touches your files. A test of the framework
(tests/framework/test_public_api.py) fails when one of your files imports anything else.
Loaders are torchdata's `StatefulDataLoader`, imported from torchdata itself: it saves its
position for a mid-epoch resume (resume.py), with the arguments `LoaderOptions` resolves.

Names are imported on first use, so `import <package>.framework.tools.doctor` (a pre-commit
hook) does not pay for importing Lightning.
"""

import importlib
from typing import Any

from .platform.moved_modules import install as install_moved_modules

# name -> module (relative to this package) that defines it
PUBLIC = {
    "LoaderOptions": ".platform.loaders",
    "ProjectCLI": ".run.lightning_cli",
    "Refusal": ".platform.refusal",
    "logs_this_step": ".callbacks.log_steps",
    "project_path": ".platform.paths",
}
__all__ = sorted(PUBLIC)
# The rooms, top to bottom: each imports only the rooms after it (cli.py, above them all,
# imports any). tests/framework/test_layers.py holds the code to this; the docs draw it.
ROOMS = ("tools", "run", "callbacks", "checkpoints", "platform")
install_moved_modules(__name__)


def __getattr__(name: str) -> Any:
    if name not in PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(PUBLIC[name], __name__), name)
