"""A user replaces the example with a model and data of their own, then uses every command.

What a new user does first: render, delete the example and its tests, add their own module
(tests/own_project/tagger.py: a transformer on token sequences, dict batches, plain
DataLoaders over a list-backed Dataset, `val_ce` / `val_hit_rate` metrics, no
`num_classes`), point `configs/default.yaml` at it, then run the project's tests and every
command its README shows. Nothing of the library is edited.
"""

import csv
import shutil
import subprocess
from pathlib import Path
from xml.etree import ElementTree

import pytest
import torch
import yaml
from copier_lightning_core.testing.conformance import CELLS

from conftest import (
    LIBRARY_TESTS,
    assert_project_tests_pass,
    library_tests_pass,
    project_command,
    render,
)
from scaffold import git, install_editable, uninstall

OWN = Path(__file__).parent / "own_project"
PACKAGE = "own_model_probe"
EXAMPLE = ("src/{package}/model.py", "src/{package}/nets.py", "src/{package}/data.py")
EXAMPLE_TESTS = ("tests/test_data.py", "tests/test_model.py", "tests/test_accuracy.py")
# The library suite's files whose tests read the project's configs/ and files as they are: its
# default config and the model and data it names, the shipped presets and experiments.
OWN_CONFIG = (
    "test_smoke.py",
    "test_cli.py",
    "test_checklist.py",
    "test_doctor.py",
    "test_resolver.py",
    "test_run_config.py",
    "test_run_folders.py",
    "test_progress.py",
    "test_public_api.py",
)
# OWN_CONFIG less the tests that read only the trainer's hardware settings of each preset and
# pair of presets (test_resolver.py's `verdicts`: 78 configs resolved, about 30 s on 2
# cores), which this user leaves as the template wrote them: the defaults render runs them.
# Each preset alone is still resolved on this user's config here (test_on_this_machine_...).
WITHOUT_PRESET_PAIRS = "not presets_and_pairs_fit_starts and not fp16_with_fsdp2_is_refused"
# Conformance cells run on the user's model: the cheapest, one of each kind (in-process fit,
# a kill in its own process group and a resume, 2 processes).
CHEAP_CELLS = ("fit", "kill9-mid-epoch-w0", "ddp")
# The user's own sweep spec, in place of the example's (the project's tests parse it);
# written as a user writes one, without the shipped specs' comments.
SWEEP_SPEC = """\
trials: 2
space:
  model.lr: {type: float, low: 1.0e-4, high: 1.0e-2, log: true}
  model.width: {type: categorical, choices: [16, 32]}
sampler: {name: RandomSampler, seed: 0}
pruner: null
"""


@pytest.fixture(scope="module")
def project(template, tmp_path_factory):
    project = render(
        template, tmp_path_factory.mktemp("own") / "project", {"project_name": "Own Model Probe"}
    )
    for name in (*EXAMPLE, *EXAMPLE_TESTS):
        (project / name.format(package=PACKAGE)).unlink()
    for spec in (project / "configs" / "sweeps").glob("*.yaml"):  # they search the example
        spec.unlink()
    (project / "configs" / "sweeps" / "mine.yaml").write_text(SWEEP_SPEC)
    for source, target in (
        ("tagger.py", f"src/{PACKAGE}/tagger.py"),
        ("tagger_tests.py", "tests/test_tagger.py"),
    ):
        (project / target).write_text((OWN / source).read_text().replace("PACKAGE", PACKAGE))
    config_path = project / "configs" / "default.yaml"
    config = yaml.safe_load(config_path.read_text())
    config["model"] = {"class_path": f"{PACKAGE}.tagger.CountingTransformer"}
    config["data"] = {
        "class_path": f"{PACKAGE}.tagger.CountingData",
        "init_args": {"num_workers": 0},
    }
    config["checkpoint"].update(monitor="val_ce", mode="min")
    config["trainer"]["max_epochs"] = 2
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    git(project, "add", "-A")
    git(project, "commit", "-q", "--no-verify", "-m", "my own model and data")
    install_editable(project)
    yield project
    uninstall(PACKAGE)


def command(project: Path, *args: str) -> subprocess.CompletedProcess:
    return project_command(project, PACKAGE, *args)


def ok(result: subprocess.CompletedProcess) -> str:
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return result.stdout + result.stderr


