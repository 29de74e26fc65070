"""The generated project follows its ecosystem's conventions and keeps itself current.

Each test runs the real tool on a render: mypy, nox, mkdocs, the GitHub workflow schema,
zizmor, the template-update script against a throwaway tagged template, and the template's
own release.sh and venv.sh (the latter with a fake python, not a real install).
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from nox.project import load_toml
from packaging.requirements import Requirement  # tomllib is 3.11+, the suite runs on 3.10 too

from conftest import REPO
from scaffold import GIT_IDENTITY, git, package_name, snapshot_template
from test_update import commit_all, copy_at, release

BIN = Path(sys.executable).parent  # copier, mypy, zizmor, check-jsonschema of this venv
ENV = {**os.environ, **GIT_IDENTITY, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
SESSIONS = {"tests", "lint", "typecheck", "docs"}
# A template-owned file and a line of it that a later release may reword.
MAIN_PY = "template/src/{{package_name}}/__main__.py"
MAIN_DOC = "the project's command line, run by copier-lightning-core."


def run(cwd: Path, *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        command, cwd=cwd, env=env or ENV, capture_output=True, text=True, check=False
    )


def passes(cwd: Path, *command: str) -> str:
    result = run(cwd, *command)
    assert result.returncode == 0, f"{' '.join(command)}:\n{result.stdout}\n{result.stderr}"
    return result.stdout


def pyproject(project: Path) -> dict:
    return load_toml(project / "pyproject.toml")


# --- pyproject.toml: groups, pytest, ruff, mypy, version ---------------------------------


def flattened(groups: dict, name: str) -> set[str]:
    """A PEP 735 group's requirements, include-group entries expanded."""
    out: set[str] = set()
    for item in groups[name]:
        out |= flattened(groups, item["include-group"]) if isinstance(item, dict) else {item}
    return out


def test_dependency_groups_hold_the_tools_and_the_dev_extra_matches_them(rendered):
    config = pyproject(rendered("defaults"))
    groups = config["dependency-groups"]
    assert {"dev", "test", "docs"} <= set(groups)
    extra = set(config["project"]["optional-dependencies"]["dev"])
    package = config["project"]["name"]
    # `pip install -e ".[dev]"` (any pip) and `pip install --group dev` give the same tools.
    assert extra - {f"{package}[export,sweep,parquet]"} == flattened(groups, "dev")


def test_pytest_is_strict_and_ruff_reads_the_target_from_requires_python(rendered):
    config = pyproject(rendered("defaults"))
    pytest_options = config["tool"]["pytest"]["ini_options"]
    assert pytest_options["minversion"] == "8.0"
    assert {"--strict-config", "--strict-markers"} <= set(pytest_options["addopts"].split())
    assert pytest_options["xfail_strict"] is True and pytest_options["log_level"]
    assert "target-version" not in config["tool"]["ruff"]


def test_the_project_version_is_its_own_not_the_templates_tag():
    text = (REPO / "template" / "pyproject.toml.jinja").read_text()
    assert 'version = "0.1.0"\n' in text and "dynamic" not in text and "_commit" not in text


def test_mypy_is_clean_on_what_it_is_given(rendered, mypy_cache):
    # On the lowest Python the template offers, as the library's own check runs: the two
    # share the analysis of torch and Lightning (mypy_cache), the cost of either run.
    project = rendered("py310")
    config = pyproject(project)["tool"]["mypy"]
    assert config["python_version"] == "3.10"
    assert config["files"] == [f"src/{package_name(project)}/__main__.py"]
    # Strict, with the error codes the Scientific Python development guide turns on.
    assert config["strict"] and config["warn_unreachable"]
    assert set(config["enable_error_code"]) == {
        "ignore-without-code",
        "redundant-expr",
        "truthy-bool",
    }
    out = passes(project, sys.executable, "-m", "mypy", "--cache-dir", str(mypy_cache))
    assert out.startswith("Success: no issues found")


# --- nox, docs ---------------------------------------------------------------------------


@pytest.mark.parametrize("answers", ["defaults", "no_ci"])
def test_nox_lists_the_sessions_ci_runs(rendered, answers):
    project = rendered(answers)
    listed = yaml.safe_load(passes(project, sys.executable, "-m", "nox", "-l", "--json"))
    assert {session["name"] for session in listed} == SESSIONS  # what a bare `nox` runs
    # The lowest versions are there, on demand only (the guide's `default=False`).
    assert "- lowest ->" in passes(project, sys.executable, "-m", "nox", "-l")
    assert (project / "noxfile.py").stat().st_mode & 0o100  # `./noxfile.py` runs it (uv)
    noxfile = (project / "noxfile.py").read_text()
    assert ("zizmor" in noxfile) == (answers == "defaults")  # only where there are workflows


