"""`copier update` on real projects: template fixes arrive, the user's code survives.

Each test releases its own throwaway git copy of this checkout: the snapshot is tagged
v0.1.0, the test edits the template as a later release would and tags v0.2.0, ... Copier
updates to the latest tag, exactly as a user's `copier update --trust` does.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
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
# A template-owned file (it starts with HEADER) and one line of it, for fixes and conflicts.
INIT_PY = "template/src/{{package_name}}/__init__.py"
INIT_DOC = (
    '"""The project\'s package: model, data and networks, plus the command line around them."""'
)


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
    """`copier update --trust --defaults --conflict inline` (copier's default) to the latest
    release; `conflict="rej"` for `--conflict rej`."""
    copier.run_update(
        str(project),
        overwrite=True,
        unsafe=True,
        defaults=True,
        quiet=True,
        **{"conflict": "inline", **kwargs},
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
    for folder in (project / "src" / package_name(project), project / "tests"):
        for entry in folder.iterdir():
            if entry.name != "__pycache__":
                assert entry.name in layout, f"docs/layout.md's tree lacks {entry.name}"
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

    fixed_doc = INIT_DOC.replace("them.", "them (fixed).")
    release(
        release_a,
        "v0.2.0",
        [
            (INIT_PY, INIT_DOC, fixed_doc),  # a fix in a template-owned file
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

    assert fixed_doc in (package / "__init__.py").read_text()
    config = (project / "configs" / "default.yaml").read_text()
    assert "log_every_n_steps: 5 " in config, "the template's config change was not merged"
    for path in mine:
        assert f"# my own line in {path.name}\n" in path.read_text(), f"lost the edit of {path}"
    assert "The network itself is injected." in (package / "model.py").read_text()
    assert not list(project.rglob("*.rej"))
    assert files_with_conflicts(project) == []
    assert answers(project)["_commit"] == "v0.2.0"
    commit_all(project, "update to v0.2.0")

    # The updated project is the suite's own template with the release's edits, whose
    # whole suite test_generated_projects runs: here, that the merged project still
    # parses its config, trains and passes the user's tests. Not the race of three fresh
    # interpreters generating the data at once (about 15 s on 2 cores): it reads only
    # data.py, which this release leaves alone, and the defaults render runs it.
    install_editable(project)
    try:
        assert_project_tests_pass(
            project,
            *("-m", "not slow", "-k", "not started_at_once"),
            *("tests/test_model.py", "tests/test_data.py"),
        )
    finally:
        uninstall(PACKAGE)


def test_same_lines_changed_on_both_sides_conflict_inline_and_pre_commit_refuses(
    release_a, tmp_path
):
    project = copy_at(release_a, tmp_path / "project", "v0.1.0")
    init_py = project / "src" / PACKAGE / "__init__.py"
    mine = INIT_DOC.replace("them.", "them, as I need it.")
    init_py.write_text(init_py.read_text().replace(INIT_DOC, mine))
    commit_all(project, "my wording")
    theirs = INIT_DOC.replace("them.", "them (fixed).")
    release(release_a, "v0.2.0", [(INIT_PY, INIT_DOC, theirs)])
    update(project)

    assert not list(project.rglob("*.rej")), "copier left a .rej instead of inline markers"
    assert files_with_conflicts(project) == [f"src/{PACKAGE}/__init__.py"]
    text = init_py.read_text()
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
            f"src/{PACKAGE}/__init__.py",
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
        f"src/{PACKAGE}/__main__.py",
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
# (framework/run/, callbacks/, ...): what projects copied from the main branch then hold.
SIDE_BY_SIDE = "f9f28d7"
# The last commit with the framework copied into the project, in rooms, before it became the
# library copier-lightning-core (core/): what projects copied from the main branch hold.
ROOMS = "0ba4be5"
LAYOUT_PACKAGE = "layout_probe"
KEPT = "framework.orphaned"  # hooks/migrations.py keeps the user's edited framework files here


def old_release_then_this_checkout(template: Path, commit: str) -> Path:
    """A template repository whose v0.1.0 is `commit` (an older layout) and v0.2.0 this checkout.

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
    git(template, "commit", "-q", "-m", f"v0.1.0: the layout of {commit}")
    git(template, "tag", "v0.1.0")
    git(template, "rm", "-rq", ".")  # what the working tree no longer has must not linger
    return snapshot_template(template, tag="v0.2.0")


def migrate_again(project: Path) -> subprocess.CompletedProcess:
    """The migration step run by hand on the committed update: it must change nothing."""
    return subprocess.run(
        [
            sys.executable,
            str(REPO / "hooks" / "migrations.py"),
            "framework-library",
            LAYOUT_PACKAGE,
        ],
        cwd=project,
        capture_output=True,
        text=True,
    )


def assert_only_replaced(before: dict[Path, bytes], rewrites: dict[Path, list[tuple]]) -> None:
    """Each file is byte for byte what it was, but for the (old, new) replacements listed."""
    for path, old_bytes in before.items():
        expected = old_bytes
        for old, new in rewrites.get(path, []):
            assert expected.count(old) == 1, (path, old)
            expected = expected.replace(old, new)
        assert path.read_bytes() == expected, f"{path.name} changed beyond its import lines"


def test_update_from_the_flat_layout_points_the_users_imports_at_the_library(tmp_path, capfd):
    """v0.1.0 had the framework flat in src/<package>/; the user's files, never updated, follow."""
    template = old_release_then_this_checkout(tmp_path / "template", FLAT_RELEASE)
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
    edited_loaders = (package / "loaders.py").read_bytes()
    capfd.readouterr()

    update(project)
    printed = "".join(capfd.readouterr())

    assert answers(project)["_commit"] == "v0.2.0"
    assert not list(project.rglob("*.rej"))
    assert files_with_conflicts(project) == []
    # The flat framework and its tests are gone; the package's __init__.py and __main__.py
    # stay where `python -m <package>` needs them.
    kept = [name for name in flat_owned if (project / name).exists()]
    assert kept == [f"src/{LAYOUT_PACKAGE}/__init__.py", f"src/{LAYOUT_PACKAGE}/__main__.py"]
    for name in ("cli.py", "loaders.py", "resume.py", "framework", "doctor", "health"):
        assert not (package / name).exists(), name

    # The user's files: byte for byte, but for the import lines the migration rewrote.
    library = b"from copier_lightning_core import "
    assert_only_replaced(
        before,
        {
            data_py: [
                (b"from .loaders import LoaderOptions\n", library + b"LoaderOptions\n"),
                (b"from .paths import project_path\n", library + b"project_path\n"),
            ],
            project / "tests" / "test_accuracy.py": [
                (f"from {LAYOUT_PACKAGE}.cli import ".encode(), library)
            ],
            mine_yaml: [
                (
                    f"{LAYOUT_PACKAGE}.lr_scaling.".encode(),
                    b"copier_lightning_core.callbacks.lr_scaling.",
                )
            ],
        },
    )
    text = config.read_text()
    assert "seed_everything: 4321 " in text and text.endswith("# my own line in default.yaml\n")
    class_paths = re.findall(rf"class_path: {LAYOUT_PACKAGE}\.(\w+)\.", text)
    assert set(class_paths) == {"model", "nets", "data"}, class_paths

    # What needs a hand is listed, file and line, once each.
    lines = data_py.read_text().splitlines()
    resume_line = lines.index("from .resume import ResumableDataLoader, run_seed") + 1
    for name in ("ResumableDataLoader", "run_seed"):
        todo = f"TO DO src/{LAYOUT_PACKAGE}/data.py:{resume_line}: {name}: "
        assert printed.count(todo) == 1, printed
    assert "StatefulDataLoader" in printed and "ruff check --fix" in printed
    assert "rewritten tests/test_accuracy.py: line 8\n" in printed, printed
    # Copier deletes a framework file even when the user changed it: the migration keeps it.
    kept_line = f"KEPT src/{LAYOUT_PACKAGE}/loaders.py: you had changed it (+1 -0 lines"
    assert printed.count(kept_line) == 1, printed
    assert "copier_lightning_core/platform/loaders.py" in printed
    assert (project / KEPT / "src" / LAYOUT_PACKAGE / "loaders.py").read_bytes() == edited_loaders
    assert "+# my fix in a framework file\n" in (project / KEPT / "edits.diff").read_text()

    # Idempotent: a second run finds the hand work again and changes nothing.
    commit_all(project, "update to v0.2.0")
    again = migrate_again(project)
    assert again.returncode == 0 and "rewritten" not in again.stdout, again.stdout + again.stderr
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""

    # The library serves the user's files; data.py fails only on the import listed.
    env = {**os.environ, "PYTHONPATH": str(project / "src")}  # not installed: the venv is shared
    probe = (
        "from copier_lightning_core import LoaderOptions, ProjectCLI, project_path\n"
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


def test_update_from_the_side_by_side_framework_points_old_module_paths_at_the_library(
    tmp_path, capfd
):
    """Projects copied before the rooms name `framework.health`: the library's `callbacks.health`."""
    template = old_release_then_this_checkout(tmp_path / "template", SIDE_BY_SIDE)
    project = copy_at(template, tmp_path / "project", "v0.1.0", project_name="Layout Probe")
    package = project / "src" / LAYOUT_PACKAGE
    assert (package / "framework" / "health" / "__init__.py").is_file()  # the old layout
    mine = project / "configs" / "experiments" / "mine.yaml"
    old_path = f"{LAYOUT_PACKAGE}.framework.lr_scaling.LinearLRScaling"
    mine.write_text(f"trainer:\n  callbacks+:\n    - class_path: {old_path}  # my preset\n")
    append_line(package / "model.py", "from .framework.health import NonFiniteGuard  # mine")
    paths_py = package / "framework" / "paths.py"
    append_line(paths_py, "# my fix in paths.py")
    mine_paths_py = paths_py.read_bytes()
    recorded = project / "runs" / "old" / "config.yaml"  # a run's record: the user's data
    recorded.parent.mkdir(parents=True)
    recorded.write_text(f"class_path: {LAYOUT_PACKAGE}.framework.health.NonFiniteGuard\n")
    commit_all(project, "my config, model and fix")
    capfd.readouterr()

    update(project, conflict="rej")
    printed = "".join(capfd.readouterr())

    assert answers(project)["_commit"] == "v0.2.0"
    assert files_with_conflicts(project) == []
    # With `--conflict rej` copier leaves the hunks of the deleted paths.py in paths.py.rej;
    # the migration keeps both beside each other, out of the package.
    assert [path.name for path in project.rglob("*.rej")] == ["paths.py.rej"]
    kept = project / KEPT / "src" / LAYOUT_PACKAGE / "framework" / "paths.py"
    assert kept.read_bytes() == mine_paths_py
    assert "+# my fix in paths.py" in kept.with_name("paths.py.rej").read_text()
    assert f"KEPT src/{LAYOUT_PACKAGE}/framework/paths.py: you had changed it" in printed
    assert "copier_lightning_core/platform/paths.py" in printed
    assert not (package / "framework").exists()
    assert "rewritten configs/experiments/mine.yaml: line 3\n" in printed, printed
    new_path = "copier_lightning_core.callbacks.lr_scaling.LinearLRScaling"
    assert mine.read_text().count(new_path) == 1
    assert (
        "from copier_lightning_core.callbacks.health import NonFiniteGuard  # mine"
        in (package / "model.py").read_text()
    )
    assert f"{LAYOUT_PACKAGE}.framework.health." in recorded.read_text()  # never rewritten
    config = (project / "configs" / "default.yaml").read_text()
    assert "copier_lightning_core.callbacks.health.NonFiniteGuard" in config
    assert f"{LAYOUT_PACKAGE}.framework" not in config

    # The user's code imports; the library reads the run's recorded old path as the very
    # class the migrated config names.
    env = {**os.environ, "PYTHONPATH": str(project / "src")}  # not installed: the venv is shared
    probe = (
        "from copier_lightning_core.platform.old_paths import current_path\n"
        f"from {LAYOUT_PACKAGE}.model import NonFiniteGuard\n"
        f"import {LAYOUT_PACKAGE}.data\n"
        f"print(current_path({old_path!r}), NonFiniteGuard.__module__)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], cwd=project, env=env, capture_output=True, text=True
    )
    assert result.stdout == (f"{new_path} copier_lightning_core.callbacks.health.nonfinite\n"), (
        result.stdout + result.stderr
    )

    # A second run of the step changes nothing.
    commit_all(project, "update to v0.2.0")
    again = migrate_again(project)
    assert again.returncode == 0 and "rewritten" not in again.stdout, again.stdout + again.stderr
    assert git(project, "status", "--porcelain", "--untracked-files=all") == ""


ROOMS_PACKAGE = "library_probe"
# Runs short enough for CI's 2 cores: 2 epochs of 6 batches, a last.ckpt every 2 steps.
SHORT_FIT = [
    "--trainer.max_epochs=2",
    "--trainer.limit_train_batches=6",
    "--trainer.limit_val_batches=2",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--test_after_fit=false",
]


def load_checkpoint(path: Path) -> dict:
    import torch  # here, not at the top: the module's other tests do without its import time

    return torch.load(path, map_location="cpu", weights_only=True)


def kill_mid_epoch(project: Path, folder: Path) -> Path:
    """A fit of SHORT_FIT killed with SIGKILL before step 9, the 3rd batch of its 2nd epoch
    (last.ckpt holds step 8): the whole process group, DataLoader workers too, as a crash
    or a scheduler's `kill -9` leaves it. Returns its run root."""
    runs = project / "runs" / "default"
    earlier = set(runs.iterdir())
    marker, log = folder / "paused", folder / "killed.log"
    pauser = {  # the library's: the old project's CLI takes any class path it is given
        "class_path": "copier_lightning_core.testing.interrupts.PauseAt",
        "init_args": {"point": "train_batch", "step": 9, "marker": str(marker)},
    }
    command = [sys.executable, "-m", ROOMS_PACKAGE, "fit", *SHORT_FIT]
    with log.open("w") as output:
        process = subprocess.Popen(
            [*command, f"--trainer.callbacks+={json.dumps(pauser)}"],
            cwd=project,
            env={**os.environ, "WANDB_MODE": "offline"},
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, as a scheduler's job has
        )
        deadline = time.monotonic() + 300
        try:
            while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert marker.exists(), f"the run did not reach step 9:\n{log.read_text()[-3000:]}"
    (root,) = set(runs.iterdir()) - earlier
    return root


@pytest.mark.slow
def test_update_from_the_copied_framework_to_the_library_keeps_the_old_runs_usable(tmp_path, capfd):
    """The copied framework (in rooms, as the main branch had it) becomes the library.

    Before the update the project trains one run to the end and has one killed with
    `kill -9` mid-epoch; after it, with framework/ gone and the user's files pointing at
    copier_lightning_core, the old checkpoints validate and export, and the killed run
    resumes to the end bit-exactly as the finished one.
    """
    template = old_release_then_this_checkout(tmp_path / "template", ROOMS)
    project = copy_at(template, tmp_path / "project", "v0.1.0", project_name="Library Probe")
    package = project / "src" / ROOMS_PACKAGE
    assert (package / "framework" / "callbacks" / "resume.py").is_file()  # the old layout

    # The user's edits: a last.ckpt every 2 steps (a mid-epoch resume point) in their config,
    # and a fix in a framework file and in a framework test.
    config = project / "configs" / "default.yaml"
    every_100 = "every_n_train_steps: 100 "
    config.write_text(config.read_text().replace(every_100, "every_n_train_steps: 2   "))
    append_line(package / "framework" / "platform" / "paths.py", "# my fix in paths.py")
    append_line(project / "tests" / "framework" / "toy.py", "# my fix in toy.py")
    commit_all(project, "my config, my fixes")
    owners = [
        package / "model.py",
        package / "data.py",
        package / "nets.py",
        *(
            project / "tests" / name
            for name in ("test_model.py", "test_data.py", "test_accuracy.py")
        ),
    ]
    before = {path: path.read_bytes() for path in owners}
    edited = {
        name: (project / name).read_bytes()
        for name in (f"src/{ROOMS_PACKAGE}/framework/platform/paths.py", "tests/framework/toy.py")
    }

    def run(*args: str) -> str:
        result = project_command(project, ROOMS_PACKAGE, *args)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        return result.stdout + result.stderr

    install_editable(project)  # the old project, its framework inside it
    try:
        finished_output = run("fit", *SHORT_FIT)
        finished = Path(re.search(r"^run root +(\S+)$", finished_output, re.M)[1])
        best = Path(re.search(r"^best checkpoint (\S+)$", finished_output, re.M)[1])
        killed = kill_mid_epoch(project, tmp_path)
        assert load_checkpoint(killed / "checkpoints" / "last.ckpt")["global_step"] == 8
        capfd.readouterr()

        update(project)
        printed = "".join(capfd.readouterr())

        assert answers(project)["_commit"] == "v0.2.0"
        assert files_with_conflicts(project) == [] and not list(project.rglob("*.rej"))
        assert (
            not (package / "framework").exists() and not (project / "tests" / "framework").exists()
        )
        library = b"from copier_lightning_core import "
        assert_only_replaced(
            before,
            {
                package / "model.py": [(b"from .framework import ", library)],
                package / "data.py": [(b"from .framework import ", library)],
                **{
                    project / "tests" / name: [
                        (f"from {ROOMS_PACKAGE}.framework import ".encode(), library)
                    ]
                    for name in ("test_data.py", "test_accuracy.py")
                },
                project / "tests" / "test_model.py": [
                    (f"from {ROOMS_PACKAGE}.framework import ".encode(), library),
                    (
                        f'"{ROOMS_PACKAGE}.framework.callbacks.'.encode(),
                        b'"copier_lightning_core.callbacks.',
                    ),
                ],
            },
        )
        for name in ("model.py", "data.py", "test_model.py", "test_data.py", "test_accuracy.py"):
            assert re.search(rf"^  rewritten \S*{name}: line", printed, re.M), (name, printed)
        configs = "".join(path.read_text() for path in (project / "configs").rglob("*.yaml"))
        assert f"{ROOMS_PACKAGE}.framework" not in configs
        text = config.read_text()
        assert "every_n_train_steps: 2 " in text  # the user's edit, merged
        assert "class_path: copier_lightning_core.callbacks.resume.ResumeState" in text
        # The user's edits of framework files: reported, kept whole, and as a diff.
        for name, content in edited.items():
            assert printed.count(f"KEPT {name}: you had changed it (+1 -0 lines") == 1, printed
            assert (project / KEPT / name).read_bytes() == content
        assert "copier_lightning_core/platform/paths.py" in printed
        diff = (project / KEPT / "edits.diff").read_text()
        assert "+# my fix in paths.py\n" in diff and "+# my fix in toy.py\n" in diff
        commit_all(project, "update to v0.2.0")

        install_editable(project)  # the updated project: pyproject.toml now names the library
        validated = run(
            "validate", "--ckpt_path", str(best), "--trainer.accelerator=cpu",
            "--trainer.limit_val_batches=2",
        )  # fmt: skip
        assert "val/loss" in validated
        resumed = run("fit", "--ckpt_path", "last", *SHORT_FIT)
        assert f"run root        {killed}\n" in resumed  # the killed run, trained on in place
        from copier_lightning_core.tools.determinism import compare_checkpoints

        difference = compare_checkpoints(
            load_checkpoint(finished / "checkpoints" / "last.ckpt"),
            load_checkpoint(killed / "checkpoints" / "last.ckpt"),
        )
        assert difference is None, f"the resumed run differs from the finished one at {difference}"
        run("export", str(best), "--output", str(tmp_path / "export"))
        assert (tmp_path / "export" / f"{best.stem}.safetensors").is_file()
        assert (tmp_path / "export" / f"{best.stem}.onnx").is_file()
    finally:
        uninstall(ROOMS_PACKAGE)


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
