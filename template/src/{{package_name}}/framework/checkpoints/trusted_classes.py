# Managed by the template; local edits are merged on update.
"""A checkpoint names code; only trusted code is imported or built to rebuild its model.

A checkpoint trained through the CLI records its model's class (`_class_path`), the
classes of its parts (`class_path` entries: the network, the optimizer) and Lightning's
`_instantiator` in its hyperparameters. Rebuilding the model from them (`validate/test/
predict/fit --ckpt_path FILE`, `export`) hands every value to jsonargparse or Lightning,
which import whatever a value names: a `class_path`, but also a plain string where a
class, a callable or a type is expected (`net: this.Zen` imports `this`), in any key,
list or nested dict. A class name without a module (`net: Accuracy`) is looked up among
the subclasses already imported. Importing a module runs its code: a checkpoint someone
shared could name any module on the path. So before anything is imported, every value
that could name code must name

- code of this project's package (`src/<package>/`), or of torch or Lightning, where it
  is defined, not a module they import (`torch.os.system` is `os.system`),
- or be given as is by the config files or the command line of this command (`--model
  pkg.Model`, `--model.net pkg.nets.Other`), which the user has chosen to run;

and `_instantiator` must be the one LightningCLI writes. Anything else stops the command
with one paragraph naming each key and value and the fix (name the value on the command
line, or for `export` with `--trust`, if you trust the file). Strings that cannot name
code pass: no dot-separated Python names (`data/train`, `1e-3`), or, outside a `class_path`, a
first name that is no module on the path (`best.ckpt`). So do hyperparameters whose values repeat one shared
object so often (pickle's memo, like YAML's aliases) that walking them, as jsonargparse
does, would never end: more than `MAX_VALUES` values are refused.
"""

import importlib
import importlib.util
import inspect
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from jsonargparse import Namespace

from ..platform.refusal import Refusal

PROJECT_PACKAGE = __package__.split(".")[0]
LIBRARIES = ("torch", "lightning")
TRUSTED_PACKAGES = (PROJECT_PACKAGE, *LIBRARIES)
# What LightningCLI records; Lightning's load_from_checkpoint refuses any other, with a traceback.
INSTANTIATORS = ("lightning.pytorch.cli.instantiate_module",)
# What LightningModule.load_from_checkpoint builds from ("hparams", "module_arguments": the
# names of older Lightning versions, which it still reads); what a DataModule's builds from.
MODEL_SECTIONS = ("hyper_parameters", "hparams", "module_arguments")
DATA_SECTIONS = ("datamodule_hyper_parameters",)
MAX_VALUES = 100_000  # a CLI-trained checkpoint's hyperparameters hold ~100


class _TooLarge(Exception):
    """The values, counted with every repeat of a shared one, exceed MAX_VALUES."""


# One name, not a tuple in the clause: ruff writes those apart for Python 3.14 targets.
_TOO_LARGE = (_TooLarge, RecursionError)
_UNIMPORTABLE = (ImportError, ValueError)


def named_in(config: Any) -> set[str]:
    """The values a config chooses: its class paths anywhere, every string of model and data.

    A value the user wrote in a config file or typed on the command line is theirs to run.
    """
    tree = config.as_dict() if isinstance(config, Namespace) else config
    if not isinstance(tree, dict):
        return set()
    chosen = {value for where, value in _strings(tree, "") if where.endswith("class_path")}
    for section in ("model", "data"):
        chosen |= {value for _, value in _strings(tree.get(section), section)}
    return chosen


def refuse_untrusted(
    checkpoint: dict[str, Any],
    path: Path,
    named: Iterable[str],
    how_to_trust: str,
    sections: Iterable[str] = MODEL_SECTIONS,
) -> None:
    """Stop before any import when the checkpoint names code that is not trusted.

    `sections`: the checkpoint's hyperparameter dicts the command rebuilds from: the CLI
    rebuilds only the model, `export` the DataModule too (DATA_SECTIONS).
    """
    trusted = set(named)
    for key in sections:
        if not isinstance(checkpoint.get(key, {}), dict):
            raise Refusal(
                f"{path}: `{key}` is a {type(checkpoint[key]).__name__}, not the mapping "
                "of argument names to values Lightning saves, so the model cannot be rebuilt "
                "from it. Use another file, or load only its weights with `fit --init_from FILE`."
            )
    instantiators = [
        f"{key}._instantiator = {checkpoint[key]['_instantiator']}"
        for key in sections
        if checkpoint.get(key, {}).get("_instantiator", INSTANTIATORS[0]) not in INSTANTIATORS
    ]
    if instantiators:
        raise Refusal(
            f"{path} names another instantiator than LightningCLI's: "
            f"{'; '.join(instantiators)}. Lightning would build the model by calling it, and "
            f"calls only {', '.join(INSTANTIATORS)} (any other could run any code), so "
            "nothing was imported. Use another file, or load only this one's weights with "
            "`fit --init_from FILE`."
        )
    found: list[tuple[str, str]] = []
    try:
        _count({key: checkpoint[key] for key in sections if key in checkpoint}, {})
        for key in sections:
            found += _strings(checkpoint.get(key), key)
    except _TOO_LARGE:
        raise Refusal(
            f"{path} holds hyperparameters that expand to more than {MAX_VALUES:,} "
            "values (one value repeated through shared references, or nested too deep to "
            "walk): rebuilding the model from them would not end, so nothing was read from "
            "them. A checkpoint `fit` writes never holds such; use another file, or load only "
            "its weights with `fit --init_from FILE`."
        ) from None
    found = [(where, value) for where, value in found if value not in trusted]
    foreign = _foreign_class_names() if any(v.isidentifier() for _, v in found) else set()
    untrusted = [
        f"{where} = {value}" for where, value in found if not _harmless(where, value, foreign)
    ]
    if untrusted:
        raise Refusal(
            f"{path} names code that neither this project, its config and command "
            f"line, nor torch/Lightning provide: {'; '.join(dict.fromkeys(untrusted))}. "
            "Rebuilding the model would import or build it (a class path, an import path or "
            "a class name, in any value), which runs its code, so nothing was imported. If "
            f"you trust this checkpoint and that code, {how_to_trust}."
        )


