"""A checkpoint is data: what it records is taken where a signature declares plain values.

A checkpoint trained through the CLI records its model's class (`_class_path`), the
classes of its parts (`class_path` entries: the network, the optimizer) and Lightning's
`_instantiator` in its hyperparameters. Rebuilding the model from them (`validate/test/
predict/fit --ckpt_path FILE`, `export`) hands them to jsonargparse, which imports what a
value names: a `class_path`, but also a string where a class, a callable, a type or a
nested config is declared, read as inline YAML or JSON (`"{class_path: mod.X}"`) or as
the path of a YAML file (`"evil.yaml"`). Importing a module runs its code, and a shared
checkpoint could name any module on the path. No check of what a string looks like can
tell every such string apart; the declared type can. So before jsonargparse sees anything,
each value is taken by the type the signature of the class being built declares
(`taken_hyperparameters`):

- a plain type (int, float, bool, None, str, a path, a Literal or Enum, and lists, tuples
  and dicts of those): the value is taken when it has that type (a str where a str is
  declared stays a str: jsonargparse reads it as no YAML or path);
- a class, callable, type or nested config: the value must be a mapping whose
  `class_path` is an exact dotted name of a class defined in this project's package,
  torch or Lightning (`torch.os.system` is `os.system`: refused), or a class path the
  command's config files or command line name; its `init_args` are then taken by that
  class's signature, recursively. A bare string there becomes `{class_path: ...}` under the
  same rule, so it is never read as YAML or a path. Numbers, booleans, None and tensors
  (values holding no string and no mapping) name no code and are taken anywhere;
- anything else (a string where `Any` or nothing is declared, a mapping without a trusted
  class) is refused, in one paragraph naming each key and value and how to give it on
  the command line instead, which the user has chosen to run. A key the command line sets
  is not read from the checkpoint at all.

`_instantiator` must be the one LightningCLI writes. Hyperparameters whose values repeat
one shared object so often (pickle's memo, like YAML's aliases) that walking them would
never end (more than `MAX_VALUES` values) are refused unread.
"""

import collections.abc
import dataclasses
import enum
import importlib
import inspect
import os
import pathlib
import types
import typing
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import jsonargparse
from jsonargparse import Namespace

from ..platform.old_paths import current_path
from ..platform.project import LIBRARY, project_package
from ..platform.refusal import Refusal

LIBRARIES = (LIBRARY, "torch", "lightning")


def trusted_packages() -> tuple[str, ...]:
    """The packages whose classes a checkpoint may name: the project's, this library's, torch's."""
    return (project_package(), *LIBRARIES)


# What LightningCLI records; Lightning's load_from_checkpoint refuses any other, with a traceback.
INSTANTIATORS = ("lightning.pytorch.cli.instantiate_module",)
# What LightningModule.load_from_checkpoint builds from ("hparams", "module_arguments": the
# names of older Lightning versions, which it still reads, first); what a DataModule's builds from.
MODEL_SECTIONS = ("hparams", "module_arguments", "hyper_parameters")
DATA_SECTIONS = ("datamodule_hyper_parameters",)
MAX_VALUES = 100_000  # a CLI-trained checkpoint's hyperparameters hold ~100
# The keys of a class's config in jsonargparse's form.
CLASS_KEYS = ("class_path", "init_args", "dict_kwargs")


# jsonargparse's path types (Path_fr, Path_dw, ...): they check a path and read nothing.
_ARGPARSE_PATH: type = getattr(jsonargparse, "Path", pathlib.PurePath)


class _TooLarge(Exception):
    """The values, counted with every repeat of a shared one, exceed MAX_VALUES."""


# One name per tuple, not a tuple in the clause: ruff writes those apart for Python 3.14 targets.
_TOO_LARGE = (_TooLarge, RecursionError)
_NOT_IMPORTABLE = (ImportError, AttributeError, ValueError)
_NO_SIGNATURE = (TypeError, ValueError)


class _Unknown:
    """An annotation that could not be resolved: taken as a class position (the strictest)."""


