"""`copier update` on real projects: template fixes arrive, the user's code survives.

Each test releases its own throwaway git copy of this checkout: the snapshot is tagged
v0.1.0, the test edits the template as a later release would and tags v0.2.0, ... Copier
updates to the latest tag, exactly as a user's `copier update --trust` does.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import copier
import jinja2
import pytest
import yaml

from conftest import REPO, assert_project_tests_pass, project_command
from scaffold import git, install_editable, package_name, snapshot_template, uninstall

HEADER = "# Managed by the template; local edits are merged on update."
CONFLICT_MARKER = re.compile(r"^(<<<<<<<|=======|>>>>>>>)( |$)", re.MULTILINE)
PACKAGE = "update_probe"
PATHS_PY = "template/src/{{package_name}}/framework/platform/paths.py"
PATHS_DOC = '"""`path` itself when absolute, else the same path under the project root."""'


def copy_at(template: Path, dest: Path, tag: str, **answers) -> Path:
    copier.run_copy(
        str(template),
        str(dest),
        data={"project_name": "Update Probe", **answers},
        defaults=True,
        unsafe=True,
        vcs_ref=tag,
        quiet=True,
    )
    return dest


def update(project: Path, **kwargs) -> None:
    """`copier update --trust --defaults --conflict inline` to the latest release."""
    copier.run_update(
        str(project),
        overwrite=True,
        unsafe=True,
        defaults=True,
        quiet=True,
        conflict="inline",
        **kwargs,
    )


def release(template: Path, tag: str, edits: list[tuple[str, str, str]]) -> None:
    """Apply (file, old text, new text) edits to the template, commit and tag them."""
    for name, old, new in edits:
        path = template / name
        text = path.read_text()
        assert old in text, f"{old!r} not in {name}: the test no longer matches the template"
        path.write_text(text.replace(old, new, 1))
    git(template, "add", "-A")
    git(template, "commit", "-q", "-m", f"release {tag}")
    git(template, "tag", tag)


def commit_all(project: Path, message: str) -> None:
    git(project, "add", "-A")
    git(project, "commit", "-q", "--no-verify", "-m", message)


def append_line(path: Path, line: str) -> None:
    path.write_text(path.read_text() + line + "\n")


def answers(project: Path) -> dict:
    return yaml.safe_load((project / ".copier-answers.yml").read_text())


def files_with_conflicts(project: Path) -> list[str]:
    # An unmerged file is listed once per stage, hence the set; one the update deleted is
    # still in the index.
    listed = set(git(project, "ls-files", "--cached", "--others", "--exclude-standard").split())
    return sorted(
        name
        for name in listed
        if (project / name).is_file() and CONFLICT_MARKER.search((project / name).read_text())
    )


def written_once(project: Path) -> set[str]:
    """The paths copier.yml's `_exclude` keeps away from updates, for this project."""
    config = yaml.safe_load((REPO / "copier.yml").read_text())
    context = {"_copier_operation": "update", "package_name": package_name(project)}
    rendered = "\n".join(jinja2.Template(entry).render(context) for entry in config["_exclude"])
    at_copy = "\n".join(
        jinja2.Template(entry).render({**context, "_copier_operation": "copy"})
        for entry in config["_exclude"]
    )
    return set(rendered.split()) - set(at_copy.split())


@pytest.fixture
def release_a(tmp_path: Path) -> Path:
    """This checkout as release v0.1.0 of a template repository of its own."""
    return snapshot_template(tmp_path / "template")