def _count(tree: Any, sizes: dict[int, int]) -> int:
    """Values in `tree`, each shared one counted every time it is reached (as a walk does)."""
    if id(tree) in sizes:
        return sizes[id(tree)]
    if isinstance(tree, dict):
        children: Iterable[Any] = tree.values()
    elif isinstance(tree, list | tuple | set):
        children = tree
    else:
        return 1
    total = 1
    for child in children:
        total += _count(child, sizes)
        if total > MAX_VALUES:
            raise _TooLarge
    sizes[id(tree)] = total
    return total


def _strings(tree: Any, where: str, seen: set[int] | None = None) -> list[tuple[str, str]]:
    """(key path, value) of every string in nested dicts, lists and tuples; each shared one once."""
    seen = set() if seen is None else seen
    if isinstance(tree, str):
        return [(where, tree)]
    if id(tree) in seen:
        return []
    seen.add(id(tree))
    if isinstance(tree, Namespace):
        tree = tree.as_dict()
    items: Iterator[tuple[str, Any]]
    if isinstance(tree, dict):
        items = ((f"{where}.{key}" if where else str(key), value) for key, value in tree.items())
    elif isinstance(tree, list | tuple | set):
        items = ((f"{where}[{index}]", value) for index, value in enumerate(tree))
    else:
        return []
    return [found for key, value in items for found in _strings(value, key, seen)]


def _harmless(where: str, value: str, foreign: set[str]) -> bool:
    """Whether the string can import or build no code outside the trusted packages.

    `foreign`: the class names a bare name could resolve to outside them.
    """
    parts = value.split(".")
    if not all(part.isidentifier() for part in parts):
        return True  # not an import path, nor a class name
    if len(parts) == 1:
        return value not in foreign
    if parts[0] in TRUSTED_PACKAGES:
        return _defined_inside(parts)
    if where.rsplit(".", 1)[-1] in ("class_path", "_class_path"):
        return False  # a class is asked for: refused, here or not (else a traceback says so)
    try:
        return importlib.util.find_spec(parts[0]) is None  # a top-level name: imports nothing
    except _UNIMPORTABLE:
        return False


def _defined_inside(parts: list[str]) -> bool:
    """Whether each step of a trusted package's path is itself trusted code.

    `torch.os.system` starts in torch but is `os.system`, which torch imported; jsonargparse
    follows attributes the same way. A step that does not exist stops jsonargparse too.
    """
    node: Any = importlib.import_module(parts[0])
    for depth, part in enumerate(parts[1:], start=2):
        try:
            if hasattr(node, part):
                node = getattr(node, part)
            elif inspect.ismodule(node):
                node = importlib.import_module(".".join(parts[:depth]))  # trusted code
            else:
                return True
        except Exception:  # raised by trusted code: jsonargparse would fail there too
            return True
        if not _is_trusted_module(_home(node)):
            return False
    return True


def _home(node: Any) -> str:
    """The module that defines `node` (for an instance, its class's)."""
    if inspect.ismodule(node):
        return node.__name__
    module = getattr(node, "__module__", None)
    return module if isinstance(module, str) else type(node).__module__


def _is_trusted_module(name: str) -> bool:
    return name.split(".", 1)[0] in TRUSTED_PACKAGES


def _foreign_class_names() -> set[str]:
    """Names of imported classes that jsonargparse may build for a bare class name.

    It looks a bare name up among the imported subclasses of the class a parameter
    declares; the parameters of the project's modules declare project, torch or Lightning
    classes. So: subclasses of those, defined outside them (a library's nn.Module).
    """
    names: set[str] = set()
    for module in list(sys.modules.values()):
        module_name = getattr(module, "__name__", None)
        if not isinstance(module_name, str) or _is_trusted_module(module_name):
            continue
        for value in list(getattr(module, "__dict__", {}).values()):
            if (
                isinstance(value, type)
                and getattr(value, "__module__", None) == module_name
                and any(_is_trusted_module(str(base.__module__)) for base in value.__mro__[1:])
            ):
                names.add(value.__name__)
    return names
