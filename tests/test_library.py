"""The library in core/ as a package: it builds, ships what a project imports, and is clean.

Its behaviour is proven by its own suite (core/tests, run in a render by
test_generated_projects.py); this checks the package around it.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

from nox.project import load_toml  # tomllib is 3.11+, the suite runs on 3.10 too

from conftest import LIBRARY


def run(*args: str, cwd: Path = LIBRARY) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, check=False)


def test_the_wheel_holds_the_package_typed_and_no_tests(tmp_path):
    """What `pip install` of a release gets: every module, the py.typed marker that lets a
    project's mypy read the library's types, and none of the library's tests."""
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                "-q", "-w", str(tmp_path), str(LIBRARY))  # fmt: skip
    assert built.returncode == 0, built.stderr
    version = load_toml(LIBRARY / "pyproject.toml")["project"]["version"]
    (wheel,) = tmp_path.glob(f"copier_lightning_core-{version}-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = LIBRARY / "src"
    expected = {path.relative_to(sources).as_posix() for path in sources.rglob("*.py")}
    assert expected <= names and "copier_lightning_core/py.typed" in names
    assert not any(name.startswith(("tests/", "copier_lightning_core/tests/")) for name in names)


def test_ruff_and_strict_mypy_are_clean_on_the_library(mypy_cache):
    for check in (["ruff", "check", "."], ["ruff", "format", "--check", "."]):
        result = run(sys.executable, "-m", *check)
        assert result.returncode == 0, result.stdout + result.stderr
    # files: core/pyproject.toml; the run's cache, not core/.mypy_cache, which an older
    # checkout's analysis may be in
    result = run(sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache))
    assert result.returncode == 0 and "Success" in result.stdout, result.stdout + result.stderr
