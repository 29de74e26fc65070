"""YAML the commands read, bounded: config files, sweep specs, a checkpoint's recorded config.

A YAML alias (`*name`) repeats an anchored node without copying it, so a few lines can
stand for a billion values ("billion laughs": each level's list repeats the level below
nine times). PyYAML keeps each repeat as a shared reference, but jsonargparse, json.dumps
and every walk over the result expand them: the command prints a parser error (or
nothing) and then runs until it is killed or out of memory. So a document is composed
first, into nodes whose aliases are references (memory bounded by the text), and refused
when its aliases stand for more than `MAX_ALIAS_VALUES` nodes beyond those written.

Every YAML text jsonargparse loads (the `--config` files, configs/default.yaml, a YAML
value on the command line) goes through `guard_jsonargparse_yaml`; `--config` files are
checked before parsing too (`checked_config_words`), so the refusal names the file.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import get_loader, set_loader
from lightning.pytorch.utilities import rank_zero_info

from .refusal import Refusal

MAX_ALIAS_VALUES = 100_000  # nodes aliases may add; the shipped configs' aliases add none
CONFIG_FLAGS = ("--config", "-c")


class UnsafeYaml(ValueError):
    """A YAML text that expands past the bound, or nests too deep to read."""


# libyaml's parser where PyYAML was built with it (~10 times faster than the pure-Python one).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def check_yaml(text: str, where: str) -> None:
    """Raise UnsafeYaml naming `where` when the aliases of `text` expand it past the bound.

    Invalid YAML passes: the loader that follows reports it, with its line.
    """
    try:
        for document in yaml.compose_all(text, Loader=_SAFE_LOADER):
            if document is not None:
                _check_document(document, where)
    except RecursionError:
        raise UnsafeYaml(f"{where} nests lists or mappings too deep to read; flatten it") from None
    except yaml.YAMLError:
        return


def load_yaml(text: str, where: str) -> Any:
    """`yaml.safe_load(text)`, its one document checked by `check_yaml`'s rule before the
    values are built: composed once, by libyaml where there is one (a `compare` of
    thousands of runs reads as many recorded configs)."""
    loader = _SAFE_LOADER(text)
    try:
        document = loader.get_single_node()
        if document is None:
            return None
        _check_document(document, where, text)
        return loader.construct_document(document)
    except RecursionError:
        raise UnsafeYaml(f"{where} nests lists or mappings too deep to read; flatten it") from None
    finally:
        loader.dispose()


def _check_document(document: yaml.Node, where: str, text: str = "*") -> None:
    """UnsafeYaml when the document's aliases expand past the bound. Without a `*` in the
    text there is no alias (every one starts with it), and the walk is skipped."""
    if "*" in text and _added_by_aliases(document) > MAX_ALIAS_VALUES:
        raise UnsafeYaml(
            f"{where} has YAML aliases (`*name`) that repeat anchored values into more "
            f"than {MAX_ALIAS_VALUES:,} values (nested repeats multiply, as in a "
            '"billion laughs" file); reading it would not end, so it was not read. '
            "Write the values out, or repeat an anchor only a few times"
        )


def _added_by_aliases(root: yaml.Node) -> int:
    """Nodes the document stands for, every alias expanded, minus the nodes written."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        if id(node) not in sizes:
            if isinstance(node, yaml.MappingNode):
                children = [child for pair in node.value for child in pair]
            elif isinstance(node, yaml.SequenceNode):
                children = node.value
            else:
                children = []
            sizes[id(node)] = 1 + sum(size(child) for child in children)
        return sizes[id(node)]

    total = size(root)
    return total - len(sizes)


def checked_config_words(words: Sequence[str]) -> list[str]:
    """The command line with each `--config FILE` checked before jsonargparse reads it.

    An empty file (nothing, or only comments) is taken as no overrides and left out:
    jsonargparse would stop with "Unexpected config: " and nothing after it, and a file
    that says nothing has nothing to change. A file whose aliases expand past the bound,
    or that is not UTF-8 text (jsonargparse reads config files as UTF-8 and would stop
    with a traceback), stops the command with one paragraph naming it. Other values (a
    YAML string, a file that does not exist) are left to jsonargparse.
    """
    kept: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        flag, equals, value = word.partition("=")
        if flag in CONFIG_FLAGS and not equals and index + 1 < len(words):
            value, taken = words[index + 1], 2
        elif flag in CONFIG_FLAGS and equals:
            taken = 1
        else:
            kept.append(word)
            index += 1
            continue
        if not _is_empty_config(Path(value)):
            kept += words[index : index + taken]
        index += taken
    return kept


def _is_empty_config(path: Path) -> bool:
    """Whether `path` is a YAML file that holds nothing; stops on one that expands too far
    or is not UTF-8."""
    try:
        text = path.read_text(encoding="utf-8") if path.is_file() else None
    except UnicodeDecodeError as error:
        raise Refusal(_not_utf8(path, error)) from None
    except OSError:
        return False  # jsonargparse reports what it cannot read
    if text is None:
        return False
    try:
        empty = load_yaml(text, f"--config {path}") is None
    except UnsafeYaml as error:
        raise Refusal(f"{error}.") from None
    except yaml.YAMLError:
        return False
    if empty:
        rank_zero_info(f"--config {path} is empty (or only comments): no overrides from it.")
    return empty


def _not_utf8(path: Path, error: UnicodeDecodeError) -> str:
    """Where the first byte that is not UTF-8 is (line, value), and how to convert the file."""
    line = error.object[: error.start].count(b"\n") + 1
    return (
        f"the config file {path} is not UTF-8 text: byte 0x{error.object[error.start]:02x} "
        f"on line {line} is not valid UTF-8 ({error.reason}); config files are read as "
        "UTF-8. Save it as UTF-8 in your editor, or convert it, e.g. from Latin-1: "
        f"`iconv -f latin1 -t utf-8 {path.name} > {path.stem}.utf8{path.suffix}`."
    )


def guard_jsonargparse_yaml() -> None:
    """Check every YAML text jsonargparse loads from here on (idempotent)."""
    loader = get_loader("yaml")
    if getattr(loader, "_guarded", False):
        return

    def guarded(text: str) -> Any:
        if isinstance(text, str):
            try:
                check_yaml(text, "a YAML value given to the command (a config file or an option)")
            except UnsafeYaml as error:
                raise Refusal(f"{error}.") from None
        return loader(text)

    guarded._guarded = True  # type: ignore[attr-defined]
    set_loader("yaml", guarded, (yaml.YAMLError,))
