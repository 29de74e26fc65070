# Managed by the template; local edits are merged on update.
"""The project's package: model, data and networks, plus the command line around them."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version(__name__)
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
