"""The library's rooms import downwards only, and no module imports itself back.

`copier_lightning_core.ROOMS` lists the rooms top to bottom (tools, run, callbacks,
checkpoints, platform); above them all sit the entry points: cli.py, which a project's
`__main__.py` calls, and testing/, which a project's tests import. A room may import itself
and the rooms below it,
never one above: a newcomer reading a room needs only what lies under it. Every import
counts, also those inside functions, so a deferred import cannot hide a cycle.
"""

import ast
from pathlib import Path

import pytest

import copier_lightning_core
from copier_lightning_core import ROOMS

LIBRARY = Path(copier_lightning_core.__file__).parent
PREFIX = "copier_lightning_core"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(LIBRARY).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PREFIX, *parts])


MODULES = {module_name(path): path for path in sorted(LIBRARY.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The library's modules `path` imports. `from package import name` counts as the
    submodule `package.name` where one exists, not as the package's __init__."""
    package = (
        module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    )
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, node.module] if node.module else base)
            else:
                module = node.module or ""
            # `from . import __doc__` reads a docstring, it does not depend on the code
            names = [alias.name for alias in node.names if not alias.name.startswith("__")]
            submodules = {f"{module}.{name}" for name in names}
            if names:
                found |= submodules if submodules <= MODULES.keys() else {module, *submodules}
    return {name for name in found if name in MODULES and name != module_name(path)}


def room_of(module: str) -> str:
    """`run`, `tools`, ... for a module in a room; "top" for the entry points and `__init__.py`."""
    parts = module.removeprefix(PREFIX).lstrip(".").split(".")
    return parts[0] if parts[0] in ROOMS else "top"


def is_entry_point(module: str) -> bool:
    """The package itself, cli.py, or a module of testing/."""
    return module in (PREFIX, f"{PREFIX}.cli", f"{PREFIX}.testing") or module.startswith(
        f"{PREFIX}.testing."
    )


def test_every_module_lives_in_a_room_but_the_entry_points():
    loose = sorted(name for name in MODULES if room_of(name) == "top" and not is_entry_point(name))
    assert loose == [], f"modules outside a room: {loose}; put each in one of {ROOMS}"
    for room in ROOMS:
        docstring = ast.get_docstring(ast.parse((LIBRARY / room / "__init__.py").read_text()))
        assert docstring and len(docstring) > 80, f"{room}/__init__.py says what the room holds"


@pytest.mark.parametrize("room", ROOMS)
def test_a_room_imports_only_itself_and_the_rooms_below_it(room):
    below = ROOMS[ROOMS.index(room) :]
    upward = [
        f"{module} imports {target}"
        for module, path in MODULES.items()
        if room_of(module) == room
        for target in sorted(imports_of(path))
        if room_of(target) not in below
    ]
    assert upward == [], upward


def test_no_import_cycle():
    graph = {module: imports_of(path) for module, path in MODULES.items()}
    state: dict[str, str] = {}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for target in sorted(graph[module]):
            if state.get(target) == "open":
                cycles.append(" -> ".join([*trail[trail.index(target) :], target]))
            elif target not in state:
                visit(target, [*trail, target])
        state[module] = "done"

    for module in graph:
        if module not in state:
            visit(module, [module])
    assert cycles == [], cycles


def test_every_module_path_of_the_copied_framework_names_a_module_of_the_library():
    """Until v0.2.0 each project held a copy of the library as `<package>.framework`, first
    flat, then in rooms: class paths recorded then (checkpoints' hyperparameters) read as
    the library's (platform/old_paths.py; test_trusted_classes.py loads such a checkpoint)."""
    import importlib

    from copier_lightning_core.platform.old_paths import MOVED, current_path

    for old, new in MOVED.items():
        module = importlib.import_module(f"{PREFIX}.{new}")
        assert current_path(f"pkg.framework.{old}.X") == f"{module.__name__}.X", old
    for module in MODULES:  # a path in rooms, as the copy had it from v0.2.0 on
        inside = module.removeprefix(PREFIX).lstrip(".")
        if inside:
            assert current_path(f"pkg.framework.{inside}.X") == f"{module}.X", module
    assert current_path("pkg.model.Net") == "pkg.model.Net"  # the project's own: unchanged
