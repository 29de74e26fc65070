"""copier.yml: defaults derive sensibly, and every validator refuses a bad answer with
a message saying what to type instead, before anything is written."""

import keyword
import sys

import pytest
import yaml

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
    assert (project / "src" / expected / "framework" / "cli.py").is_file()


BAD_ANSWERS = [
    ({"project_name": "   "}, "project_name must not be empty"),
    ({"package_name": "torch"}, 'package_name "torch" is a Python keyword, a standard-library'),
    ({"package_name": "json"}, 'package_name "json" is a Python keyword, a standard-library'),
    ({"package_name": "class"}, 'package_name "class" is a Python keyword'),
    ({"package_name": "lightning"}, "dependency name"),
    ({"package_name": "1model"}, "not a lower-case Python identifier"),
    ({"package_name": "Bad-Name"}, "not a lower-case Python identifier"),
    ({"author_email": "nobody"}, 'author_email "nobody" is not an e-mail address'),
    ({"loggers": []}, "Choose at least one logger"),
    ({"loggers": ["mlflow"]}, "mlflow"),
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


def test_reserved_package_names_cover_stdlib_keywords_and_dependencies():
    reserved = set((REPO / "includes" / "reserved_names.txt").read_text().split())
    required = set(sys.stdlib_module_names) | set(keyword.kwlist)
    required |= {"torch", "lightning", "torchmetrics", "jsonargparse", "numpy", "wandb"}
    missing = sorted(name for name in required if name.isidentifier() and name not in reserved)
    assert not missing, f"add to includes/reserved_names.txt: {missing}"


def test_every_question_has_a_type_help_and_default():
    questions = {
        name: spec
        for name, spec in yaml.safe_load((REPO / "copier.yml").read_text()).items()
        if not name.startswith("_")
    }
    assert questions
    for name, spec in questions.items():
        assert {"type", "help", "default"} <= spec.keys(), name
