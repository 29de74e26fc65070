"""A project's own files import from the library only its public names (`__all__`).

Every other module of the library may be renamed or moved by a later release, which a
project takes with a version bump: an import of one would break then. The project's
contract test holds its files to that (testing/contract.py, through testing/public_api.py);
here the check itself is held: it finds every kind of private import, it reads the files
the owner writes and none the template keeps, and every public name resolves.
"""

import pytest

import copier_lightning_core
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing.public_api import TEMPLATE_HEADER, owner_files, private_imports

LIBRARY = "copier_lightning_core"


def test_the_check_finds_every_kind_of_private_import():
    source = "\n".join(
        [
            f"from {LIBRARY} import LoaderOptions",  # public: fine
            f"from {LIBRARY} import LoaderOptions, ResumeState",
            f"import {LIBRARY}.callbacks.resume",
            f"from {LIBRARY}.platform.loaders import LoaderOptions",
            f"from {LIBRARY}.callbacks import resume",
            f"import {LIBRARY}",  # the package itself: fine
            "from .model import Net",  # the project's own: fine
            f"from {LIBRARY}_extra import Thing",  # another package with a name alike: fine
        ]
    )
    assert [line for line, _ in private_imports(source)] == [2, 3, 4, 5]


def test_every_file_without_the_header_is_checked_and_some_are_the_projects():
    # Whatever the project named its files (the example's, or its own after deleting it).
    root = project_root()
    checked = set(owner_files(root))
    everything = {*(root / "src").rglob("*.py"), *(root / "tests").rglob("*.py")}
    kept = {p for p in everything if p.read_text(encoding="utf-8").startswith(TEMPLATE_HEADER)}
    assert kept, "the template keeps __main__.py and tests/test_contract.py"
    assert checked == everything - kept
    assert any(path.is_relative_to(root / "src") for path in checked), "no model code"


def test_the_projects_own_files_pass_the_check():
    root = project_root()
    problems = [
        f"{path.relative_to(root)}:{line}: {statement}"
        for path in owner_files(root)
        for line, statement in private_imports(path.read_text(encoding="utf-8"))
    ]
    assert problems == []


@pytest.mark.parametrize("name", copier_lightning_core.__all__)
def test_every_public_name_resolves(name):
    assert getattr(copier_lightning_core, name) is not None