def test_ci_runs_the_contract_on_the_lowest_version_each_bound_allows(rendered):
    # Lightning 2.5 was allowed while model.py called a 2.6.1 API: a bound is checked only
    # where something installs it. The pins come from pyproject.toml, so a bound raised
    # there moves the job with it.
    project = rendered("all_loggers")
    assert "- lowest ->" in passes(project, sys.executable, "-m", "nox", "-l")
    workflow = yaml.safe_load((project / ".github" / "workflows" / "ci.yml").read_text())
    steps = workflow["jobs"]["lowest"]["steps"]
    assert any(step.get("run") == "python -m nox -s lowest" for step in steps), steps
    oldest = pyproject(project)["project"]["requires-python"].removeprefix(">=")
    setup = [step for step in steps if step.get("uses", "").startswith("actions/setup-python@")]
    assert [step["with"]["python-version"] for step in setup] == [oldest]
    read = (
        "import json, runpy; print(json.dumps(runpy.run_path('noxfile.py')['lowest_versions']()))"
    )
    pins = {
        Requirement(pin).name: Requirement(pin)
        for pin in json.loads(passes(project, sys.executable, "-c", read))
    }
    config = pyproject(project)
    wanted = [*config["project"]["dependencies"], *flattened(config["dependency-groups"], "test")]
    for extra in ("export", "sweep", "parquet"):
        wanted += config["project"]["optional-dependencies"][extra]
    for requirement in map(Requirement, wanted):
        if requirement.name == "torch":  # the environment's own build is kept
            assert "torch" not in pins
            continue
        pin = pins.pop(requirement.name)
        (specifier,) = pin.specifier
        assert specifier.operator == "==" and requirement.specifier.contains(specifier.version)
        lowest = (f">={specifier.version}", f"~={specifier.version}")
        assert any(bound in str(requirement.specifier) for bound in lowest), (pin, requirement)
    assert not pins, f"pinned but not asked for: {pins}"


