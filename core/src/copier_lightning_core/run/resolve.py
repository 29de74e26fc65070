"""The config a `fit` would run with, parsed and nothing else: what `doctor` checks and
what a sweep checks its spec against, before anything is built, seeded or claimed.

Parsing alone never claims a run folder: the run plan decides the folder as the CLI
parses and claims it only when a command runs (RunPlan.claim, run_plan.py), so resolving
a config is safe to repeat.
"""

from __future__ import annotations  # LightningCLI's types, imported only for the checker

import functools
import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # jsonargparse takes a while to import; doctor --static does without
    from lightning.pytorch.cli import ArgsType, LightningArgumentParser, LightningCLI


class _Resolved(Exception):
    """Carries the parsed config (and the CLI that parsed it) out of LightningCLI."""

    def __init__(self, cli: LightningCLI) -> None:
        super().__init__("config resolved")
        self.cli = cli
        self.config: dict[str, Any] = cli.config.fit.as_dict()


def resolve_config(args: Sequence[str]) -> dict[str, Any]:
    """The `fit` config these flags give, exactly as `fit` parses it, as plain data.

    LightningCLI has no parse-only mode for its subcommands: the parse hook hands the
    result out by raising, before seeding, instantiation or any data preparation.
    """
    cli = _parse_only_cli()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        try:
            cli.parse_arguments(cli.parser, ["fit", *args])
        except _Resolved as resolved:
            return resolved.config
    raise RuntimeError("LightningCLI returned without parsing")  # parse_arguments always raises


@functools.cache
def _parse_only_cli() -> LightningCLI:
    """The project's CLI with a parse hook that raises, built once per process.

    Building LightningCLI's parsers costs about as much as a parse: a test that resolves
    every pair of presets reuses them.
    """
    from .lightning_cli import ProjectCLI

    class ParseOnly(ProjectCLI):
        def parse_arguments(self, parser: LightningArgumentParser, args: ArgsType) -> None:
            super().parse_arguments(parser, args)
            raise _Resolved(self)

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
        try:
            ParseOnly(args=["fit"])
        except _Resolved as resolved:
            return resolved.cli
    raise RuntimeError("LightningCLI returned without parsing")  # parse_arguments always raises
