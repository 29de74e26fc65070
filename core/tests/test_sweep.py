"""`sweep`: specs checked before work, a damaged journal, two sweeps at once, resume after
a kill or Ctrl-C, parallel trials, pruning, SLURM arrays with requeue (on a fake
scheduler), and the shipped examples.

Sweeps run as real subprocesses from this folder (their trials import `toy`), on the
tabular toy with a few steps per trial and the CSV logger only.
"""

import json
import math
import os
import signal
import sys
import time
from pathlib import Path

import optuna
import pytest
import yaml

from copier_lightning_core import Refusal
from copier_lightning_core.testing import launch
from copier_lightning_core.tools.sweep import command
from copier_lightning_core.tools.sweep.spec import SpecError, load_spec
from harness import FAST, FLAVOURS, PROJECT

TESTS = Path(__file__).parent
CSV_ONLY = '--trainer.logger={"class_path": "copier_lightning_core.run.loggers.CSVLogger"}'
TOY_OPTIONS = [*FAST, *FLAVOURS["tabular"], CSV_ONLY, "--trainer.max_epochs=3"]


def write_spec(folder: Path, **sections) -> Path:
    spec = {
        "trials": 2,
        "fit_options": TOY_OPTIONS,
        "space": {"model.lr": {"type": "float", "low": 0.005, "high": 0.05, "log": True}},
        "sampler": {"name": "RandomSampler", "seed": 0},
        **sections,
    }
    path = folder / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def pause_option(marker: Path) -> str:
    pause = {
        "class_path": "copier_lightning_core.testing.interrupts.PauseOnce",
        "init_args": {"marker": str(marker)},
    }
    return f"--trainer.callbacks+={json.dumps(pause)}"


def sweep_command(spec: Path, folder: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        PROJECT,
        "sweep",
        str(spec),
        "--dir",
        str(folder),
        *extra,
    ]


def run_sweep(spec: Path, folder: Path, *extra: str, env: dict | None = None):
    command = sweep_command(spec, folder, *extra)
    return launch.run(command, cwd=TESTS, env={**os.environ, **(env or {})}, timeout=600)


def start_sweep(spec: Path, folder: Path, *extra: str) -> launch.Launched:
    """A sweep in a process group of its own, as a shell runs it."""
    command = sweep_command(spec, folder, *extra)
    return launch.start(command, TESTS, own_group=True, merge_output=True)


def wait_for(marker: Path, process: launch.Launched, timeout: float = 300) -> str:
    """The marker's text once a paused trial wrote it; fails if the sweep ended first."""
    deadline = time.monotonic() + timeout
    while not (marker.exists() and marker.read_text()):
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "no trial paused"
        time.sleep(0.1)
    return marker.read_text()


def study(folder: Path) -> optuna.Study:
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    storage = JournalStorage(JournalFileBackend(str(folder / "optuna.journal")))
    return optuna.load_study(study_name=None, storage=storage)


def finished_sweep(tmp_path: Path, trials: int = 2) -> tuple[Path, Path]:
    """A spec and its sweep's folder holding `trials` complete trials, made without a fit."""
    from optuna.distributions import FloatDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    spec, folder = write_spec(tmp_path, trials=trials), tmp_path / "sweep"
    folder.mkdir()
    storage = JournalStorage(JournalFileBackend(str(folder / "optuna.journal")))
    made = optuna.create_study(study_name=spec.stem, storage=storage)
    lr = FloatDistribution(0.005, 0.05, log=True)
    for value in range(trials):
        made.add_trial(
            optuna.trial.create_trial(
                params={"model.lr": 0.01}, distributions={"model.lr": lr}, value=float(value)
            )
        )
    return spec, folder


def states(folder: Path) -> list[str]:
    return [trial.state.name for trial in study(folder).get_trials(deepcopy=False)]


