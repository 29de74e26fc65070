"""A folder per fit under its experiment: plain reruns, `--ckpt_path last|best` of the
newest run, experiment files, the old `runs/default`, and one folder for all ranks.

(Distributed launches in real processes: test_presets.py; a root given explicitly is
refused when it holds a run: test_run_root.py.)
"""

import logging
import os
import shutil
from pathlib import Path

import pytest

from copier_lightning_core import Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.run import run_folders
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.run.run_folders import (
    claim_fresh,
    planned_root,
    run_name_variable,
    run_root_variable,
    runs_of,
)
from copier_lightning_core.tools.compare import compare
from harness import FAST, FLAVOURS

TABULAR = [*FAST, *FLAVOURS["tabular"], "--test_after_fit=false", "--trainer.logger=false"]


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    return tmp_path / "runs"


def cli(runs: Path, command: str, *extra: str) -> ProjectCLI:
    return ProjectCLI(args=[command, *TABULAR, f"--runs_dir={runs}", *extra])


def test_two_plain_fits_get_two_folders_and_last_resumes_the_newest(runs, caplog):
    first = Path(cli(runs, "fit").trainer.default_root_dir)
    second = Path(cli(runs, "fit").trainer.default_root_dir)  # not refused
    assert first.parent == second.parent == runs / "default"
    assert first != second and sorted([second.name, first.name]) == [first.name, second.name]
    assert (first / "checkpoints" / "last.ckpt").is_file()
    with caplog.at_level(logging.INFO):
        resumed = cli(runs, "fit", "--ckpt_path=last", "--trainer.max_epochs=2")
    assert Path(resumed.trainer.default_root_dir) == second
    assert f"newest run of experiment 'default', {second}" in caplog.text
    assert resumed.trainer.global_step > 0 and sorted((runs / "default").iterdir()) == [
        first,
        second,
    ]
    validated = cli(runs, "validate", "--ckpt_path=best")
    assert Path(validated.trainer.default_root_dir) == second
    assert Path(validated.config_init.validate.ckpt_path).parent == second / "checkpoints"
    assert run_root_variable() not in os.environ  # no leftover for the next command


def test_fits_started_in_the_same_second_are_numbered_and_sorted_as_numbers(tmp_path):
    stamp = tmp_path / "default" / "2030-01-01_00-00-00"
    made = [claim_fresh(stamp) for _ in range(12)]
    assert [path.name for path in made[:3]] == [stamp.name, f"{stamp.name}-1", f"{stamp.name}-2"]
    for path in made:
        (path / "checkpoints").mkdir()
        (path / "checkpoints" / "last.ckpt").write_bytes(b"a run")
    assert runs_of(tmp_path / "default") == made  # -10 after -9, not after -1


def test_a_resume_or_evaluation_without_runs_is_one_paragraph(runs):
    for command in ("fit", "validate"):
        with pytest.raises(Refusal) as stopped:
            cli(runs, command, "--ckpt_path=last")
        message = str(stopped.value)
        assert "experiment 'default' has no run with checkpoints" in message
        assert "\n" not in message and "--trainer.default_root_dir" in message
    assert not runs.exists()


@pytest.mark.parametrize("name", ["../elsewhere", "a/b", "sweeps", ".hidden", "two words"])
def test_an_experiment_name_that_is_no_folder_name_is_refused(name):
    with pytest.raises(Refusal, match=f"experiment name '{name}' cannot be a folder name"):
        resolve_config([f"--experiment={name}"])


@pytest.fixture
def experiments(tmp_path: Path, monkeypatch) -> Path:
    """configs/experiments/ with one experiment, `short`, of the test's own."""
    folder = tmp_path / "experiments"
    folder.mkdir()
    (folder / "short.yaml").write_text(
        "experiment: short\nseed_everything: 7\ntrainer:\n  max_epochs: 3\n"
    )
    monkeypatch.setattr(run_folders, "experiments_folder", lambda: folder)
    return folder


