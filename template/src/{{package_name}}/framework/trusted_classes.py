# Managed by the template; local edits are merged on update.
"""A checkpoint names classes; only trusted ones are imported to rebuild its model.

A checkpoint trained through the CLI records its model's class (`_class_path`) and the
classes of its parts (`class_path` entries: the network, the optimizer) in its
hyperparameters. Rebuilding the model from them (`validate/test/predict/fit --ckpt_path
FILE`, `export`) imports the modules they name, and importing a module runs its code: a
checkpoint someone shared could name any module on the path. So before anything is
imported, every class path in the checkpoint must be one of

- a class of this project's package (`src/<package>/`),
- a class the config files or the command line of this command name (`--model
  pkg.Model`, `--model.net pkg.nets.Other`), which the user has chosen to run,
- a class of torch or Lightning (their modules are imported already; an optimizer or a
  scheduler chosen on the command line at training time is one of these).

Anything else stops the command with the list of what is not trusted and the fix: name
the class on the command line (or, for `export`, with `--trust`) if you trust the file.
"""

import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

PROJECT_PACKAGE = __package__.split(".")[0]
LIBRARIES = ("torch", "lightning")


def class_paths(tree: Any) -> set[str]:
    """Every `class_path` / `_class_path` string in nested dicts, lists and Namespaces."""
    found: set[str] = set()
    if isinstance(tree, Namespace):
        tree = tree.as_dict()
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key in ("class_path", "_class_path") and isinstance(value, str):
                found.add(value)
            else:
                found |= class_paths(value)
    elif isinstance(tree, list | tuple):
        for item in tree:
            found |= class_paths(item)
    return found


def refuse_untrusted(
    checkpoint: dict,
    path: Path,
    named: Iterable[str],
    how_to_trust: str,
    sections: Iterable[str] = ("hyper_parameters",),
) -> None:
    """Stop before any import when the checkpoint names a class that is not trusted.

    `sections`: the checkpoint's hyperparameter dicts the command rebuilds from: the CLI
    rebuilds only the model (`hyper_parameters`), `export` the DataModule too.
    """
    trusted = set(named)
    recorded = set().union(*(class_paths(checkpoint.get(key) or {}) for key in sections))
    untrusted = sorted(name for name in recorded if not _trusted(name, trusted))
    if untrusted:
        sys.exit(
            f"error: {path} names classes that neither this project, its config and command "
            f"line, nor torch/Lightning provide: {', '.join(untrusted)}. Rebuilding the model "
            "would import their modules, which runs their code, so nothing was imported. If "
            f"you trust this checkpoint and those modules, {how_to_trust}."
        )


def _trusted(class_path: str, named: set[str]) -> bool:
    package = class_path.split(".", 1)[0]
    return class_path in named or package == PROJECT_PACKAGE or package in LIBRARIES