def test_ownership_rule_headers_and_readme_agree(rendered):
    project = rendered("defaults")
    mine = written_once(project)
    assert mine, "copier.yml excludes nothing on update: user files would be merged"
    tables = {
        "README.md": (project / "README.md").read_text(),
        "docs/updating.md": (REPO / "docs" / "updating.md").read_text(),
    }
    for name in mine:
        assert (project / name).is_file(), f"{name} is excluded on update but never rendered"
        for where, text in tables.items():
            assert Path(name).name in text, f"the ownership table of {where} does not list {name}"
    layout = (REPO / "docs" / "layout.md").read_text()
    yours = [line for line in layout.splitlines() if " yours" in line]
    for name in mine:
        assert any(Path(name).name in line for line in yours), (
            f"docs/layout.md does not mark {name} as yours"
        )
    framework = project / "src" / package_name(project) / "framework"
    for entry in framework.iterdir():
        if entry.name != "__pycache__":
            assert entry.name in layout, f"docs/layout.md's tree lacks framework/{entry.name}"
    for path in [*project.glob("src/**/*.py"), *project.glob("tests/**/*.py")]:
        name = path.relative_to(project).as_posix()
        has_header = path.read_text().startswith(HEADER + "\n")
        assert has_header == (name not in mine), (
            f"{name}: template-owned files (not in copier.yml's update `_exclude`) start "
            f"with the header, written-once files do not"
        )


def test_update_brings_template_fixes_and_keeps_user_edits(release_a, tmp_path):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    package = project / "src" / PACKAGE
    mine = [
        package / "model.py",
        package / "nets.py",
        package / "data.py",
        project / "configs" / "default.yaml",
    ]
    for path in mine:
        append_line(path, f"# my own line in {path.name}")
    commit_all(project, "my model, network, data and config")

    fixed_doc = PATHS_DOC.replace("root.", "root (`~` expanded).")
    release(
        release_a,
        "v0.2.0",
        [
            (PATHS_PY, PATHS_DOC, fixed_doc),  # a fix in a template-owned file
            (
                "template/configs/default.yaml.jinja",
                "log_every_n_steps: 10 ",
                "log_every_n_steps: 5  ",
            ),
            # a change to the example: it must not reach the user's model.py
            (
                "template/src/{{package_name}}/model.py",
                "The network itself is injected.",
                "The network is injected.",
            ),
        ],
    )
    update(project)

    assert fixed_doc in (package / "framework" / "platform" / "paths.py").read_text()
    config = (project / "configs" / "default.yaml").read_text()
    assert "log_every_n_steps: 5 " in config, "the template's config change was not merged"
    for path in mine:
        assert f"# my own line in {path.name}\n" in path.read_text(), f"lost the edit of {path}"
    assert "The network itself is injected." in (package / "model.py").read_text()
    assert not list(project.rglob("*.rej"))
    assert files_with_conflicts(project) == []
    assert answers(project)["_commit"] == "v0.2.0"
    commit_all(project, "update to v0.2.0")

    # The updated framework is the suite's own template with the release's edits, whose
    # whole suite test_generated_projects runs: here, that the merged project still
    # parses its config, trains and passes the user's tests.
    install_editable(project)
    try:
        assert_project_tests_pass(
            project,
            "-m",
            "not slow",
            "tests/framework/test_smoke.py",
            "tests/framework/test_cli.py",
            "tests/test_model.py",
            "tests/test_data.py",
        )
    finally:
        uninstall(PACKAGE)


