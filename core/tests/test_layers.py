"""The framework's rooms import downwards only, and no module imports itself back.

`framework.ROOMS` lists the rooms top to bottom (tools, run, callbacks, checkpoints,
platform); cli.py sits above them all. A room may import itself and the rooms below it,
never one above: a newcomer reading a room needs only what lies under it. Every import
counts, also those inside functions, so a deferred import cannot hide a cycle.
"""

import ast
from pathlib import Path

import pytest

from {{ package_name }} import framework

FRAMEWORK = Path(framework.__file__).parent
PREFIX = "copier_lightning_core"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(FRAMEWORK).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([PREFIX, *parts])


MODULES = {module_name(path): path for path in sorted(FRAMEWORK.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """The framework modules `path` imports. `from package import name` counts as the
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
    """`run`, `tools`, ... for a module in a room; `cli.py` or `__init__.py` above them."""
    parts = module.removeprefix(PREFIX).lstrip(".").split(".")
    return parts[0] if parts[0] in framework.ROOMS else "top"


def test_every_module_lives_in_a_room_but_the_entry_points():
    loose = sorted(
        name for name in MODULES if room_of(name) == "top" and name not in (PREFIX, f"{PREFIX}.cli")
    )
    assert loose == [], f"modules outside a room: {loose}; put each in one of {framework.ROOMS}"
    for room in framework.ROOMS:
        docstring = ast.get_docstring(ast.parse((FRAMEWORK / room / "__init__.py").read_text()))
        assert docstring and len(docstring) > 80, f"{room}/__init__.py says what the room holds"


@pytest.mark.parametrize("room", framework.ROOMS)
def test_a_room_imports_only_itself_and_the_rooms_below_it(room):
    below = framework.ROOMS[framework.ROOMS.index(room) :]
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


def test_every_old_module_path_imports_as_the_module_that_replaced_it():
    """Class paths recorded before the rooms (run configs, checkpoints) still resolve."""
    import importlib

    from copier_lightning_core.platform.moved_modules import MOVED

    for old, new in MOVED.items():
        moved = importlib.import_module(f"{PREFIX}.{new}")
        assert importlib.import_module(f"{PREFIX}.{old}") is moved, old
    health = importlib.import_module(f"{PREFIX}.health.nonfinite")
    assert health.NonFiniteGuard.__module__ == f"{PREFIX}.callbacks.health.nonfinite"
