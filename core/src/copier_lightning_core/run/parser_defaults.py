"""A parser that computes its defaults once per parse, where jsonargparse computes them often.

In one parse of a command, jsonargparse asks the command's parser for its defaults twice:
when it parses the command's words, and again when it merges the command's section
(`handle_subcommands`). Those defaults are configs/default.yaml, read and parsed with every
class path in it adapted (a fifth of a parse). The class parsers jsonargparse builds for
the class paths are asked for theirs up to 45 times in one parse. jsonargparse has no
setting to keep them, so this parser does, for the length of one `parse_args` or
`parse_object` call: nothing changes a parser's defaults during a parse (`add_argument` and
`set_defaults` do, before it), and each caller gets a copy of its own, as a fresh
computation gives. A parse of `fit` with the example's config: 0.23 s before, 0.17 s with
it; a `fit` of the library's tabular toy, 0.37 s before, 0.33 s (medians of 5 and 9, one
process). `fit --help` and `--print_config` print the same.

The first of the two asks runs in jsonargparse's lenient mode, the second in its strict one;
kept from the first, a bad value in configs/default.yaml is refused by the parse's
validation instead, in the same words (test_cli.py:
`test_a_bad_value_in_the_default_config_is_refused_naming_the_option`).
"""

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from jsonargparse import Namespace
from lightning.pytorch.cli import LightningArgumentParser

# The defaults computed in the parse under way, by parser and `skip_validation`; None outside one.
_COMPUTED: ContextVar[dict[tuple[Any, bool], Namespace] | None] = ContextVar(
    "_COMPUTED", default=None
)


@contextmanager
def _one_parse() -> Iterator[None]:
    """The defaults computed from here to the end of the parse are kept (a parse inside it,
    such as the command's own words, keeps them in the same place)."""
    if _COMPUTED.get() is not None:
        yield
        return
    parse = _COMPUTED.set({})
    try:
        yield
    finally:
        _COMPUTED.reset(parse)


class DefaultsOncePerParse(LightningArgumentParser):
    """LightningCLI's parser, whose defaults are computed once in each parse (see above)."""

    def parse_args(self, *args: Any, **kwargs: Any) -> Namespace:  # type: ignore[override]
        with _one_parse():
            parsed: Namespace = super().parse_args(*args, **kwargs)
        return parsed

    def parse_object(self, *args: Any, **kwargs: Any) -> Namespace:
        with _one_parse():
            parsed: Namespace = super().parse_object(*args, **kwargs)
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
