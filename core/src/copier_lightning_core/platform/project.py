"""Which project the library serves, and where that project lives on disk.

A project is a package that hands its command line to this library (`python -m <package>`
runs `<package>/__main__.py`, which calls `cli.main`) and a folder holding its
`configs/`. The package is found, first to last:
- the one `cli.main` was handed (`main(project=__package__)` in the project's `__main__.py`);
- the module Python runs as `__main__` when it runs this library's CLI (`python -m
  <package>`, and the processes DDP and spawned loader workers start from the same command);
- the `[tool.copier-lightning-core] package` of the `pyproject.toml` in the working folder
  or a folder above it (a notebook, `pytest` in the project).
The project's root is the folder above `src/` that holds its package.
"""

import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

from .refusal import Refusal

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomllib's origin, a dependency there (pyproject.toml)
    import tomli as tomllib

LIBRARY = __package__.split(".")[0]
SETTINGS_TABLE = "copier-lightning-core"  # [tool.<this>] in a project's pyproject.toml
_handed: list[str] = []


def serve(package: str) -> None:
    """Name the project this process serves (the project's `__main__.py`, a test's conftest)."""
    _handed[:] = [package]
    for cached in (project_package, package_folder, project_root):
        cached.cache_clear()


def _from_main_module() -> str | None:
    """The package of `python -m <package>` when its `__main__` runs this library's CLI
    (not `python -m pytest`, whose `__main__` is pytest's)."""
    main = sys.modules.get("__main__")
    name = getattr(getattr(main, "__spec__", None), "name", None) or ""
    runs_this_cli = getattr(getattr(main, "main", None), "__module__", None) == f"{LIBRARY}.cli"
    return name.split(".")[0] if name.endswith(".__main__") and runs_this_cli else None


def project_settings(start: Path) -> dict[str, Any]:
    """The `[tool.copier-lightning-core]` table of the nearest `pyproject.toml` in `start`
    or a folder above it; empty when there is none or it does not parse."""
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                settings = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                return {}
            table = settings.get("tool", {}).get(SETTINGS_TABLE, {})
            return table if isinstance(table, dict) else {}
    return {}


def _from_pyproject(start: Path) -> str | None:
    package = project_settings(start).get("package")
    return package if isinstance(package, str) else None


@functools.cache
def project_package() -> str:
    """The import name of the project's package."""
    package = next(iter(_handed), None) or _from_main_module() or _from_pyproject(Path.cwd())
    if package is None:
        raise Refusal(
            "no project is known to this process: run the command as `python -m <package>` "
            "from a project made by the template, call it from a folder inside one (its "
            f"pyproject.toml names the package under [tool.{SETTINGS_TABLE}]), or name the "
            f"package first with `{LIBRARY}.platform.project.serve('<package>')`."
        )
    return package


@functools.cache
def package_folder() -> Path:
    """The folder the project's package is imported from (its sources when installed
    editable, else the installed copy)."""
    package = project_package()
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        raise Refusal(
            f"the project's package {package!r} is not importable from this Python "
            f"({sys.executable}): install the project (`pip install -e .` in its folder)."
        )
    return Path(spec.origin).resolve().parent


@functools.cache
def project_root() -> Path:
    """The project's folder: the one above `src/` that holds its package."""
    folder = package_folder()
    for parent in folder.parents:
        if (parent / "pyproject.toml").is_file():
            return parent
    return folder.parents[1]  # <root>/src/<package>/


def program() -> str:
    """How a user runs the project's command line: `python -m <package>`."""
    return f"python -m {project_package()}"