def test_the_docs_site_builds_strictly_from_the_projects_own_files(rendered, tmp_path):
    project = rendered("defaults")
    site = tmp_path / "site"
    env = {**ENV, "NO_MKDOCS_2_WARNING": "1"}
    result = run(
        project, sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(site), env=env
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Default Probe" in (site / "index.html").read_text()  # README.md
    assert (site / "CHECKLIST" / "index.html").is_file()
    presets = {path.stem for path in (project / "configs" / "presets").glob("*.yaml")}
    assert presets and {p.name for p in (site / "presets").iterdir() if p.is_dir()} == presets
    assert not (site / "hooks.py").exists()


# --- GitHub: workflows, dependabot, zizmor -------------------------------------------------


def test_every_workflow_is_schema_valid_pinned_and_zizmor_clean(rendered):
    project = rendered("defaults")
    github = project / ".github"
    workflows = sorted((github / "workflows").glob("*.yml"))
    assert {path.name for path in workflows} == {"ci.yml", "template-update.yml"}
    check = [sys.executable, "-m", "check_jsonschema", "--builtin-schema"]
    passes(project, *check, "vendor.github-workflows", *map(str, workflows))
    passes(project, *check, "vendor.dependabot", str(github / "dependabot.yml"))
    passes(project, "zizmor", "--offline", ".")  # a binary: ENV puts it on PATH
    for path in workflows:
        workflow = yaml.safe_load(path.read_text())
        assert "workflow_dispatch" in workflow[True], f"{path.name} cannot be run on demand"
        uses = [s["uses"] for job in workflow["jobs"].values() for s in job["steps"] if "uses" in s]
        assert all(re.fullmatch(r"[\w-]+/[\w-]+@[0-9a-f]{40}", u) for u in uses), uses
    ecosystems = yaml.safe_load((github / "dependabot.yml").read_text())["updates"]
    assert {entry["package-ecosystem"] for entry in ecosystems} == {"github-actions", "pip"}


def test_the_template_update_workflow_runs_no_code_of_the_update_with_a_write_token(rendered):
    path = rendered("defaults") / ".github" / "workflows" / "template-update.yml"
    workflow = yaml.safe_load(path.read_text())
    assert workflow[True]["schedule"] and workflow["permissions"] == {}
    jobs = workflow["jobs"]
    runs = {name: "\n".join(s.get("run", "") for s in job["steps"]) for name, job in jobs.items()}
    # The template's code (copier update --trust) and the project's (the tests): read-only.
    (update,) = [name for name, run in runs.items() if "scripts/template_update.sh" in run]
    assert jobs[update]["permissions"] == {"contents": "read"}
    assert "nox -s tests" in runs[update]
    # A job that may write runs nothing of the project or template: no interpreter, no
    # script of the tree, no git hook; it checks out the default branch, not the update.
    writers = [name for name, job in jobs.items() if "write" in job["permissions"].values()]
    assert writers and all(jobs[name]["needs"] == update for name in writers)
    for name in writers:
        job, run = jobs[name], runs[name].replace("\\\n", " ")  # continued lines joined
        assert not re.search(r"python|nox|pip |copier|pre-commit|bash |scripts/|\./|make ", run)
        lines = [line for line in run.splitlines() if not line.strip().startswith("echo ")]
        git = [line for line in lines if re.search(r"\bgit\b.*\b(push|commit)\b", line)]
        assert len(git) == 2 and all("--no-verify" in line for line in git), git
        uses = {step["uses"].split("@")[0]: step for step in job["steps"] if "uses" in step}
        assert set(uses) <= {"actions/checkout", "actions/download-artifact"}, set(uses)
        assert uses["actions/checkout"]["with"] == {"persist-credentials": False}
    assert not (rendered("no_ci") / ".github").exists()


def test_the_template_update_token_reaches_only_the_job_that_runs_no_code(rendered):
    path = rendered("defaults") / ".github" / "workflows" / "template-update.yml"
    workflow = yaml.safe_load(path.read_text())
    jobs = workflow["jobs"]
    assert "secrets" not in yaml.safe_dump({k: v for k, v in workflow.items() if k != "jobs"})
    for name, job in jobs.items():
        text = yaml.safe_dump(job)
        runs_code = re.search(r"pip install|pytest|python -m|nox |template_update\.sh", text)
        if runs_code:  # the update job: read-only, no secret, no token but its own read one
            assert job["permissions"] == {"contents": "read"}, name
            assert "secrets." not in text and "github.token" not in text, name
        else:
            assert "write" in job["permissions"].values(), name
    (writer,) = [job for job in jobs.values() if "secrets.TEMPLATE_UPDATE_TOKEN" in str(job)]
    # The secret is read in the one step that pushes, from an environment of its own.
    assert writer["environment"] == "template-update"
    (step,) = [s for s in writer["steps"] if "secrets." in str(s)]
    assert step["env"]["UPDATE_TOKEN"] == "${{ secrets.TEMPLATE_UPDATE_TOKEN }}"
    assert "secrets." not in step["run"] and "${{" not in step["run"]


FAKE_GH = """#!/bin/sh
# gh, offline: logs its token and arguments; keeps the pull request's body; downloads
# the run's artifact from $FAKE_ARTIFACT.
echo "GH_TOKEN=$GH_TOKEN $*" >> "$FAKE_GH_LOG"
case "$1 $2" in
  "pr view") exit 1 ;;
  "pr create"|"pr edit") while [ "$1" != --body-file ]; do shift; done; cp "$2" "$FAKE_GH_BODY" ;;
  "run download") mkdir -p "$7" && cp "$FAKE_ARTIFACT"/* "$7"/ ;;
esac
"""


@pytest.fixture
def pull_request_step(rendered, tmp_path: Path):
    """The template-update workflow's pushing step, run with bash as a runner runs it: on a
    clone of a local repository (origin), with the update's patch as its artifact and `gh`
    faked. -> run(token) giving (result, what origin's branch holds, the body, gh's log)."""
    path = rendered("defaults") / ".github" / "workflows" / "template-update.yml"
    job = yaml.safe_load(path.read_text())["jobs"]["pull-request"]
    (step,) = [s for s in job["steps"] if "run" in s]
    origin, work = tmp_path / "origin.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(origin))
    git(tmp_path, "clone", "-q", str(origin), str(work))
    files = {"README.md": "# Probe\n", ".github/workflows/ci.yml": "name: CI\n"}
    for name, text in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text)
    commit_all(work, "the project")
    git(work, "push", "-q", "origin", "HEAD")
    # The update job's artifact: a patch changing a workflow and another file.
    artifact = tmp_path / "runner" / "update"
    artifact.mkdir(parents=True)
    for name in files:
        (work / name).write_text(files[name] + "updated\n")
    git(work, "add", "--all")
    (artifact / "update.patch").write_text(git(work, "diff", "--cached", "--binary"))
    (artifact / "pull-request.md").write_text("Updates the project from its template.\n")
    git(work, "reset", "-q", "--hard")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "gh").write_text(FAKE_GH)
    (bin_dir / "gh").chmod(0o755)
    (tmp_path / "script.sh").write_text(step["run"])

    def run_step(token: str) -> tuple[subprocess.CompletedProcess, dict, str, str]:
        env = {
            **ENV,
            **{key: str(value) for key, value in job["env"].items()},
            "PATH": f"{bin_dir}{os.pathsep}{ENV['PATH']}",
            "RUNNER_TEMP": str(tmp_path / "runner"),
            "GITHUB_RUN_ID": "42",
            "UPDATE_TOKEN": token,
            "WORKFLOW_TOKEN": "workflow-token",
            "FAKE_GH_LOG": str(tmp_path / "gh.log"),
            "FAKE_GH_BODY": str(tmp_path / "body.md"),
            "FAKE_ARTIFACT": str(artifact),
        }
        shell = ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(tmp_path / "script.sh")]
        result = run(work, *shell, env=env)
        branch = job["env"]["BRANCH"]
        pushed = {name: git(origin, "show", f"{branch}:{name}") for name in files}
        return result, pushed, (tmp_path / "body.md").read_text(), (tmp_path / "gh.log").read_text()

    return run_step


