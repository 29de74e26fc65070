"""The documentation site builds with `mkdocs build --strict` (broken links fail)."""

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
