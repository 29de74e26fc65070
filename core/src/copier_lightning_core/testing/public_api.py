"""Which imports of a project's own files reach past the library's public names.

A project's code imports from the library only what `copier_lightning_core.__all__` lists:
every other module may be renamed or moved by a later release line, and an import of it
would break on a library update that the project's pin allows. The owner's files are the
`.py` files under `src/` and `tests/` that do not start with the template's header line.
"""

import ast
from pathlib import Path

from .. import __all__ as PUBLIC_NAMES
from ..platform.project import LIBRARY

TEMPLATE_HEADER = "# Managed by the template; local edits are merged on update."


def owner_files(root: Path) -> list[Path]:
    """The `.py` files under `root/src` and `root/tests` the template does not manage."""
    files = sorted((root / "src").rglob("*.py")) + sorted((root / "tests").rglob("*.py"))
    return [
        path for path in files if not path.read_text(encoding="utf-8").startswith(TEMPLATE_HEADER)
    ]


def private_imports(source: str) -> list[tuple[int, str]]:
    """(line, import) for each import of a library name outside its `__all__`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.startswith(LIBRARY + ".")
            ]
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            names = [alias.name for alias in node.names]
            if node.module.startswith(LIBRARY + "."):
                found.append((node.lineno, f"from {node.module} import {', '.join(names)}"))
            elif node.module == LIBRARY:
                private = [name for name in names if name not in PUBLIC_NAMES]
                if private:
                    found.append((node.lineno, f"from {node.module} import {', '.join(private)}"))
    return found