def fake_trials(monkeypatch, interrupted: int | None = None) -> None:
    """Trials told at once, without a fit, their value a function of their parameters.

    Trial `interrupted` is left as a kill leaves it: RUNNING, its values drawn, the sweep
    stopping (no further trial is asked); a rerun resumes it.
    """
    from copier_lightning_core.tools.sweep.trial import TrialJob

    def run(job: TrialJob) -> str:
        if job.number == interrupted:
            job.stop.set()
            return "interrupted"
        told = job.sweep.study(sampling=False)
        params = told.trials[job.number].params
        value = abs(math.log(params["model.lr"] / 0.02)) + params.get("model.hidden", 0) / 64
        told.tell(job.number, value)
        return "complete"

    monkeypatch.setattr(TrialJob, "run", run)


def drawn(folder: Path) -> list[dict]:
    return [trial.params for trial in study(folder).get_trials(deepcopy=False)]


def compare_rows(folder: Path) -> list[dict]:
    import csv
    import io

    compare = [sys.executable, "-m", PROJECT, "compare", str(folder), "--format", "csv"]
    result = launch.run(compare, cwd=TESTS, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return list(csv.DictReader(io.StringIO(result.stdout)))


# --- the spec, checked before any work ---------------------------------------------------


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ({"epochs": 3}, "epochs"),
        ({"space": {"model.lr": {"type": "float", "low": 0.1, "high": 0.01}}}, "space.model.lr"),
        ({"space": {"model.lr": {"type": "float", "low": 0, "high": 1, "log": True}}}, "log scale"),
        ({"space": {"model.hidden": {"type": "categorical", "choices": []}}}, "model.hidden"),
        ({"sampler": {"name": "TPESamplr"}}, "TPESamplr"),
        ({"sampler": {"name": "TPESampler", "n_startup": 3}}, "n_startup"),
        ({"sampler": {"name": "RandomSampler", "seed": -1}}, "seed: -1"),
        ({"pruner": {"name": "MedianPruner", "n_warmup_steps": -1}}, "MedianPruner"),
        ({"seeds": [1, 1]}, "seeds"),
        ({"slurm": {"gpus": 1}}, "slurm.gpus"),
        ({"direction": "up"}, "direction"),
    ],
)
def test_a_bad_spec_is_refused_naming_the_key(tmp_path, section, named):
    with pytest.raises(SpecError, match=named):
        load_spec(write_spec(tmp_path, **section))


def test_a_spec_naming_an_experiment_stacks_its_file_under_every_trials_options(
    tmp_path, monkeypatch
):
    from copier_lightning_core.run import run_folders
    from copier_lightning_core.tools.sweep import spec as spec_module

    experiments = tmp_path / "experiments"
    experiments.mkdir()
    (experiments / "short.yaml").write_text("seed_everything: 7\ntrainer:\n  max_epochs: 3\n")
    monkeypatch.setattr(run_folders, "experiments_folder", lambda: experiments)
    monkeypatch.setattr(spec_module, "experiments_folder", lambda: experiments)
    options = [*TOY_OPTIONS, "--trainer.max_epochs=2"]
    spec = load_spec(write_spec(tmp_path, experiment="short", fit_options=options))
    assert spec.fit_options == ["--experiment=short", *options]
    resolved = command.check_fit_options(spec.fit_options, spec)
    assert resolved["experiment"] == "short" and resolved["seed_everything"] == 7
    assert resolved["trainer"]["max_epochs"] == 2  # the spec's own options come after it
    with pytest.raises(SpecError, match=r"experiment: shrt.*Choose one of: short"):
        load_spec(write_spec(tmp_path, experiment="shrt"))


def test_a_spec_that_is_no_text_is_refused_in_one_paragraph(tmp_path):
    spec = tmp_path / "noise.yaml"
    spec.write_bytes(bytes(range(128, 256)) * 4)
    with pytest.raises(SpecError, match=r"noise\.yaml is not a text file"):
        load_spec(spec)


def test_a_space_key_fit_does_not_take_is_refused_before_any_trial(tmp_path, capsys):
    spec = write_spec(tmp_path, space={"model.lrr": {"type": "float", "low": 0.1, "high": 1.0}})
    with pytest.raises(Refusal) as exit_info:
        command.sweep([str(spec), "--dir", str(tmp_path / "sweep")])
    message = str(exit_info.value)
    assert "model.lrr" in message and "space:" in message
    assert not (tmp_path / "sweep").exists()  # nothing started