def test_same_lines_changed_on_both_sides_conflict_inline_and_pre_commit_refuses(
    release_a, tmp_path
):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    paths_py = project / "src" / PACKAGE / "framework" / "platform" / "paths.py"
    mine = PATHS_DOC.replace("root.", "root, as I need it.")
    paths_py.write_text(paths_py.read_text().replace(PATHS_DOC, mine))
    commit_all(project, "my wording")
    theirs = PATHS_DOC.replace("root.", "root (`~` expanded).")
    release(release_a, "v0.2.0", [(PATHS_PY, PATHS_DOC, theirs)])
    update(project)

    assert not list(project.rglob("*.rej")), "copier left a .rej instead of inline markers"
    assert files_with_conflicts(project) == [f"src/{PACKAGE}/framework/platform/paths.py"]
    text = paths_py.read_text()
    assert "<<<<<<< before updating" in text and ">>>>>>> after updating" in text
    assert mine in text and theirs in text

    # The user stages the file as it is; the project's own pre-commit config refuses it.
    git(project, "add", "-A")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pre_commit",
            "run",
            "check-merge-conflict",
            "--files",
            f"src/{PACKAGE}/framework/platform/paths.py",
        ],
        cwd=project,
        capture_output=True,
        text=True,
        env={**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit-home")},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Merge conflict string" in result.stdout, result.stdout


def test_update_to_the_same_release_changes_nothing(release_a, tmp_path):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    for name in (
        f"src/{PACKAGE}/model.py",
        f"src/{PACKAGE}/framework/cli.py",
        "configs/default.yaml",
    ):
        append_line(project / name, "# my own line")
    commit_all(project, "my edits, in user-owned and template-owned files")
    update(project)
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


def test_changing_answers_adds_and_removes_files_and_dependencies(release_a, tmp_path):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    config = project / "configs" / "default.yaml"
    append_line(config, "# my own line")
    commit_all(project, "my config")

    def loggers() -> list[str]:
        entries = yaml.safe_load(config.read_text())["trainer"]["logger"]
        return [entry["class_path"].rsplit(".", 1)[1] for entry in entries]

    workflow = project / ".github" / "workflows" / "ci.yml"
    assert workflow.is_file() and loggers() == ["CSVLogger"]

    update(project, data={"loggers": ["csv", "wandb"], "ci": "none"})
    assert loggers() == ["CSVLogger", "WandbLogger"]
    assert '"wandb>=' in (project / "pyproject.toml").read_text()
    assert not (project / ".github").exists()
    assert (answers(project)["loggers"], answers(project)["ci"]) == (["csv", "wandb"], "none")
    commit_all(project, "wandb, no CI")

    update(project, data={"loggers": ["tensorboard"], "ci": "github"})
    assert loggers() == ["TensorBoardLogger"]
    pyproject = (project / "pyproject.toml").read_text()
    assert '"tensorboard>=' in pyproject and "wandb" not in pyproject
    assert workflow.is_file()
    assert config.read_text().endswith("# my own line\n")
    assert files_with_conflicts(project) == [] and not list(project.rglob("*.rej"))


def test_migration_runs_once_when_its_release_is_crossed(release_a, tmp_path, capfd):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0", ci="none")
    capfd.readouterr()
    # v0.2.0 renames the question `ci` to `ci_provider`; its migration keeps the answer.
    old_dir = 'template/{% if ci == "github" %}.github{% endif %}'
    git(release_a, "mv", old_dir, old_dir.replace("if ci ==", "if ci_provider =="))
    # Prepended to the template's own migrations (the rename runs at stage "before").
    migration = """_migrations:
  - version: v0.2.0
    when: "{{ _stage == 'before' }}"
    command: ["{{ _copier_python }}", "{{ _copier_conf.src_path }}/hooks/migrations.py",
              "rename-answer", "ci", "ci_provider"]
"""
    release(
        release_a,
        "v0.2.0",
        [
            ("copier.yml", "\nci:\n", "\nci_provider:\n"),
            ("copier.yml", "_migrations:\n", migration),
        ],
    )
    log_line = "migration rename-answer: answer 'ci' renamed to 'ci_provider' (kept 'none')."

    update(project)
    first = capfd.readouterr()
    assert (first.out + first.err).count(log_line) == 1, first.out + first.err
    # The copy-only task ran neither in copier's replay folders nor in the project.
    assert "git repository" not in first.out + first.err
    assert answers(project)["ci_provider"] == "none" and "ci" not in answers(project)
    assert not (project / ".github").exists(), "the renamed answer fell back to its default"
    commit_all(project, "update to v0.2.0")

    release(
        release_a,
        "v0.3.0",
        [("template/CHECKLIST.md.jinja", "# Before you commit", "# Before each commit")],
    )
    update(project)
    second = capfd.readouterr()
    assert log_line not in second.out + second.err
    assert answers(project)["_commit"] == "v0.3.0"
    assert (project / "CHECKLIST.md").read_text().startswith("# Before each commit")


def test_recopy_restores_what_update_will_not(release_a, tmp_path):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    model = project / "src" / PACKAGE / "model.py"
    append_line(model, "# my own line")
    (project / ".pre-commit-config.yaml").unlink()
    commit_all(project, "my model; deleted a template file by mistake")
    update(project)
    assert not (project / ".pre-commit-config.yaml").exists()  # update keeps deletions

    # The escape hatch of docs/updating.md: recopy, then take back your own files from git.
    copier.run_recopy(str(project), overwrite=True, unsafe=True, defaults=True, quiet=True)
    assert (project / ".pre-commit-config.yaml").read_text().startswith(HEADER)
    assert "# my own line" not in model.read_text()
    git(project, "checkout", "HEAD", "--", f"src/{PACKAGE}/model.py")
    assert model.read_text().endswith("# my own line\n")


@pytest.mark.parametrize(
    ("answers_text", "message"),
    [
        (None, "not found"),
        ("ci: none\nci_provider: github\n", "holds both 'ci' and 'ci_provider'"),
    ],
)
def test_rename_answer_refuses_what_it_cannot_do_safely(tmp_path, answers_text, message):
    if answers_text is not None:
        (tmp_path / ".copier-answers.yml").write_text(answers_text)
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "hooks" / "migrations.py"),
            "rename-answer",
            "ci",
            "ci_provider",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1
    assert message in result.stderr
    if answers_text is not None:
        assert (tmp_path / ".copier-answers.yml").read_text() == answers_text