@dataclasses.dataclass(frozen=True)
class Trust:
    """What a checkpoint's values are checked against, for one command.

    `named`: class paths the command's config files and command line name (or `--trust`
    gives), which the user has chosen to run. `explicit`: keys the command line sets
    (`model.optimizer.lr`); `mappings`: those of them given a whole mapping, which sets
    every key below too. `how`: the fix a refusal names.
    """

    named: frozenset[str]
    explicit: frozenset[str] = frozenset()
    mappings: frozenset[str] = frozenset()
    how: str = (
        "give each of those values on the command line yourself (`--{section}.<key> VALUE`, "
        "a class as `--model.net pkg.nets.Net`), or type the argument in its class's "
        "signature (`dict[str, str]`, not `Any` or no type)"
    )


def named_in(config: Any) -> set[str]:
    """The class paths a config names, anywhere: the classes its user has chosen to run."""
    tree = config.as_dict() if isinstance(config, Namespace) else config
    return {value for where, value in _strings(tree, "") if where.endswith("class_path")}


def check_sections(checkpoint: dict[str, Any], path: Path, sections: Iterable[str]) -> None:
    """Stop before anything is read from hyperparameters that are not Lightning's mapping,
    name another instantiator than LightningCLI's, or expand past MAX_VALUES."""
    sections = [key for key in sections if key in checkpoint]
    for key in sections:
        if not isinstance(checkpoint[key], Mapping):
            raise Refusal(
                f"{path}: `{key}` is a {type(checkpoint[key]).__name__}, not the mapping "
                "of argument names to values Lightning saves, so the model cannot be rebuilt "
                "from it. Use another file, or load only its weights with `fit --init_from FILE`."
            )
    instantiators = [
        f"{key}._instantiator = {checkpoint[key]['_instantiator']!r}"
        for key in sections
        if checkpoint[key].get("_instantiator", INSTANTIATORS[0]) not in INSTANTIATORS
    ]
    if instantiators:
        raise Refusal(
            f"{path} names another instantiator than LightningCLI's: "
            f"{'; '.join(instantiators)}. Lightning would build the model by calling it, and "
            f"calls only {', '.join(INSTANTIATORS)} (any other could run any code), so "
            "nothing was imported. Use another file, or load only this one's weights with "
            "`fit --init_from FILE`."
        )
    try:
        _count({key: checkpoint[key] for key in sections}, {})
    except _TOO_LARGE:
        raise Refusal(
            f"{path} holds hyperparameters that expand to more than {MAX_VALUES:,} "
            "values (one value repeated through shared references, or nested too deep to "
            "walk): rebuilding the model from them would not end, so nothing was read from "
            "them. A checkpoint `fit` writes never holds such; use another file, or load only "
            "its weights with `fit --init_from FILE`."
        ) from None