def test_options_the_sweep_sets_itself_are_refused(tmp_path):
    spec = write_spec(tmp_path)
    for option in ["--ckpt_path=last", "--trainer.default_root_dir=elsewhere"]:
        with pytest.raises(Refusal, match=option.split("=")[0]):
            command.sweep([str(spec), "--dir", str(tmp_path / "sweep"), option])


def test_the_slurm_launcher_without_sbatch_is_a_one_line_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch there
    with pytest.raises(Refusal) as exit_info:
        command.sweep([str(write_spec(tmp_path)), "--launcher", "slurm"])
    message = str(exit_info.value)
    assert "sbatch" in message and "\n" not in message


def test_each_slot_of_jobs_gets_one_gpu_or_a_share_of_the_cpu_threads(monkeypatch):
    from copier_lightning_core.tools.sweep.launch import _slot_environment

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert [_slot_environment(slot, 3) for slot in range(3)] == [
        {"CUDA_VISIBLE_DEVICES": "2"},
        {"CUDA_VISIBLE_DEVICES": "3"},
        {"CUDA_VISIBLE_DEVICES": "2"},
    ]
    assert _slot_environment(0, 1) == {}  # one trial at a time: the run's own device choice
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # no GPU visible
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert _slot_environment(1, 2) == {"OMP_NUM_THREADS": "4"}


# --- running, stopping, resuming ----------------------------------------------------------


@pytest.mark.parametrize(
    ("damage", "refused"),
    [
        (lambda data: data[:-20], False),  # cut inside its last record: a crash, a full disk
        (lambda data: data + b"garbage", False),  # no line end: never read, as cut short
        (lambda data: data + b"garbage\n", True),  # a line that is no record
    ],
    ids=["cut-short", "garbage-no-line-end", "garbage-line"],
)
def test_a_damaged_journal_loses_nothing_or_is_refused_naming_it(tmp_path, capsys, damage, refused):
    spec, folder = finished_sweep(tmp_path)
    journal = folder / "optuna.journal"
    assert command.sweep([str(spec), "--dir", str(folder)]) == 0  # nothing to run
    journal.write_bytes(damage(journal.read_bytes()))
    damaged = journal.read_bytes()
    if refused:
        with pytest.raises(Refusal) as exit_info:
            command.sweep([str(spec), "--dir", str(folder)])
        message, last_line = str(exit_info.value), damaged.count(b"\n")
        assert f"{journal} is damaged: line {last_line}" in message, message
        assert "\n" not in message and journal.read_bytes() == damaged  # left as it was
        return
    for _ in range(2):  # the second run appends to what the first one repaired
        assert command.sweep([str(spec), "--dir", str(folder)]) == 0
    assert "cut short" in capsys.readouterr().out
    assert states(folder) == ["COMPLETE", "COMPLETE"]
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())


@pytest.mark.parametrize(
    "sampler",
    [
        {"name": "RandomSampler", "seed": 3},
        {"name": "TPESampler", "seed": 3, "n_startup_trials": 2},  # 4 trials modelled on the rest
        {"name": "NSGAIISampler", "seed": 3, "population_size": 2},  # generations 2 and 3 bred
    ],
    ids=lambda sampler: sampler["name"],
)
def test_a_seeded_sweep_stopped_and_resumed_draws_what_an_uninterrupted_one_draws(
    tmp_path, monkeypatch, sampler
):
    space = {
        "model.lr": {"type": "float", "low": 0.005, "high": 0.05, "log": True},
        "model.hidden": {"type": "int", "low": 4, "high": 32},
    }
    spec = write_spec(tmp_path, trials=6, space=space, sampler=sampler)
    fake_trials(monkeypatch)
    assert command.sweep([str(spec), "--dir", str(tmp_path / "uninterrupted")]) == 0
    fake_trials(monkeypatch, interrupted=3)  # trials 0-2 finished, 3 running: a kill
    assert command.sweep([str(spec), "--dir", str(tmp_path / "resumed")]) == 1
    assert states(tmp_path / "resumed") == ["COMPLETE"] * 3 + ["RUNNING"]
    fake_trials(monkeypatch)  # a new `sweep` process: its sampler made again from the spec
    assert command.sweep([str(spec), "--dir", str(tmp_path / "resumed")]) == 0
    expected = drawn(tmp_path / "uninterrupted")
    assert len(expected) == 6 and len({json.dumps(p, sort_keys=True) for p in expected}) == 6
    assert drawn(tmp_path / "resumed") == expected  # trial by trial, every parameter


