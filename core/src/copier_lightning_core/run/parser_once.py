"""A parser that does once what jsonargparse does several times for one command.

Defaults. In one parse of a command, jsonargparse asks the command's parser for its
defaults twice: when it parses the command's words, and again when it merges the command's
section (`handle_subcommands`). Those defaults are configs/default.yaml, read and parsed
with every class path in it adapted (a fifth of a parse). The class parsers jsonargparse
builds for the class paths are asked for theirs up to 45 times in one parse. jsonargparse
has no setting to keep them, so this parser does, for the length of one `parse_args` or
`parse_object` call: nothing changes a parser's defaults during a parse (`add_argument` and
`set_defaults` do, before it), and each caller gets a copy of its own, as a fresh
computation gives. A parse of `fit` with the example's config: 0.23 s before, 0.17 s with
it. The first of the two asks runs in jsonargparse's lenient mode, the second in its strict
one; kept from the first, a bad value in configs/default.yaml is refused by the parse's
validation instead, in the same words (test_cli.py:
`test_a_bad_value_in_the_default_config_is_refused_naming_the_option`).

Validation. A parse validates the config it returns. Each command then dumps its config
twice (LightningCLI's `_dump_config`, for the hyperparameters the module records, and
SaveConfigCallback's `config.yaml`), and jsonargparse validates it again at each dump,
every class in it through its own parser: 0.07 s a dump of the example's `fit` config with
validation, 0.02 s without. This parser keeps a copy of the last config it validated (the
result of a top-level parse, or one given to `keep_validated`) and dumps a config equal to
it without validating it again; a config that differs from it in anything is validated at
its dump, as before. What the run plan fills in after the parse (folders as strings, a
logger's version: `filling_in`) keeps a validated config validated; what a checkpoint's
hyperparameters change is validated once, before the run folder is claimed
(`validated_once`, around the claim, which also tells the command's own parser, writing
`config.yaml` from the command's section, that the section was validated with the whole). A one-epoch fit
of the library's tabular toy, in a running process: 0.34 s before, 0.28 s with it; resumed
from its checkpoint, 0.49 s and 0.41 s (medians of 3 pairs; test_cli.py:
`test_a_command_validates_its_config_once_and_not_again_at_each_dump`).
"""

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import jsonargparse
from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

# Whether this jsonargparse names dump's `skip_none` `skip_unset` (from 4.49); read from the
# version's leading numbers, so that a pre-release (`4.50.0rc1`) reads as its release.
_SKIP_UNSET = tuple(map(int, re.findall(r"\d+", jsonargparse.__version__)[:2])) >= (4, 49)

# The defaults computed in the parse under way, by parser and `skip_validation`; None outside one.
_COMPUTED: ContextVar[dict[tuple[Any, bool], Namespace] | None] = ContextVar(
    "_COMPUTED", default=None
)


@contextmanager
def _one_parse() -> Iterator[bool]:
    """The defaults computed from here to the end of the parse are kept (a parse inside it,
    such as the command's own words, keeps them in the same place). Yields whether this is
    the top-level parse, not one jsonargparse makes inside another."""
    if _COMPUTED.get() is not None:
        yield False
        return
    parse = _COMPUTED.set({})
    try:
        yield True
    finally:
        _COMPUTED.reset(parse)


class ParsesOnce(LightningArgumentParser):
    """LightningCLI's parser, computing its defaults once a parse and validating a config
    once (see above)."""

    # A copy of the last config this parser validated; None before one.
    _validated: Namespace | None = None

    def parse_args(self, *args: Any, **kwargs: Any) -> Namespace:  # type: ignore[override]
        return self._parse_once(super().parse_args, *args, **kwargs)

    def parse_object(self, *args: Any, **kwargs: Any) -> Namespace:
        return self._parse_once(super().parse_object, *args, **kwargs)

    def _parse_once(self, parse: Callable[..., Namespace], *args: Any, **kwargs: Any) -> Namespace:
        """`parse(*args, **kwargs)` with the defaults kept for its length; a top-level parse
        keeps a copy of the config it validated."""
        with _one_parse() as top_level:
            parsed = parse(*args, **kwargs)
        if top_level and not kwargs:  # none of jsonargparse's `_skip_validation` and kin
            self._validated = parsed.clone()
        return parsed

    def get_defaults(self, skip_validation: bool = False, **kwargs: Any) -> Namespace:
        computed = _COMPUTED.get()
        if computed is None or kwargs:
            defaults: Namespace = super().get_defaults(skip_validation, **kwargs)
            return defaults
        key = (self, skip_validation)
        if key not in computed:
            computed[key] = super().get_defaults(skip_validation)
        return computed[key].clone()

    def keep_validated(self, config: Namespace) -> None:
        """Validate `config` (unless it is the one last validated) and keep a copy: its
        dumps, while it stays equal to it, are not validated again."""
        if not self._is_validated(config):
            self.validate(config.clone(with_meta=False))
            self._validated = config.clone()

    def dump(self, namespace: Namespace, *args: Any, **kwargs: Any) -> str:
        dumped: str = super().dump(namespace, *args, **self._dump_options(namespace, kwargs))
        return dumped

    def save(self, namespace: Namespace, *args: Any, **kwargs: Any) -> None:
        super().save(namespace, *args, **self._dump_options(namespace, kwargs))

    def _dump_options(self, namespace: Namespace, kwargs: dict[str, Any]) -> dict[str, Any]:
        """`kwargs`, without validation for the config last validated (unless asked).

        jsonargparse 4.49 renamed `skip_none` to `skip_unset` and warns of the old name at
        its caller, which Lightning's CLI passes: through this method, the warning would
        name this module instead of Lightning's, whose deprecations the projects' pytest
        settings leave out by module. The new name is passed where it exists."""
        if "skip_none" in kwargs and _SKIP_UNSET:
            kwargs = {**kwargs, "skip_unset": kwargs["skip_none"]}
            del kwargs["skip_none"]
        if self._is_validated(namespace):
            kwargs = {"skip_validation": True, **kwargs}
        return kwargs

    def _is_validated(self, config: Namespace) -> bool:
        return self._validated is not None and config == self._validated


@contextmanager
def filling_in(parser: LightningArgumentParser, config: Namespace) -> Iterator[None]:
    """The run plan fills in `config` here (its folders and files, as strings where the
    config takes a path; a continued logger's version): a config `parser` validated stays
    validated. Any other parser is left alone."""
    if not (isinstance(parser, ParsesOnce) and parser._is_validated(config)):
        yield
        return
    yield
    parser._validated = config.clone()


@contextmanager
def validated_once(
    parser: LightningArgumentParser, command_parser: LightningArgumentParser, config: Namespace
) -> Iterator[None]:
    """Validate the whole `config` of a command with `parser` before the body (unless it is
    unchanged since validated), which then fills it in as in `filling_in` (the claimed run
    folder, when the planned one was taken); after it, `parser` keeps the config as filled
    in, and `command_parser` (which writes `config.yaml` from the command's section) its
    section: the whole config's validation checks each value of the section with that
    parser's own actions."""
    if not (isinstance(parser, ParsesOnce) and isinstance(command_parser, ParsesOnce)):
        yield
        return
    parser.keep_validated(config)
    yield
    parser._validated = config.clone()
    command_parser._validated = config[config.subcommand].clone()
