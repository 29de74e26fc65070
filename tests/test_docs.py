"""The documentation site builds with `mkdocs build --strict` (broken links fail)."""

import ast
import importlib.util
import subprocess
import sys

from conftest import REPO


def test_docs_build_strictly(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "index.html").is_file()


def test_generated_pages_are_up_to_date():
    """docs/presets/ and docs/checklist.md restate the template's files word for word."""
    result = subprocess.run(
        [sys.executable, "scripts/docs_pages.py", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout


def test_every_preset_has_a_page_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    for preset in (REPO / "template" / "configs" / "presets").iterdir():
        name = preset.name.removesuffix(".jinja").removesuffix(".yaml")
        assert f"presets/{name}.md" in nav, name


def test_the_data_recipes_page_names_every_test_of_the_recipes():
    """docs/data-recipes.md (scripts/data_recipes_page.py) has a row for each test function
    of core/tests/test_data_recipes.py, and the script refuses a run with one it lacks."""
    spec = importlib.util.spec_from_file_location("page", REPO / "scripts" / "data_recipes_page.py")
    assert spec and spec.loader
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    tree = ast.parse(script.TESTS.read_text())
    tests = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert {name for name in tests if name.startswith("test_")} == set(script.ROWS)
    page = (REPO / "docs" / "data-recipes.md").read_text()
    assert all(f"| {proves} |" in page for proves in script.ROWS.values())