def test_a_journal_cut_inside_a_trials_record_keeps_every_finished_trial_and_goes_on(
    tmp_path, monkeypatch, capsys
):
    spec, folder = write_spec(tmp_path, trials=3), tmp_path / "sweep"
    fake_trials(monkeypatch)
    assert command.sweep([str(spec), "--dir", str(folder), "--trials", "2"]) == 0
    before = study(folder).trials
    journal = folder / "optuna.journal"
    lines = journal.read_bytes().splitlines(keepends=True)
    *_, told = (n for n, line in enumerate(lines) if json.loads(line).get("values"))
    kept, cut = b"".join(lines[:told]), lines[told][: len(lines[told]) // 2]
    journal.write_bytes(kept + cut)  # the process died writing trial 1's completion
    assert states(folder) == ["COMPLETE", "RUNNING"]  # Optuna reads on, without that record

    assert command.sweep([str(spec), "--dir", str(folder)]) == 0  # repairs, resumes, goes on
    assert "ended in a record cut short" in capsys.readouterr().out
    after = study(folder).trials
    assert [trial.state.name for trial in after] == ["COMPLETE"] * 3
    assert [(t.params, t.value) for t in after[:2]] == [(t.params, t.value) for t in before]
    assert (folder / "optuna.journal.cut").read_bytes() == cut + b"\n"
    assert all(json.loads(line) for line in journal.read_bytes().splitlines())


@pytest.mark.slow
def test_of_two_sweeps_at_once_one_runs_and_after_a_kill_a_rerun_ends_with_n_trials(
    tmp_path, monkeypatch
):
    marker, folder = tmp_path / "paused", tmp_path / "sweep"
    spec = write_spec(tmp_path, trials=2, fit_options=[*TOY_OPTIONS, pause_option(marker)])
    both = [start_sweep(spec, folder), start_sweep(spec, folder)]
    while all(process.poll() is None for process in both):  # the one running it pauses
        time.sleep(0.1)
    refused, process = sorted(both, key=lambda process: process.poll() is None)
    output = refused.communicate(timeout=60)[0].splitlines()[-1]
    assert refused.returncode == 1 and str(folder / "sweep.lock") in output, output
    _, root = wait_for(marker, process).split(" ", 1)
    os.killpg(process.pid, signal.SIGKILL)  # the sweep and its trial, as a crash would
    process.communicate()
    assert states(folder) == ["RUNNING"]
    assert (Path(root) / "checkpoints" / "last.ckpt").is_file()

    result = run_sweep(spec, folder)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert states(folder) == ["COMPLETE"] * 2
    trial = study(folder).trials[0]
    assert [fit["resumed"] for fit in trial.user_attrs["fits"]] == [True]
    commands = (Path(root) / "command.txt").read_text().splitlines()
    fits = [line for line in commands if not line.startswith("#")]
    assert len(fits) == 2 and "--ckpt_path=last" in fits[1] and "--ckpt_path" not in fits[0]
    # One logger version: the resumed trial appended to the metrics it started.
    (metrics,) = Path(root).glob("csv/*/metrics.csv")
    assert metrics.parent.name == "version_0"
    assert metrics.read_text().count("\n") > 6  # the epochs before and after the kill
    assert sorted(row["run"] for row in compare_rows(folder)) == [
        f"trial-{n:04d}" for n in range(2)
    ]
    # Trial 1 was drawn by the rerun: the values a sweep never killed draws (made without fits).
    fake_trials(monkeypatch)
    assert command.sweep([str(spec), "--dir", str(tmp_path / "uninterrupted")]) == 0
    assert drawn(folder) == drawn(tmp_path / "uninterrupted")


@pytest.mark.slow
def test_ctrl_c_stops_the_trials_cleanly_and_the_next_run_resumes(tmp_path):
    marker, folder = tmp_path / "paused", tmp_path / "sweep"
    spec = write_spec(tmp_path, trials=2, fit_options=[*TOY_OPTIONS, pause_option(marker)])
    process = start_sweep(spec, folder)
    _, root = wait_for(marker, process).split(" ", 1)
    os.killpg(process.pid, signal.SIGINT)  # Ctrl-C in a terminal signals the whole group
    output, _ = process.communicate(timeout=300)
    assert process.returncode == 130, output[-3000:]
    assert "rerun the same command" in output
    assert states(folder) == ["RUNNING"]  # interrupted, not failed
    assert (Path(root) / "checkpoints" / "last.ckpt").is_file()

    result = run_sweep(spec, folder)
    assert result.returncode == 0, result.stdout[-3000:]
    assert states(folder) == ["COMPLETE", "COMPLETE"]
    assert study(folder).trials[0].user_attrs["fits"][-1]["resumed"] is True


@pytest.mark.slow
def test_jobs_2_runs_two_trials_at_once(tmp_path):
    folder = tmp_path / "sweep"
    result = run_sweep(write_spec(tmp_path, trials=2), folder, "--jobs", "2")
    assert result.returncode == 0, result.stdout[-3000:]
    first, second = (trial.user_attrs["fits"][0] for trial in study(folder).trials)
    # Each fit's process lifetime, as the sweep recorded it: the two overlap.
    assert first["start"] < second["end"] and second["start"] < first["end"]


@pytest.mark.slow
def test_a_pruner_that_must_fire_prunes_the_clearly_bad_trial(tmp_path):
    # lr 0 never learns: its first validation loss (~11.7) is far above the threshold,
    # which lr 0.05 is below from its first epoch on (~3.7).
    folder = tmp_path / "sweep"
    spec = write_spec(
        tmp_path,
        space={"model.lr": {"type": "categorical", "choices": [0.05, 0.0]}},
        sampler={"name": "GridSampler", "seed": 0},
        pruner={"name": "ThresholdPruner", "upper": 8.0},
    )
    result = run_sweep(spec, folder)
    assert result.returncode == 0, result.stdout[-3000:]
    by_lr = {t.params["model.lr"]: t for t in study(folder).get_trials(deepcopy=False)}
    assert by_lr[0.0].state.name == "PRUNED" and by_lr[0.0].user_attrs["pruned_at_epoch"] == 0
    assert by_lr[0.05].state.name == "COMPLETE"
    # The pruned trial stopped after its first epoch, with its checkpoints.
    pruned_root = folder / by_lr[0.0].user_attrs["root"]
    assert "trained         1 epochs" in (pruned_root / "fit.log").read_text()


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="the fake scheduler runs bash")
def test_slurm_array_with_requeue_on_preemption_resumes_the_trial(tmp_path):
    import fake_slurm

    env = fake_slurm.install(tmp_path / "bin", tmp_path / "slurm-state")
    marker, folder = tmp_path / "paused", tmp_path / "sweep"
    spec = write_spec(
        tmp_path,
        fit_options=[*TOY_OPTIONS, pause_option(marker)],
        slurm={"partition": "debug", "gpus_per_node": 1, "timeout_min": 30},
    )
    command = sweep_command(spec, folder, "--launcher", "slurm", "--jobs", "2")
    process = launch.start(command, TESTS, {**os.environ, **env}, merge_output=True)
    job_pid, root = wait_for(marker, process).split(" ", 1)
    os.kill(int(job_pid), signal.SIGUSR2)  # SLURM's warning before preemption / time-out
    output, _ = process.communicate(timeout=600)
    assert process.returncode == 0, output[-3000:]
    assert states(folder) == ["COMPLETE", "COMPLETE"]
    (submission,) = (tmp_path / "slurm-state" / "submissions").glob("*.sh")
    script = submission.read_text()
    for line in ["--array=0-1%2", "--partition=debug", "--gpus-per-node=1", "--time=30"]:
        assert f"#SBATCH {line}" in script
    calls = (tmp_path / "slurm-state" / "calls.log").read_text()
    assert "scontrol requeue" in calls
    commands = (Path(root) / "command.txt").read_text()
    assert commands.count("--ckpt_path=last") == 1  # requeued, resumed from last.ckpt