def taken_hyperparameters(
    hparams: Mapping[str, Any], section: str, path: Path, trust: Trust, default_class: Any = None
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The hyperparameters as they may reach jsonargparse, and the keys left out because
    the command line sets them and the checkpoint's values would be refused (key -> the
    checkpoint's value); a Refusal for any other value that cannot be taken.

    `section`: the config section they rebuild (`model`, `data`), for the keys named.
    `default_class`: the class path they apply to when they record none (`_class_path`):
    the config's class, as LightningCLI applies them.
    """
    taker = _Taker(trust)
    taken = taker.section(hparams, section, default_class)
    if taker.refused:
        raise Refusal(
            f"{path} holds values this command does not take from a checkpoint: "
            f"{'; '.join(dict.fromkeys(taker.refused))}. A checkpoint is data: a value is "
            "taken only where the class being built declares a plain type (a number, a "
            "string, a path, a choice), and a class only as a class path of this project, "
            "torch or Lightning, or one the config or command line names; anything else "
            "could make the command import code, so nothing was imported. If you trust this "
            f"file, {trust.how.format(section=section)}, or use another file."
        )
    return taken, taker.replaced


class _Taker:
    """Walks hyperparameters by the types their classes declare, collecting refusals."""

    def __init__(self, trust: Trust) -> None:
        self.trust = trust
        self.refused: list[str] = []
        self.replaced: dict[str, Any] = {}

    def section(self, hparams: Mapping[str, Any], where: str, default_class: Any) -> dict[str, Any]:
        """A LightningModule's or DataModule's hyperparameters, `_class_path` and all."""
        taken: dict[str, Any] = {}
        class_path = hparams.get("_class_path", default_class)
        cls = self._class(class_path, f"{where}._class_path" if "_class_path" in hparams else where)
        if "_class_path" in hparams and cls is not None:
            taken["_class_path"] = self._handed(class_path)
        if "_instantiator" in hparams:
            taken["_instantiator"] = hparams["_instantiator"]  # check_sections checked it
        arguments = {key: value for key, value in hparams.items() if not key.startswith("_")}
        if cls is not None:
            taken.update(self.arguments(cls, arguments, where))
        return taken

    def arguments(self, cls: type, arguments: Mapping[str, Any], where: str) -> dict[str, Any]:
        """`arguments` for `cls(**arguments)`, each taken by its declared type.

        A key the command line sets whose checkpoint value would be refused is left out
        (the command line's value applies) and kept in `replaced`, with that value.
        """
        declared = _declared(cls)
        taken: dict[str, Any] = {}
        for key, value in arguments.items():
            name = f"{where}.{key}"
            annotation = declared.get(key, declared.get("**", _NOT_DECLARED))
            if annotation is _NOT_DECLARED:
                continue  # no such argument: Lightning and jsonargparse pass it to nothing
            refused_before = len(self.refused)
            kept = self.value(value, annotation, name)
            if len(self.refused) > refused_before and self._explicit(name):
                del self.refused[refused_before:]
                self.replaced[name] = value
            elif kept is not _REFUSED:
                taken[key] = kept
        return taken

    def value(self, value: Any, annotation: Any, where: str) -> Any:
        """`value` as it may be handed over for `annotation`, or _REFUSED (and why, recorded)."""
        if _names_no_code(value):
            return value  # numbers, booleans, None, tensors: nothing to import
        annotation = _without_none(annotation)  # a value that is not None is of the other arm
        if _is_plain(annotation):
            if _fits(value, annotation):
                return value
            return self._refuse(where, value, "not of its declared type")
        if _is_nested_config(annotation) and isinstance(value, Mapping):
            return self.arguments(_origin_class(annotation), value, where)
        if isinstance(value, str) and self._can_build(annotation):
            # As a class config: jsonargparse would read a bare string as YAML or a path.
            if self._class(value, where) is None:
                return _REFUSED
            return {"class_path": self._handed(value)}
        if isinstance(value, Mapping) and "class_path" in value and self._can_build(annotation):
            return self.instance(value, where)
        if isinstance(value, list | tuple) and _items_of(annotation) is not None:
            items = [self.value(item, _items_of(annotation), f"{where}[{index}]")
                     for index, item in enumerate(value)]  # fmt: skip
            return _REFUSED if _REFUSED in items else type(value)(items)
        return self._refuse(where, value, "no plain type is declared for it")

    def instance(self, config: Mapping[str, Any], where: str) -> Any:
        """A `{class_path, init_args, dict_kwargs}` config: a trusted class, its arguments."""
        unknown = sorted(set(config) - set(CLASS_KEYS))
        if unknown:
            return self._refuse(where, dict(config), f"keys {unknown} are no class config's")
        cls = self._class(config["class_path"], f"{where}.class_path")
        if cls is None:
            return _REFUSED
        taken: dict[str, Any] = {"class_path": self._handed(config["class_path"])}
        for key in ("init_args", "dict_kwargs"):
            arguments = config.get(key)
            if arguments is None:
                continue
            if not isinstance(arguments, Mapping):
                return self._refuse(f"{where}.{key}", arguments, "not a mapping")
            taken[key] = self.arguments(cls, arguments, where)
        return taken

    def _class(self, class_path: Any, where: str) -> Any:
        """The class `class_path` names, when it may be built; else None (refused)."""
        if not isinstance(class_path, str):
            self._refuse(where, class_path, "not a class path")
            return None
        if class_path in self.trust.named:
            found = _import_named(class_path)
        else:
            found = trusted_object(class_path)
        if not inspect.isclass(found):
            reason = "not a class defined in this project, torch or Lightning"
            self._refuse(where, class_path, reason)
            return None
        return found

    def _handed(self, class_path: str) -> str:
        """The path jsonargparse imports for a class `_class` took: a named one as named, a
        trusted one by the path that names it today (a path an older release wrote is read
        as the one that replaced it)."""
        if class_path in self.trust.named:
            return class_path
        return trusted_path(class_path) or class_path

    def _can_build(self, annotation: Any) -> bool:
        """Whether jsonargparse would build a class for `annotation` from a class config."""
        return not _is_plain(annotation) and annotation is not Any

    def _explicit(self, where: str) -> bool:
        """Set on the command line: the key, or a key above it given a whole mapping."""
        parts = where.split(".")
        above = (".".join(parts[:count]) for count in range(1, len(parts)))
        return where in self.trust.explicit or any(key in self.trust.mappings for key in above)

    def _refuse(self, where: str, value: Any, why: str) -> Any:
        self.refused.append(f"{where} = {_shown(value)} ({why})")
        return _REFUSED


_REFUSED: Any = object()
_NOT_DECLARED: Any = object()


def trusted_object(class_path: str) -> Any:
    """What an exact dotted name of this project's package, torch or Lightning names; None
    for any other name, or one that reaches outside them (`torch.os.system` is `os.system`,
    which torch imported; jsonargparse follows attributes the same way).

    Only modules of the trusted packages are imported. No part may be a dunder
    (`pkg.__main__`, `torch.nn.Module.__init__.__globals__`). A path an older release wrote
    that names nothing today names what replaced it (trusted_path).
    """
    return _resolved(class_path)[1]


def trusted_path(class_path: str) -> str | None:
    """`class_path` when it names a trusted object, else its path of today when that one
    does (`<package>.framework.health.X`, written until v0.2.0: platform/old_paths.py);
    None when neither does. Tried as written first: a project's own `<package>.framework`
    module is the project's."""
    return _resolved(class_path)[0]


def _resolved(class_path: str) -> tuple[str | None, Any]:
    """(the path that names a trusted object, that object) as trusted_path says; (None, None)."""
    for path in dict.fromkeys((class_path, current_path(class_path))):
        found = _trusted_object(path)
        if found is not None:
            return path, found
    return None, None


def _trusted_object(class_path: str) -> Any:
    parts = class_path.split(".")
    if (
        len(parts) < 2
        or parts[0] not in trusted_packages()
        or not all(part.isidentifier() for part in parts)
        or any(part.startswith("__") for part in parts)
    ):
        return None
    try:
        node: Any = importlib.import_module(parts[0])
        for depth, part in enumerate(parts[1:], start=2):
            if hasattr(node, part):
                node = getattr(node, part)
            elif inspect.ismodule(node):
                node = importlib.import_module(".".join(parts[:depth]))  # trusted code
            else:
                return None
            if not _is_trusted_module(_home(node)):
                return None
    except Refusal:  # trusted code refusing on import: its paragraph is the answer
        raise
    except Exception:  # raised by trusted code: the name names nothing to build
        return None
    return node


def _import_named(class_path: str) -> Any:
    """A class path the config or command line names: imported as jsonargparse would."""
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name) if module else None
    except _NOT_IMPORTABLE:
        return None


def _declared(cls: type) -> dict[str, Any]:
    """Parameter name -> declared type of `cls(...)`; `**` present when it takes **kwargs.

    An argument without an annotation is declared by its default's type when that is plain,
    else as Any. An annotation that cannot be resolved is `_Unknown` (a class position).
    """
    try:
        signature = inspect.signature(cls)
    except _NO_SIGNATURE:
        return {}
    init = getattr(cls, "__init__", None)
    try:
        hints = typing.get_type_hints(init) if init is not None else {}
    except Exception:  # a forward reference its module cannot resolve
        hints = {}
    declared: dict[str, Any] = {}
    for name, parameter in signature.parameters.items():
        if parameter.kind is parameter.VAR_KEYWORD:
            declared["**"] = Any
            continue
        if parameter.kind is parameter.VAR_POSITIONAL:
            continue
        annotation = hints.get(name, parameter.annotation)
        if annotation is inspect.Parameter.empty:
            default = parameter.default
            plain = default is not inspect.Parameter.empty and _is_plain(type(default))
            annotation = type(default) if plain and default is not None else Any
        elif isinstance(annotation, str):
            annotation = _Unknown
        declared[name] = annotation
    return declared


def _is_plain(annotation: Any) -> bool:
    """Whether `annotation` declares only plain values, for which jsonargparse builds no
    class and reads no YAML or file (int, str, a path, a Literal, lists/dicts of those)."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if annotation is None or annotation is type(None):
        return True
    if origin is typing.Literal:
        return all(_names_no_code(choice) or isinstance(choice, str) for choice in arguments)
    if origin in (typing.Union, types.UnionType):
        return all(_is_plain(arm) for arm in arguments)
    if _is_bare_container(annotation):
        return True
    if origin in (list, tuple, set, frozenset, dict) or _is_abc_container(origin):
        items = [arm for arm in arguments if arm is not Ellipsis]
        return bool(items) and all(_is_plain(arm) for arm in items)
    if _is_path(annotation):
        return True
    if inspect.isclass(annotation):
        # A subclass of a plain type is plain too: jsonargparse's restricted numbers and
        # strings (PositiveInt, NonNegativeFloat, NotEmptyStr) check a value, build nothing.
        return issubclass(annotation, enum.Enum | bool | int | float | str | type(None))
    return False


def _is_path(annotation: Any) -> bool:
    """A path type: pathlib's, `os.PathLike`, or jsonargparse's (`Path_fr`), which checks a
    path and reads nothing from it."""
    annotation = typing.get_origin(annotation) or annotation
    return inspect.isclass(annotation) and issubclass(
        annotation, (pathlib.PurePath, os.PathLike, _ARGPARSE_PATH)
    )


def _is_bare_container(annotation: Any) -> bool:
    """`dict`, `list`, `tuple`, `set` without item types (or `typing.Dict` and the like).

    jsonargparse keeps what such a container holds as it is: a string inside one is never
    read as YAML, JSON or a path, a mapping inside one never built (the tests hold it to
    that: a bare `dict` argument of the typed toy is attacked like every other).
    """
    origin = typing.get_origin(annotation) or annotation
    bare = annotation in (dict, list, tuple, set, frozenset) or not typing.get_args(annotation)
    return origin in (dict, list, tuple, set, frozenset) and bare


def _fits_bare(value: Any, container: Any) -> bool:
    """A bare container's value: that container, holding strings, numbers, booleans, None
    and containers of them; no mapping shaped as a class config (`class_path`)."""
    if container is dict:
        return isinstance(value, Mapping) and _plain_leaves(value)
    return isinstance(value, list | tuple | set | frozenset) and _plain_leaves(value)


def _plain_leaves(value: Any) -> bool:
    if isinstance(value, Mapping):
        return not set(value) & set(CLASS_KEYS) and all(
            isinstance(key, str | int) and _plain_leaves(item) for key, item in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return all(_plain_leaves(item) for item in value)
    return value is None or isinstance(value, str | int | float | bool)


def _fits(value: Any, annotation: Any) -> bool:
    """Whether `value` has the plain type `annotation` declares."""
    origin = typing.get_origin(annotation)
    arguments = typing.get_args(annotation)
    if annotation is None or annotation is type(None):
        return value is None
    if _is_bare_container(annotation):
        return _fits_bare(value, origin or annotation)
    if origin is typing.Literal:
        return any(value == choice and type(value) is type(choice) for choice in arguments)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in arguments)
    if origin is dict or (origin is not None and _is_mapping(origin)):
        keys, values = (*arguments, Any, Any)[:2]
        return isinstance(value, Mapping) and all(
            _fits(key, keys) and _fits(item, values) for key, item in value.items()
        )
    if origin is tuple and arguments and arguments[-1] is not Ellipsis:
        return (
            isinstance(value, list | tuple)
            and len(value) == len(arguments)
            and all(_fits(item, arm) for item, arm in zip(value, arguments, strict=True))
        )
    if origin is not None:  # list, set, Sequence, tuple[X, ...]
        return isinstance(value, list | tuple | set | frozenset) and all(
            _fits(item, arguments[0]) for item in value
        )
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return isinstance(value, annotation) or (
            isinstance(value, str) and value in annotation.__members__
        )
    if _is_path(annotation):
        return isinstance(value, str | pathlib.PurePath)
    if not inspect.isclass(annotation):
        return False
    if issubclass(annotation, bool):
        return isinstance(value, bool)
    if issubclass(annotation, int):
        return isinstance(value, int) and not isinstance(value, bool)
    if issubclass(annotation, float):
        return isinstance(value, int | float) and not isinstance(value, bool)
    return issubclass(annotation, str) and isinstance(value, str)


def _names_no_code(value: Any) -> bool:
    """A value holding no string (numbers, booleans, None, tensors, and lists and mappings
    of them, not shaped as a class config): jsonargparse reads no class, YAML or path from
    it, whatever the declared type."""
    if isinstance(value, str | bytes | Namespace):
        return False
    if isinstance(value, Mapping):
        return not set(value) & set(CLASS_KEYS) and all(
            isinstance(key, str | int) and _names_no_code(item) for key, item in value.items()
        )
    if isinstance(value, list | tuple | set | frozenset):
        return all(_names_no_code(item) for item in value)
    return True


def _is_nested_config(annotation: Any) -> bool:
    """A dataclass: jsonargparse parses it as a group of its fields, not a class_path."""
    return dataclasses.is_dataclass(_origin_class(annotation))


def _without_none(annotation: Any) -> Any:
    """`X` for `X | None` (`Optional[X]`); any other annotation as it is."""
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType):
        return annotation
    arms = [arm for arm in typing.get_args(annotation) if arm is not type(None)]
    return arms[0] if len(arms) == 1 else annotation


def _origin_class(annotation: Any) -> Any:
    return typing.get_origin(annotation) or annotation


def _items_of(annotation: Any) -> Any:
    """The item type of a list/tuple/Sequence annotation (`list[nn.Module]`); else None."""
    origin, arguments = typing.get_origin(annotation), typing.get_args(annotation)
    container = origin in (list, tuple, set) or _is_abc_container(origin)
    return arguments[0] if container and not _is_mapping(origin) and arguments else None


def _is_abc_container(origin: Any) -> bool:
    return (
        inspect.isclass(origin)
        and issubclass(origin, collections.abc.Iterable)
        and not issubclass(origin, str)
    )


def _is_mapping(origin: Any) -> bool:
    return inspect.isclass(origin) and issubclass(origin, Mapping)


def _home(node: Any) -> str:
    """The module that defines `node` (for an instance, its class's)."""
    if inspect.ismodule(node):
        return node.__name__
    module = getattr(node, "__module__", None)
    return module if isinstance(module, str) else type(node).__module__


def _is_trusted_module(name: str) -> bool:
    return name.split(".", 1)[0] in trusted_packages()


def _shown(value: Any) -> str:
    """A value as a refusal names it: repr, control characters escaped, at most 120 characters."""
    text = repr(value)
    return text if len(text) <= 120 else f"{text[:117]}..."


def _count(tree: Any, sizes: dict[int, int]) -> int:
    """Values in `tree`, each shared one counted every time it is reached (as a walk does)."""
    if id(tree) in sizes:
        return sizes[id(tree)]
    if isinstance(tree, Mapping):
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
    if isinstance(tree, Mapping):
        items = ((f"{where}.{key}" if where else str(key), value) for key, value in tree.items())
    elif isinstance(tree, list | tuple | set):
        items = ((f"{where}[{index}]", value) for index, value in enumerate(tree))
    else:
        return []
    return [found for key, value in items for found in _strings(value, key, seen)]
