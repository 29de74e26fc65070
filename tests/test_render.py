"""What a copy produces: complete, rendered, lint-clean, portable, committed."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from nox.project import load_toml  # tomllib is 3.11+, the suite runs on 3.10 too

from conftest import ANSWER_SETS, REPO, render
from scaffold import git, package_name

RUFF = [sys.executable, "-m", "ruff"]
WINDOWS_RESERVED = {
    "con",
    "prn",
    "aux",
    "nul",
    *(f"com{i}" for i in range(10)),
    *(f"lpt{i}" for i in range(10)),
}
# A Jinja marker copier left behind; GitHub Actions' own `${{ }}` is fine.
UNRENDERED = re.compile(r"(?<!\$)\{\{|\{%|%\}")


def project_files(project: Path) -> list[Path]:
    """What the copy wrote: the files git tracks (the session's renders are shared
    with tests that run the projects, which leave data and runs behind)."""
    listed = git(project, "ls-files", "-z")
    return [project / name for name in listed.split("\0") if name]


@pytest.mark.parametrize("name", list(ANSWER_SETS))
def test_render_is_complete_and_lint_clean(rendered, name):
    project = rendered(name)
    files = project_files(project)
    for path in files:
        text = path.read_text()
        assert text.strip(), f"empty file {path.relative_to(project)}"
        assert not UNRENDERED.search(text), f"unrendered Jinja in {path.relative_to(project)}"
    package = package_name(project)
    for required in (
        "pyproject.toml",
        "README.md",
        "CHECKLIST.md",
        ".gitignore",
        ".pre-commit-config.yaml",
        "configs/default.yaml",
        f"src/{package}/__main__.py",
        f"src/{package}/model.py",
        "tests/test_contract.py",
    ):
        assert (project / required).is_file(), required
    for command in (["check", "--no-cache", "."], ["format", "--check", "--no-cache", "."]):
        result = subprocess.run([*RUFF, *command], cwd=project, capture_output=True, text=True)
        assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("name", list(ANSWER_SETS))
def test_file_names_are_portable(rendered, name):
    project = rendered(name)
    for path in project_files(project):
        for part in path.relative_to(project).parts:
            assert not re.search(r'[<>:"|?*\\]', part), part
            assert not part.endswith((" ", ".")), part
            assert part.split(".")[0].lower() not in WINDOWS_RESERVED, part


def test_answers_shape_the_project(rendered):
    default, every_logger, no_ci = rendered("defaults"), rendered("all_loggers"), rendered("no_ci")
    assert (default / ".github" / "workflows" / "ci.yml").is_file()
    assert not (no_ci / ".github").exists()
    assert "MIT License" in (default / "LICENSE").read_text()
    assert "Apache License" in (every_logger / "LICENSE").read_text()
    assert not (no_ci / "LICENSE").exists()
    assert "license =" not in (no_ci / "pyproject.toml").read_text()

    def loggers(project):
        config = yaml.safe_load((project / "configs" / "default.yaml").read_text())
        return [entry["class_path"].rsplit(".", 1)[1] for entry in config["trainer"]["logger"]]

    assert loggers(default) == ["CSVLogger"]
    assert loggers(every_logger) == [
        "CSVLogger",
        "TensorBoardLogger",
        "WandbLogger",
        "MLFlowLogger",
    ]
    deps = (every_logger / "pyproject.toml").read_text()
    assert '"tensorboard>=' in deps and '"wandb>=' in deps and '"mlflow-skinny>=' in deps
    assert "wandb" not in (default / "pyproject.toml").read_text()
    assert "mlflow" not in (default / "pyproject.toml").read_text()


@pytest.mark.parametrize("name", [n for n in ANSWER_SETS if n.startswith("py")])
def test_python_version_sets_requires_python_and_the_tools_follow_it(rendered, name):
    version = ANSWER_SETS[name]["python_version"]
    pyproject = (rendered(name) / "pyproject.toml").read_text()
    assert f'requires-python = ">={version}"' in pyproject
    assert "target-version" not in pyproject, "ruff reads its target from requires-python"
    assert f'python_version = "{version}"' in pyproject  # mypy's
    workflow = (rendered(name) / ".github" / "workflows" / "ci.yml").read_text()
    assert f'python-version: "{version}"' in workflow


def test_workflow_is_least_privilege_and_pinned(rendered):
    path = rendered("defaults") / ".github" / "workflows" / "ci.yml"
    workflow = yaml.safe_load(path.read_text())
    assert workflow["permissions"] == {"contents": "read"}
    job = workflow["jobs"]["test"]
    assert job["strategy"]["matrix"]["os"] == ["ubuntu-latest", "macos-latest", "windows-latest"]
    uses = [step["uses"] for step in job["steps"] if "uses" in step]
    assert uses and all(re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", u) for u in uses), uses
    assert all(
        re.search(r"@[0-9a-f]{40}  # v\d", line)
        for line in path.read_text().splitlines()
        if "uses:" in line
    )
    checkout = next(s for s in job["steps"] if s.get("uses", "").startswith("actions/checkout@"))
    assert checkout["with"]["persist-credentials"] is False
    # The jobs run the noxfile's sessions, which take torch from the CPU wheel index.
    assert "python -m nox -s tests" in [step.get("run") for step in job["steps"]]
    noxfile = (rendered("defaults") / "noxfile.py").read_text()
    assert '"https://download.pytorch.org/whl/cpu"' in noxfile


def test_copy_makes_a_git_repository_with_a_clean_first_commit(rendered):
    project = rendered("defaults")
    assert git(project, "rev-list", "--count", "HEAD").strip() == "1"
    assert git(project, "status", "--porcelain") == ""


def test_skip_tasks_still_yields_a_complete_project(template, tmp_path):
    project = render(template, tmp_path / "p", {"project_name": "No Tasks"}, skip_tasks=True)
    assert not (project / ".git").exists()
    assert (project / "src" / "no_tasks" / "__main__.py").is_file()


def test_copy_into_an_existing_repository_does_not_nest_one(template, tmp_path):
    outer = tmp_path / "monorepo"
    outer.mkdir()
    git(outer, "init", "-q")
    project = render(template, outer / "training", {"project_name": "Inner"})
    assert not (project / ".git").exists()
    assert (
        git(outer, "rev-list", "--all", "--count").strip() == "0"
    )  # nothing committed for the user


def test_the_project_pins_the_librarys_release_line_of_this_checkout(rendered):
    """`copier-lightning-core~=X.Y.Z`, X.Y.Z being core/pyproject.toml's version: a render
    asks for the library this checkout builds, and `pip install` of it finds that one."""
    library = load_toml(REPO / "core" / "pyproject.toml")["project"]
    project = load_toml(rendered("defaults") / "pyproject.toml")["project"]
    assert f"copier-lightning-core~={library['version']}" in project["dependencies"]