@pytest.mark.slow
def test_the_projects_own_tests_pass_unchanged_after_the_example_is_replaced(project):
    """Plain `pytest`: the user's tests and the contract, run on their model; none skipped
    but the conformance matrix's cells, each naming the command that runs it.

    Its loaders are plain DataLoaders: the contract's kill tests run on them too.
    """
    output = assert_project_tests_pass(project, "-rs")
    skipped = [line for line in output.splitlines() if line.startswith("SKIPPED")]
    matrix = [line for line in skipped if "`pytest -m conformance` runs it" in line]
    assert skipped == matrix and len(matrix) == len(CELLS), output[-3000:]
    # The library's tests that read the project's own configs and files: the toy-based
    # rest names its model and data, and overrides the values this user changed (max_epochs,
    # the checkpoint monitor: harness.FAST, FLAVOURS), so it runs as on the default render
    # (test_generated_projects runs all of it there).
    library_tests_pass(
        project,
        *("-m", "not slow", "-k", WITHOUT_PRESET_PAIRS),
        *(f"{LIBRARY_TESTS}/{n}" for n in OWN_CONFIG),
    )


@pytest.mark.slow
def test_every_readme_command_works_on_the_users_own_model(project, tmp_path):
    ok(command(project, "--help"))
    ok(command(project, "fit", "--trainer.max_epochs=1", "--trainer.enable_progress_bar=false"))
    run = sorted((project / "runs" / "default").iterdir())[-1]  # <date>_<time>: the newest
    checkpoints = run / "checkpoints"
    resumed = ok(command(project, "fit", "--ckpt_path=last", "--trainer.enable_progress_bar=false"))
    assert "best val_ce" in resumed
    assert torch.load(checkpoints / "last.ckpt", weights_only=True)["epoch"] == 2
    # train_ce, logged only when logs_this_step: in the rows of every 10th step, both fits.
    (metrics,) = (run / "csv").glob("version_*/metrics.csv")
    with metrics.open(newline="") as file:
        steps = [int(row["step"]) for row in csv.DictReader(file) if row.get("train_ce")]
    assert steps == list(range(9, 32, 10)), steps  # 16 batches an epoch, two epochs
    for verb in ("validate", "test"):
        ok(command(project, verb, "--ckpt_path=best", "--trainer.enable_progress_bar=false"))
    ok(command(project, "predict", "--ckpt_path=last", "--trainer.enable_progress_bar=false"))
    assert list((run / "predictions").glob("*.pt"))
    ok(command(project, "inspect-ckpt", str(checkpoints / "last.ckpt")))
    ok(command(project, "doctor"))
    exported = tmp_path / "export"
    ok(command(project, "export", str(checkpoints / "last.ckpt"), "--output", str(exported)))
    assert {p.suffix for p in exported.iterdir()} >= {".onnx", ".safetensors"}
    assert "identical" in ok(command(project, "verify-determinism", "--steps", "4"))
    ok(command(project, "fit", "--print_config"))
    swept = ok(
        command(
            project,
            "sweep",
            "configs/sweeps/mine.yaml",
            "--trainer.max_epochs=1",
            f"--dir={tmp_path / 'sweep'}",
        )
    )
    assert "2 of 2 trials finished: 2 complete" in swept
    table = ok(command(project, "compare", str(tmp_path / "sweep")))
    assert "trial-0000" in table and "trial-0001" in table and "val_ce" in table


@pytest.mark.slow
def test_a_monitor_the_module_does_not_log_stops_before_training_with_the_flag(project, tmp_path):
    result = command(
        project, "fit", "--checkpoint.monitor=val/loss", f"--trainer.default_root_dir={tmp_path}"
    )
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert "val_ce" in message and "--checkpoint.monitor" in message
    assert "Traceback" not in message
    assert not list((tmp_path / "checkpoints").glob("*.ckpt"))
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.mark.slow
def test_the_conformance_matrix_runs_on_the_users_own_model_when_asked(project, tmp_path):
    """`pytest -m conformance -k ...` in the project: the cells run on the user's model and
    pass (the cheapest three: a fit, a kill -9 resumed bit-identical, DDP on 2 processes)."""
    report = tmp_path / "cells.xml"
    assert_project_tests_pass(
        project, "-m", "conformance", "-k", " or ".join(CHEAP_CELLS), f"--junitxml={report}"
    )
    cases = ElementTree.parse(report).getroot().iter("testcase")
    outcomes = {case.get("name"): [child.tag for child in case] for case in cases}
    passed = {
        name: tags
        for name, tags in outcomes.items()
        if not {"failure", "error", "skipped"} & set(tags)
    }
    assert set(passed) == {f"test_conformance[{cell}]" for cell in CHEAP_CELLS}, outcomes