def test_changing_package_name_on_update_is_refused_before_anything_changes(release_a, tmp_path):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    with pytest.raises(
        ValueError,
        match=r'package_name cannot change on update \("update_probe" -> "renamed_probe"\)',
    ):
        update(project, data={"package_name": "renamed_probe"})
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""
    assert not (project / "src" / "renamed_probe").exists()
    # The same update without the rename goes through, even to a release that refuses the
    # name at copy (a dependency added since installs a module of that name).
    reserved = ("includes/reserved_names.txt", "# Written", f"{PACKAGE} some-dependency\n# Written")
    release(release_a, "v0.2.0", [reserved])
    update(project)
    assert answers(project)["package_name"] == PACKAGE and answers(project)["_commit"] == "v0.2.0"


FLAT_RELEASE = "832c52e"  # v0.1.0 as released: the framework flat in src/<package>/
# The last commit with the framework's modules side by side in framework/, before the rooms
# (framework/run/, callbacks/, ...): what projects copied from the main branch hold.
SIDE_BY_SIDE = "f9f28d7"
LAYOUT_PACKAGE = "layout_probe"


def flat_release_then_this_checkout(template: Path, commit: str = FLAT_RELEASE) -> Path:
    """A template repository whose v0.1.0 is `commit` (the flat release) and v0.2.0 this checkout.

    The release is taken from this repository's history, not rebuilt, so the test updates
    exactly the files users copied.
    """
    found = subprocess.run(
        ["git", "cat-file", "-e", f"{commit}^{{commit}}"], cwd=REPO, capture_output=True
    )
    if found.returncode != 0:
        pytest.fail(
            f"commit {commit} (the layout an update starts from) is not in {REPO}: the "
            "update from it cannot be tested. Clone the full history (`git fetch --unshallow`, "
            "or `fetch-depth: 0` in actions/checkout)."
        )
    template.mkdir()
    archive = subprocess.run(
        ["git", "archive", commit], cwd=REPO, capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(template)], input=archive, check=True)
    git(template, "init", "-q", "-b", "main")
    git(template, "add", "-A")
    git(template, "commit", "-q", "-m", "v0.1.0: the flat layout")
    git(template, "tag", "v0.1.0")
    git(template, "rm", "-rq", ".")  # what the working tree no longer has must not linger
    return snapshot_template(template, tag="v0.2.0")