def test_template_update_pushes_workflow_changes_with_the_token(pull_request_step):
    result, pushed, body, gh_log = pull_request_step("a-user-token")
    assert result.returncode == 0, result.stdout + result.stderr
    assert pushed == {
        "README.md": "# Probe\nupdated\n",
        ".github/workflows/ci.yml": "name: CI\nupdated\n",
    }
    assert "by hand" not in body
    assert "GH_TOKEN=a-user-token pr create" in gh_log and "workflow-token" not in gh_log


def test_template_update_without_the_token_leaves_workflows_out_and_says_how(
    pull_request_step, tmp_path
):
    result, pushed, body, gh_log = pull_request_step("")
    assert result.returncode == 0, result.stdout + result.stderr
    # GitHub would refuse a push of the workflow with this token: the rest is pushed.
    assert pushed == {"README.md": "# Probe\nupdated\n", ".github/workflows/ci.yml": "name: CI\n"}
    assert "GH_TOKEN=workflow-token pr create" in gh_log
    assert "## Workflow files to push by hand" in body and "`.github/workflows/ci.yml`" in body
    assert "TEMPLATE_UPDATE_TOKEN" in body and "::warning::" in result.stdout
    # The body's commands, run by the user in a clone of their own, push the workflow.
    commands = body.split("```bash\n")[1].split("```")[0]
    user = tmp_path / "user"
    git(tmp_path, "clone", "-q", str(tmp_path / "origin.git"), str(user))
    env = {
        **ENV,
        "PATH": f"{tmp_path / 'bin'}{os.pathsep}{ENV['PATH']}",
        "FAKE_GH_LOG": str(tmp_path / "gh.log"),
        "FAKE_GH_BODY": str(tmp_path / "body.md"),
        "FAKE_ARTIFACT": str(tmp_path / "runner" / "update"),
    }
    done = run(user, "bash", "-euo", "pipefail", "-c", commands, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    workflow = git(tmp_path / "origin.git", "show", "template-update:.github/workflows/ci.yml")
    assert workflow == "name: CI\nupdated\n"


def test_the_zizmor_hook_installs_from_pypi_and_passes(rendered, tmp_path):
    project = rendered("defaults")
    hooks = yaml.safe_load((project / ".pre-commit-config.yaml").read_text())["repos"][0]["hooks"]
    zizmor = next(hook for hook in hooks if hook["id"] == "zizmor")
    assert zizmor["language"] == "python" and zizmor["additional_dependencies"][0].startswith(
        "zizmor=="
    )
    env = {**ENV, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit")}
    result = run(
        project, sys.executable, "-m", "pre_commit", "run", "zizmor", "--all-files", env=env
    )
    assert result.returncode == 0 and "Passed" in result.stdout, result.stdout + result.stderr
    no_ci = (rendered("no_ci") / ".pre-commit-config.yaml").read_text()
    assert "zizmor" not in no_ci


# --- scripts/template_update.sh against a throwaway tagged template ---------------------


def template_update(project: Path) -> subprocess.CompletedProcess:
    return run(project, "bash", "scripts/template_update.sh", str(project.parent / "pr.md"))


@pytest.fixture
def project_at_v010(tmp_path: Path) -> tuple[Path, Path]:
    template = snapshot_template(tmp_path / "template")
    return template, copy_at(template, tmp_path / "project", "v0.1.0")


def test_template_update_brings_a_release_and_describes_it(project_at_v010):
    template, project = project_at_v010
    first = template_update(project)
    assert first.returncode == 0 and "Already up to date" in first.stderr, first.stderr
    assert git(project, "status", "--porcelain") == ""

    fixed = MAIN_DOC.replace("core.", "core (fixed).")
    entry = "- **New:** paths expand `~`."
    release(
        template,
        "v0.2.0",
        [
            (MAIN_PY, MAIN_DOC, fixed),
            ("CHANGELOG.md", "## Unreleased\n", f"## Unreleased\n\n{entry}\n"),
        ],
    )
    result = template_update(project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert fixed in (project / "src" / "update_probe" / "__main__.py").read_text()
    description = (project.parent / "pr.md").read_text()
    assert "v0.1.0 to v0.2.0" in description
    assert entry in description and "src/update_probe/__main__.py" in description


def test_template_update_fails_naming_the_conflicting_file(project_at_v010):
    template, project = project_at_v010
    main_py = project / "src" / "update_probe" / "__main__.py"
    main_py.write_text(
        main_py.read_text().replace(MAIN_DOC, MAIN_DOC.replace("core.", "core, mine."))
    )
    commit_all(project, "my wording")
    release(template, "v0.2.0", [(MAIN_PY, MAIN_DOC, MAIN_DOC.replace("core.", "core, theirs."))])
    result = template_update(project)
    assert result.returncode == 1
    assert "conflicts with local edits" in result.stderr
    assert "src/update_probe/__main__.py" in result.stderr


# --- scripts/release.sh in a throwaway copy of this checkout ----------------------------

ENTRY = """- **New:** a thing.
- **On update:** rewrites a file.
- **Migration:** none.
- **Action:** none.
"""


def throwaway_template(tmp_path: Path, unreleased: str = "") -> Path:
    """A copy of this checkout, released as v0.1.0, with `unreleased` as its next entry."""
    repo = snapshot_template(tmp_path / "template")
    (repo / "CHANGELOG.md").write_text(
        f"# Changelog\n\n## Unreleased\n\n{unreleased}\n## v0.1.0\n\nThe first release.\n"
    )
    git(repo, "commit", "-qam", "the next entry")
    return repo


def release_sh(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return run(repo, "bash", "scripts/release.sh", *args)


def test_release_moves_unreleased_under_the_version_and_tags_it(tmp_path):
    refused = release_sh(throwaway_template(tmp_path / "empty"), "0.2.0", "--skip-tests")
    assert refused.returncode == 1 and "nothing to release" in refused.stderr
    repo = throwaway_template(tmp_path, ENTRY)

    result = release_sh(repo, "0.2.0", "--skip-tests")
    assert result.returncode == 0, result.stderr
    assert f"## Unreleased\n\n## v0.2.0\n\n{ENTRY}" in (repo / "CHANGELOG.md").read_text()
    assert git(repo, "cat-file", "-t", "v0.2.0").strip() == "tag"  # annotated
    assert "**Migration:** none." in git(repo, "tag", "-l", "--format=%(contents)", "v0.2.0")
    assert git(repo, "status", "--porcelain") == ""


@pytest.mark.parametrize(
    ("version", "entry", "dirty", "message"),
    [
        ("0.1.0", ENTRY, False, "tag v0.1.0 exists already"),
        ("v0.2.0", ENTRY, False, "not a PEP 440 version"),
        ("0.2.0", ENTRY, True, "uncommitted changes"),
        ("0.2.0", ENTRY.replace("Migration", "Migrations"), False, '"**Migration:**" part'),
    ],
    ids=["tag-exists", "leading-v", "dirty-tree", "entry-misses-a-part"],
)
def test_release_refuses(tmp_path, version, entry, dirty, message):
    repo = throwaway_template(tmp_path, entry)
    if dirty:
        (repo / "README.md").write_text("edited\n")
    result = release_sh(repo, version, "--skip-tests")
    assert result.returncode == 1 and message in result.stderr, result.stderr
    assert git(repo, "tag", "-l", "v0.2.0") == ""


# --- scripts/venv.sh: where torch comes from ---------------------------------------------

FAKE_PYTHON = """#!/bin/sh
# A python3 / .venv/bin/python stand-in: logs its arguments, installs nothing.
echo "$*" >> "$FAKE_LOG"
case "$*" in
  "-m venv"*)
    mkdir -p .venv/bin && cp "$0" .venv/bin/python
    case "$*" in *--system-site-packages*) touch .venv/system-site ;; esac ;;
  "-c import torch")  [ -n "$SYSTEM_TORCH" ] ;;
  "-c import torch; print(torch.__version__)")
    [ -e .venv/system-site ] && echo 2.13.0 ;;
  "-m pip config list")  # a long list: more than a pipe holds after the match
    [ -n "$PIP_INDEX_URL" ] && echo ":env:.index-url='$PIP_INDEX_URL'"
    seq -f "global.setting-%g='x'" 50000 ;;
  "-m pip index versions torch")  # as pip prints it: newest first, CUDA builds unmarked
    echo "torch (2.14.1)"
    echo "Available versions: 2.14.1, ${CPU_WHEEL:+$CPU_WHEEL, }2.13.0, 2.12.1" ;;
esac
"""
CPU_INDEX = "-m pip install -q torch --index-url https://download.pytorch.org/whl/cpu"
MIRROR = {"PIP_INDEX_URL": "http://mirror/simple"}


@pytest.mark.parametrize(
    ("gpu", "env", "says", "torch_install"),
    [
        (False, {"SYSTEM_TORCH": "1"}, "torch: 2.13.0, already installed", None),
        (
            False,
            {**MIRROR, "CPU_WHEEL": "2.13.0+cpu"},
            "the CPU build 2.13.0+cpu (no NVIDIA GPU here), from the package index pip is",
            "-m pip install -q torch==2.13.0+cpu",
        ),
        (False, MIRROR, "and the package index pip is configured with offers no +cpu", CPU_INDEX),
        (
            True,
            {**MIRROR, "CPU_WHEEL": "2.13.0+cpu"},
            "from the package index pip is configured",
            "-m pip install -q torch",
        ),
        (False, {}, "the CPU build", CPU_INDEX),
        (True, {}, "the CPU build", CPU_INDEX),
    ],
    ids=[
        "installed",
        "no-gpu-cpu-wheel-on-the-index",
        "no-gpu-no-cpu-wheel-on-the-index",
        "gpu-configured-index",
        "nothing-configured",
        "gpu-nothing-configured",
    ],
)
def test_venv_sh_takes_torch_from_what_is_there_first(tmp_path, gpu, env, says, torch_install):
    # The only GPU venv.sh sees is the fake nvidia-smi; a host's own driver would hide that.
    if not gpu and (Path("/proc/driver/nvidia").exists() or Path("/usr/bin/nvidia-smi").exists()):
        pytest.skip("this machine has an NVIDIA driver: venv.sh sees a GPU whatever the test fakes")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {"python3": FAKE_PYTHON, **({"nvidia-smi": "#!/bin/sh\n"} if gpu else {})}
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    log = tmp_path / "log"
    result = run(
        tmp_path,
        "bash", "-c", f"set -euo pipefail; source {REPO / 'scripts' / 'venv.sh'}",  # as test.sh
        env={"PATH": f"{bin_dir}:/usr/bin:/bin", "FAKE_LOG": str(log), "HOME": str(tmp_path), **env},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stdout.splitlines() if line.startswith("torch:")]
    assert len(said) == 1 and says in said[0], result.stdout
    calls = log.read_text().splitlines()
    installs = [call for call in calls if call.startswith("-m pip install -q torch")]
    assert installs == ([torch_install] if torch_install else [])
    assert ("--system-site-packages" in calls[1]) == ("SYSTEM_TORCH" in env)
    # PyPI holds no +cpu build: asking it what it offers would only cost a round trip.
    asked = "-m pip index versions torch" in calls
    assert asked == ("PIP_INDEX_URL" in env and not gpu and "SYSTEM_TORCH" not in env)
