"""Your files import from the framework only its public names (`framework.__all__`).

Everything else in `src/{{ package_name }}/framework/` may be renamed or moved by a template
update, which never touches your files: an import of it would break on update. Your files
are the .py files under `src/` and `tests/` that do not start with the template's header.
"""

import ast
from pathlib import Path

import pytest

from {{ package_name }} import framework

ROOT = Path(__file__).resolve().parents[2]
HEADER = "# Managed by the template; local edits are merged on update."
FRAMEWORK = "copier_lightning_core"


def user_files() -> list[Path]:
    files = sorted((ROOT / "src").rglob("*.py")) + sorted((ROOT / "tests").rglob("*.py"))
    return [path for path in files if not path.read_text(encoding="utf-8").startswith(HEADER)]


def package_of(path: Path) -> str | None:
    """The dotted package a file under src/ belongs to (relative imports resolve from it)."""
    if not path.is_relative_to(ROOT / "src"):
        return None
    return ".".join(path.relative_to(ROOT / "src").parent.parts)


def private_imports(source: str, package: str | None) -> list[tuple[int, str]]:
    """(line, import) for each import of a framework name outside `framework.__all__`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [
                (node.lineno, f"import {alias.name}")
                for alias in node.names
                if alias.name.startswith(FRAMEWORK + ".")
            ]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                if package is None:
                    continue
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join([*base, module] if module else base)
            names = [alias.name for alias in node.names]
            if module.startswith(FRAMEWORK + "."):
                found.append((node.lineno, f"from {module} import {', '.join(names)}"))
            elif module == FRAMEWORK:
                private = [name for name in names if name not in framework.__all__]
                if private:
                    found.append((node.lineno, f"from {module} import {', '.join(private)}"))
    return found


def test_your_files_import_only_the_public_names_of_the_framework():
    problems = [
        f"{path.relative_to(ROOT)}:{line}: {statement}"
        for path in user_files()
        for line, statement in private_imports(path.read_text(encoding="utf-8"), package_of(path))
    ]
    assert not problems, (
        "These imports reach inside the framework, which a template update may rename or "
        f"move; import only {framework.__all__} from {FRAMEWORK}:\n" + "\n".join(problems)
    )


def test_the_check_finds_every_kind_of_private_import():
    source = "\n".join(
        [
            f"from {FRAMEWORK} import LoaderOptions",  # public: fine
            f"from {FRAMEWORK} import LoaderOptions, ResumeState",
            f"import {FRAMEWORK}.resume",
            f"from {FRAMEWORK}.loaders import LoaderOptions",
            "from .framework.platform.loaders import LoaderOptions",
            "from .framework import project_path",  # public: fine
            "from . import framework",  # the module itself: fine
        ]
    )
    assert [line for line, _ in private_imports(source, "{{ package_name }}")] == [2, 3, 4, 5]


def test_every_file_without_the_header_is_checked_and_some_are_yours():
    # Whatever you named your files (the example's, or your own after deleting it).
    checked = set(user_files())
    everything = {*(ROOT / "src").rglob("*.py"), *(ROOT / "tests").rglob("*.py")}
    template_owned = {p for p in everything if p.read_text(encoding="utf-8").startswith(HEADER)}
    assert checked == everything - template_owned
    assert any(path.is_relative_to(ROOT / "src") for path in checked), "no model code of yours"


@pytest.mark.parametrize("name", framework.__all__)
def test_every_public_name_resolves(name):
    assert getattr(framework, name) is not None