def test_update_from_the_flat_layout_migrates_the_users_imports(tmp_path, capfd):
    """v0.1.0 -> v0.2.0 moved the framework; the user's files, never updated, must follow."""
    template = flat_release_then_this_checkout(tmp_path / "template")
    project = copy_at(template, tmp_path / "project", "v0.1.0", project_name="Layout Probe")
    package = project / "src" / LAYOUT_PACKAGE
    flat_owned = sorted(
        path.relative_to(project).as_posix()
        for path in [*package.rglob("*.py"), *(project / "tests").rglob("*.py")]
        if path.read_text().startswith(HEADER + "\n")
    )

    # The user's v0.1.0 project: edits in their files, and a config of their own.
    data_py, model_py = package / "data.py", package / "model.py"
    data_py.write_text(
        data_py.read_text().replace("batch_size: int = 64,", "batch_size: int = 32,")
        + "# my own line in data.py\n"
    )
    append_line(model_py, "# my own line in model.py")
    append_line(package / "loaders.py", "# my fix in a framework file")
    config = project / "configs" / "default.yaml"
    config.write_text(
        config.read_text().replace("seed_everything: 1234 ", "seed_everything: 4321 ")
    )
    append_line(config, "# my own line in default.yaml")
    mine_yaml = project / "configs" / "mine.yaml"
    mine_yaml.write_text(
        "trainer:\n  callbacks+:\n"
        f"    - class_path: {LAYOUT_PACKAGE}.lr_scaling.LinearLRScaling  # my preset\n"
    )
    commit_all(project, "my model, data and configs")
    before = {
        path: path.read_bytes()
        for path in [*package.glob("*.py"), *(project / "tests").glob("*.py"), mine_yaml]
        if path.relative_to(project).as_posix() not in flat_owned
    }
    assert len(before) == 6, sorted(before)  # model, nets, data, their two tests, mine.yaml
    capfd.readouterr()

    update(project)
    printed = capfd.readouterr()
    printed = printed.out + printed.err

    assert answers(project)["_commit"] == "v0.2.0"
    assert not list(project.rglob("*.rej"))
    assert files_with_conflicts(project) == []
    # The flat framework is gone, moved to framework/ and tests/framework/; the package's
    # __init__.py and __main__.py stay where `python -m <package>` needs them.
    kept = [name for name in flat_owned if (project / name).exists()]
    assert kept == [f"src/{LAYOUT_PACKAGE}/__init__.py", f"src/{LAYOUT_PACKAGE}/__main__.py"]
    for name in (
        "cli.py",
        "platform/loaders.py",
        "platform/paths.py",
        "callbacks/resume.py",
        "tools/doctor",
        "callbacks/health",
    ):
        assert (package / "framework" / name).exists(), name
        assert not (package / Path(name).name).exists(), name
    assert (project / "tests" / "framework" / "conftest.py").is_file()

    # The user's files: byte for byte, but for the import lines the migration rewrote.
    rewrites = {
        data_py: [
            (b"from .loaders import LoaderOptions\n", b"from .framework import LoaderOptions\n"),
            (b"from .paths import project_path\n", b"from .framework import project_path\n"),
        ],
        project / "tests" / "test_accuracy.py": [
            (
                f"from {LAYOUT_PACKAGE}.cli import ProjectCLI\n".encode(),
                f"from {LAYOUT_PACKAGE}.framework import ProjectCLI\n".encode(),
            )
        ],
        mine_yaml: [(b"lr_scaling", b"framework.callbacks.lr_scaling")],
    }
    for path, old_bytes in before.items():
        expected = old_bytes
        for old, new in rewrites.get(path, []):
            assert expected.count(old) == 1, (path, old)
            expected = expected.replace(old, new)
        assert path.read_bytes() == expected, f"{path.name} changed beyond its import lines"
    text = config.read_text()
    assert "seed_everything: 4321 " in text and text.endswith("# my own line in default.yaml\n")
    class_paths = re.findall(rf"class_path: {LAYOUT_PACKAGE}\.(\w+)\.", text)
    assert set(class_paths) == {"framework", "model", "nets", "data"}, class_paths

    # What needs a hand is listed, file and line, once each.
    lines = data_py.read_text().splitlines()
    resume_line = lines.index("from .resume import ResumableDataLoader, run_seed") + 1
    for name in ("ResumableDataLoader", "run_seed"):
        todo = f"TO DO src/{LAYOUT_PACKAGE}/data.py:{resume_line}: {name}: "
        assert printed.count(todo) == 1, printed
    assert "StatefulDataLoader" in printed and "ruff check --fix" in printed
    # Copier deletes a moved file even when the user changed it; the printout says so.
    dropped = f"TO DO src/{LAYOUT_PACKAGE}/loaders.py: you changed it, and the update deleted it"
    assert printed.count(dropped) == 1, printed
    assert "rewritten tests/test_accuracy.py:" in printed

    # Idempotent: a second run finds the hand work again and changes nothing.
    commit_all(project, "update to v0.2.0")
    again = subprocess.run(
        [
            sys.executable,
            str(REPO / "hooks" / "migrations.py"),
            "framework-imports",
            LAYOUT_PACKAGE,
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "rewritten" not in again.stdout, again.stdout + again.stderr
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""

    # The framework imports and the CLI starts; data.py fails only on the import listed.
    env = {**os.environ, "PYTHONPATH": str(project / "src")}  # not installed: the venv is shared
    probe = (
        f"from {LAYOUT_PACKAGE}.framework import LoaderOptions, ProjectCLI, project_path\n"
        f"import {LAYOUT_PACKAGE}.model\n"
        "try:\n"
        f"    import {LAYOUT_PACKAGE}.data\n"
        "except ModuleNotFoundError as error:\n"
        "    print('missing', error.name)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True
    )
    assert result.stdout == f"missing {LAYOUT_PACKAGE}.resume\n", result.stdout + result.stderr
    result = subprocess.run(
        [sys.executable, "-m", LAYOUT_PACKAGE, "--help"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0 and "fit" in result.stdout, result.stdout + result.stderr


def test_update_to_the_rooms_rewrites_the_users_module_paths_and_old_paths_still_import(
    tmp_path, capfd
):
    """v0.2.0 put framework/*.py into rooms: a project copied before keeps working, cleaned."""
    template = flat_release_then_this_checkout(tmp_path / "template", SIDE_BY_SIDE)
    project = copy_at(template, tmp_path / "project", "v0.1.0", project_name="Layout Probe")
    package = project / "src" / LAYOUT_PACKAGE
    assert (package / "framework" / "health" / "__init__.py").is_file()  # the old layout
    mine = project / "configs" / "experiments" / "mine.yaml"
    mine.write_text(
        "trainer:\n  callbacks+:\n"
        f"    - class_path: {LAYOUT_PACKAGE}.framework.lr_scaling.LinearLRScaling  # my preset\n"
    )
    append_line(package / "model.py", "from .framework.health import NonFiniteGuard  # mine")
    recorded = project / "runs" / "old" / "config.yaml"  # a run's record: the user's data
    recorded.parent.mkdir(parents=True)
    recorded.write_text(f"class_path: {LAYOUT_PACKAGE}.framework.health.NonFiniteGuard\n")
    commit_all(project, "my config and model")
    capfd.readouterr()

    update(project)
    printed = "".join(capfd.readouterr())

    assert answers(project)["_commit"] == "v0.2.0"
    assert files_with_conflicts(project) == [] and not list(project.rglob("*.rej"))
    assert not (package / "framework" / "health").exists()
    assert (package / "framework" / "callbacks" / "health" / "__init__.py").is_file()
    assert mine.read_text().count(f"{LAYOUT_PACKAGE}.framework.callbacks.lr_scaling.") == 1
    assert (
        "from .framework.callbacks.health import NonFiniteGuard  # mine"
        in (package / "model.py").read_text()
    )
    assert f"{LAYOUT_PACKAGE}.framework.health." in recorded.read_text()  # never rewritten
    assert (
        "migration framework-rooms" in printed and "configs/experiments/mine.yaml:3" in printed
    ), printed
    config = (project / "configs" / "default.yaml").read_text()
    assert f"{LAYOUT_PACKAGE}.framework.callbacks.health.NonFiniteGuard" in config
    assert f"{LAYOUT_PACKAGE}.framework.health." not in config

    # Old paths still import, as the very modules that replaced them; the old pre-commit
    # hook's `python -m` path still runs.
    env = {**os.environ, "PYTHONPATH": str(project / "src")}  # not installed: the venv is shared
    probe = (
        f"from {LAYOUT_PACKAGE}.framework.health import NonFiniteGuard as old\n"
        f"from {LAYOUT_PACKAGE}.framework.callbacks.health import NonFiniteGuard as new\n"
        f"import {LAYOUT_PACKAGE}.framework.health.nonfinite as old_module\n"
        f"import {LAYOUT_PACKAGE}.framework.callbacks.health.nonfinite as new_module\n"
        "print(old is new, old_module is new_module, old.__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True
    )
    assert result.stdout == (
        f"True True {LAYOUT_PACKAGE}.framework.callbacks.health.nonfinite\n"
    ), result.stdout + result.stderr
    hook = subprocess.run(
        [sys.executable, "-m", f"{LAYOUT_PACKAGE}.framework.doctor", "--static"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
    )
    assert hook.returncode == 0 and "DR011" in hook.stdout, hook.stdout + hook.stderr

    # A second run of the step changes nothing.
    commit_all(project, "update to v0.2.0")
    again = subprocess.run(
        [sys.executable, str(REPO / "hooks" / "migrations.py"), "framework-rooms", LAYOUT_PACKAGE],
        cwd=project,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 0 and "rewritten" not in again.stdout, again.stdout + again.stderr
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


OLD_ROOT_LINE = (
    "  default_root_dir: runs/default   # every output of a run: logs, config, checkpoints/\n"
)


def test_an_updated_projects_runs_default_resumes_and_compares_as_experiment_default(
    release_a, tmp_path
):
    """A project from before run folders: its config names runs/default, its run lies there.

    After the update, its config's line is the template's (null: a folder per fit), and the
    old run is the oldest run of experiment `default`: `--ckpt_path last` resumes it in
    place and `compare runs/default` shows it beside the runs made since.
    """
    default_yaml = "template/configs/default.yaml.jinja"
    new_lines = re.search(
        r"^  default_root_dir: null.*\n(?:^ {30,}#.*\n)*",
        (release_a / default_yaml).read_text(),
        re.M,
    )[0]
    release(release_a, "v0.2.0", [(default_yaml, new_lines, OLD_ROOT_LINE)])
    project = copy_at(release_a, tmp_path / "project", "v0.2.0")  # committed by its task
    release(release_a, "v0.3.0", [(default_yaml, OLD_ROOT_LINE, new_lines)])

    short = ["--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1"]
    short += ["--trainer.accelerator=cpu", "--data.num_workers=0", "--test_after_fit=false"]
    short += ["--trainer.enable_progress_bar=false"]

    def run(*args: str) -> str:
        result = project_command(project, PACKAGE, *args)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout + result.stderr

    install_editable(project)
    try:
        run("fit", "--trainer.max_epochs=1", *short)
        old = project / "runs" / "default"
        assert (old / "checkpoints" / "last.ckpt").is_file()

        update(project)
        assert answers(project)["_commit"] == "v0.3.0" and files_with_conflicts(project) == []
        assert "default_root_dir: null" in (project / "configs" / "default.yaml").read_text()

        resumed = run("fit", "--ckpt_path", "last", "--trainer.max_epochs=2", *short)
        assert f"the newest run of experiment 'default', {old}" in resumed
        assert f"run root        {old}\n" in resumed  # trained on in place
        fresh = run("fit", "--trainer.max_epochs=1", *short)
        (new,) = [path for path in old.iterdir() if (path / "checkpoints").is_dir()]
        assert f"run root        {new}\n" in fresh
        table = run("compare", "runs/default", "--format", "csv").splitlines()
        rows = [line for line in table if line.startswith(("default,", f"{new.name},"))]
        assert len(rows) == 2, table
    finally:
        uninstall(PACKAGE)
