"""copier.yml: defaults derive sensibly, and every validator refuses a bad answer with
a message saying what to type instead, before anything is written."""

import subprocess
import sys

import pytest
import yaml
from jinja2 import FileSystemLoader
from jinja2.sandbox import SandboxedEnvironment

from conftest import REPO, render


@pytest.mark.parametrize(
    ("project_name", "expected"),
    [
        ("Bar Probe", "bar_probe"),
        ("  My--Cool Project!! ", "my_cool_project"),
        ("ResNet 50 v2", "resnet_50_v2"),
    ],
)
def test_package_name_derives_from_project_name(template, tmp_path, project_name, expected):
    project = render(template, tmp_path / "p", {"project_name": project_name}, skip_tasks=True)
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert answers["package_name"] == expected
    assert (project / "src" / expected / "__main__.py").is_file()


BAD_ANSWERS = [
    ({"project_name": "   "}, "project_name must not be empty"),
    ({"package_name": "optuna"}, 'package_name "optuna" is a module the project installs (from'),
    ({"package_name": "yaml"}, "(from the package PyYAML)"),  # lightning's dependency
    ({"package_name": "json"}, 'package_name "json" is a module of Python\'s standard library'),
    ({"package_name": "class"}, 'package_name "class" is a Python keyword'),
    ({"package_name": "toy"}, "the project's own tests/framework/toy.py"),  # older releases
    ({"package_name": "copier_lightning_core"}, "(from the package copier-lightning-core)"),
    ({"package_name": "1model"}, "not a lower-case Python identifier"),
    ({"package_name": "Bad-Name"}, "not a lower-case Python identifier"),
    ({"package_name": "_"}, 'package_name "_" starts or ends with "_"'),
    ({"package_name": "__init__"}, 'package_name "__init__" starts or ends with "_"'),
    ({"package_name": "probe_"}, 'package_name "probe_" starts or ends with "_"'),
    ({"author_email": "nobody"}, 'author_email "nobody" is not an e-mail address'),
    ({"loggers": []}, "Choose at least one logger"),
    ({"loggers": ["comet"]}, "comet"),
    ({"package_name": "mlflow"}, '"mlflow" is a module the project installs (from'),
    ({"python_version": "3.9"}, "'3.9' is not in"),
    ({"license": "GPL"}, "'GPL' is not in"),
    ({"ci": "gitlab"}, "'gitlab' is not in"),
    ({"copyright_year": "20x6"}, 'copyright_year "20x6" is not a year'),
    ({"project_name": "Bar\nProbe"}, "project_name holds a control character"),
    ({"project_name": "P" * 300}, "project_name is 300 characters long"),
    ({"package_name": "p" * 61}, "package_name is 61 characters long"),
    ({"author_name": "Ada\nLovelace"}, "author_name holds a control character"),
    ({"author_name": "Ada\tLovelace"}, "author_name holds a control character"),
    ({"author_name": " "}, "author_name must not be empty"),
    ({"description": "two\nlines"}, "description holds a control character"),
    ({"description": "d" * 201}, "description is 201 characters long"),
]


@pytest.mark.parametrize(("answers", "message"), BAD_ANSWERS, ids=lambda v: str(v)[:40])
def test_bad_answer_is_refused_and_nothing_is_written(template, tmp_path, answers, message):
    dest = tmp_path / "p"
    with pytest.raises(ValueError, match=None) as error:
        render(template, dest, {"project_name": "Probe", **answers})
    assert message in str(error.value)
    assert not dest.exists() or not any(dest.iterdir())


def test_every_module_the_project_installs_is_a_refused_package_name(rendered):
    # Every top-level module of every distribution the rendered pyproject.toml installs
    # (dependencies, extras, dependency groups, and theirs), the standard library, keywords.
    pyproject = rendered("all_loggers") / "pyproject.toml"
    result = subprocess.run(
        [sys.executable, "scripts/reserved_names.py", "--check", "--pyproject", str(pyproject)],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    # copier.yml refuses each name, saying why (BAD_ANSWERS checks a few through copier).
    validate = package_name_validator()
    lines = (REPO / "includes" / "reserved_names.txt").read_text().splitlines()
    names = {line.split()[0] for line in lines if line.strip() and not line.startswith("#")}
    assert {"optuna", "torchdata", "submitit", "matplotlib", "onnxscript", "json"} <= names
    # What only the CUDA builds of torch install (triton, the nvidia-* wheels, cuda-bindings):
    # the check above walks the build installed here, and a project made on a CPU machine
    # must still refuse them.
    assert {"triton", "nvidia", "cuda"} <= names
    accepted = [name for name in names if "Pick another" not in validate(name)]
    assert all(not name.islower() or not name.isidentifier() for name in accepted), accepted


def package_name_validator():
    """copier.yml's package_name validator, rendered as copier renders it (a sandbox with
    the Ansible filters), at copy: no previous answers, no answers given as data."""
    env = SandboxedEnvironment(
        loader=FileSystemLoader(REPO),
        extensions=["jinja2_ansible_filters.AnsibleCoreFiltersExtension"],
    )
    validator = yaml.safe_load((REPO / "copier.yml").read_text())["package_name"]["validator"]
    render = env.from_string(validator).render
    return lambda name: render(package_name=name, _copier_conf={"data": {}}).strip()


def test_a_package_name_is_accepted_only_if_hatchling_can_build_it():
    # The package name is the distribution name too (pyproject's [project] name): whatever
    # the validator lets through, hatchling's own name check must accept.
    from hatchling.metadata.utils import is_valid_project_name

    validate = package_name_validator()
    names = ["_", "__", "__init__", "_probe", "probe_", "pro__be", "p", "p1", "a_1_b", "x" * 60]
    accepted = [name for name in names if not validate(name)]
    assert accepted == ["pro__be", "p", "p1", "a_1_b", "x" * 60]
    assert all(is_valid_project_name(name) for name in accepted)
    assert not any(is_valid_project_name(name) for name in set(names) - set(accepted))


def test_every_question_has_a_type_help_and_default():
    questions = {
        name: spec
        for name, spec in yaml.safe_load((REPO / "copier.yml").read_text()).items()
        if not name.startswith("_")
    }
    assert questions
    for name, spec in questions.items():
        assert {"type", "help", "default"} <= spec.keys(), name