def test_an_experiment_without_a_file_is_refused_listing_the_files(experiments):
    with pytest.raises(Refusal, match=r"no .*experiments/shrt\.yaml.*Choose one of: short, or"):
        resolve_config(["--experiment", "shrt"])


def test_an_experiment_file_is_stacked_on_the_defaults_and_names_the_folder(experiments):
    config = resolve_config(["--experiment=short", "--trainer.max_epochs=5"])
    assert config["experiment"] == "short"
    assert config["seed_everything"] == 7  # the file's, over configs/default.yaml's
    assert config["trainer"]["max_epochs"] == 5  # what is typed wins over the file
    root = Path(config["trainer"]["default_root_dir"])
    assert root.parent == project_root() / "runs" / "short" and not root.exists()
    config = resolve_config([f"--config={experiments / 'short.yaml'}"])
    assert config["experiment"] == "short"  # the file names its own folder


def test_the_shipped_experiment_names_its_own_file():
    for path in (project_root() / "configs" / "experiments").glob("*.yaml"):
        assert resolve_config([f"--experiment={path.stem}"])["experiment"] == path.stem


def test_the_old_runs_default_is_the_oldest_run_and_compares_with_the_new_ones(
    runs, tmp_path, capsys
):
    """A project updated from before run folders: its run lies in runs/default itself."""
    old = runs / "default"
    ProjectCLI(args=["fit", *TABULAR, f"--trainer.default_root_dir={old}"])
    resumed = cli(runs, "fit", "--ckpt_path=last", "--trainer.max_epochs=2")
    assert Path(resumed.trainer.default_root_dir) == old  # the old run goes on in place
    new = Path(cli(runs, "fit").trainer.default_root_dir)
    assert new.parent == old and runs_of(old) == [old, new]
    capsys.readouterr()
    assert compare([str(old), "--format", "csv"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 3  # the header, the old run, the new one


def test_ranks_take_the_root_or_the_name_their_launcher_hands_them(tmp_path, monkeypatch):
    folder, handed = tmp_path / "runs" / "default", tmp_path / "runs" / "default" / "older"
    monkeypatch.setenv(run_root_variable(), str(handed))  # by the process that started them
    assert planned_root("fit", folder, None) != (handed, False)  # the launching process
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert planned_root("fit", folder, "last") == (handed, False)  # not a newer run since
    monkeypatch.delenv(run_root_variable())
    monkeypatch.setenv(run_name_variable(), "2030-01-01_00-00-00")  # by torchrun.sh
    assert planned_root("fit", folder, None) == (folder / "2030-01-01_00-00-00", False)
    monkeypatch.setenv(run_name_variable(), "../../etc")
    with pytest.raises(Refusal, match="cannot be a folder name"):
        planned_root("fit", folder, None)


def test_a_launch_of_several_processes_without_a_shared_name_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv(run_name_variable(), raising=False)
    monkeypatch.setenv("WORLD_SIZE", "4")
    with pytest.raises(Refusal, match=f"one of 4 .*Set {run_name_variable()}"):
        planned_root("fit", tmp_path / "runs" / "default", None)


def test_slurm_tasks_share_the_folder_task_0_makes_and_a_requeue_finds_it(tmp_path, monkeypatch):
    folder = tmp_path / "runs" / "default"
    monkeypatch.delenv(run_name_variable(), raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setattr(run_folders, "SLURM_WAIT_S", 0)
    with pytest.raises(Refusal, match="waited 0 s for task 0"):
        planned_root("fit", folder, None)  # task 0 has not made it yet
    monkeypatch.setenv("SLURM_PROCID", "0")
    root, fresh = planned_root("fit", folder, None)
    assert root.name.endswith("_job4242.0") and root.is_dir() and not fresh
    monkeypatch.setenv("SLURM_PROCID", "1")
    assert planned_root("fit", folder, None)[0] == root  # another task, on any node
    monkeypatch.setenv("SLURM_PROCID", "0")
    assert planned_root("fit", folder, None)[0] == root  # the requeued job
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    assert planned_root("fit", folder, None)[0] != root  # the next srun of the job
    shutil.rmtree(folder)
