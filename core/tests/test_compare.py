"""`compare` and what a run root records for it: rows per run or per config over seeds,
mean ± std, the plot, runs without the newer records, the command per root, and one
logger version per resumed run.
"""

import csv
import importlib.util
import io
import json
import math
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from copier_lightning_core import Refusal
from copier_lightning_core.checkpoints.summary import SUMMARY
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.run import run_record
from copier_lightning_core.run.run_record import RunRecord, read_metrics, read_run
from copier_lightning_core.testing import launch
from copier_lightning_core.tools.compare import compare
from copier_lightning_core.tools.compare.table import flat_config
from copier_lightning_core.tools.compare.table import rows as table_rows
from harness import FAST, FLAVOURS, PROJECT


def installed(*packages: str) -> bool:
    return all(importlib.util.find_spec(package) is not None for package in packages)


# The logger tests run where the logger's packages are (a project that chose the logger
# depends on them): MLflow's client and its local SQLite store, TensorBoard's writer.
MLFLOW = ("mlflow", "sqlalchemy", "alembic")
needs_mlflow = pytest.mark.skipif(not installed(*MLFLOW), reason=f"needs {', '.join(MLFLOW)}")

CSV_ONLY = '--trainer.logger={"class_path": "copier_lightning_core.run.loggers.CSVLogger"}'
HIDDEN, SEEDS = (8, 16), (1, 2, 3)


def fit(root: Path, *extra: str) -> None:
    ProjectCLI(
        args=[
            "fit",
            *FAST,
            *FLAVOURS["tabular"],
            CSV_ONLY,
            f"--trainer.default_root_dir={root}",
            "--trainer.max_epochs=2",
            "--test_after_fit=false",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two widths of the tabular toy, each trained with three seeds."""
    base = tmp_path_factory.mktemp("runs")
    for hidden in HIDDEN:
        for seed in SEEDS:
            fit(
                base / f"hidden-{hidden}" / f"seed-{seed}",
                f"--model.hidden={hidden}",
                f"--seed_everything={seed}",
            )
    return base


def rows(capsys, *args: str) -> list[dict]:
    capsys.readouterr()  # what the fits printed
    assert compare([*args, "--format", "csv"]) == 0
    return list(csv.DictReader(io.StringIO(capsys.readouterr().out)))


def best_from_metrics_file(root: Path) -> float:
    """The lowest val/loss, read from the run's CSV file without the library's reader."""
    (path,) = root.glob("csv/version_*/metrics.csv")
    with path.open(newline="") as file:
        return min(float(row["val/loss"]) for row in csv.DictReader(file) if row["val/loss"])


def test_runs_that_differ_by_seed_give_one_row_with_mean_and_std(seeded, capsys):
    table = rows(capsys, str(seeded))
    assert [row["run"] for row in table] == sorted(
        (f"hidden-{h}" for h in HIDDEN),
        key=lambda name: statistics.fmean(
            best_from_metrics_file(seeded / name / f"seed-{s}") for s in SEEDS
        ),
    )
    for row in table:
        bests = [best_from_metrics_file(seeded / row["run"] / f"seed-{s}") for s in SEEDS]
        assert row["n"] == "3" and row["model.hidden"] == row["run"].split("-")[1]
        assert math.isclose(float(row["best"]), statistics.fmean(bests), rel_tol=1e-9)
        assert math.isclose(float(row["best_std"]), statistics.stdev(bests), rel_tol=1e-9)
        assert row["commit"] and int(row["steps"]) == 12
    assert "seed_everything" not in table[0]  # the seed is what the rows average over


def test_single_runs_keep_a_row_each_with_the_keys_that_differ(seeded, capsys):
    runs = [str(seeded / "hidden-8" / "seed-1"), str(seeded / "hidden-16" / "seed-2")]
    table = rows(capsys, *runs)
    assert {row["run"] for row in table} == {"hidden-8/seed-1", "hidden-16/seed-2"}
    assert {row["n"] for row in table} == {"1"}
    differing = set(table[0]) - {"run", "n", "metric", "best", "best_std", "final", "final_std"}
    times = {"train_seconds", "wall_seconds"}
    assert differing - {"steps", *times, "commit"} == {"model.hidden", "seed_everything"}


def test_a_sweeps_pruning_callback_and_run_paths_are_not_settings(tmp_path):
    # A trial's first seed reports to the sweep (TrialPruning), the others do not; each
    # run's config names its own root. Neither makes the seeds two different configs.
    def record(seed: int, callbacks: list) -> RunRecord:
        root = tmp_path / f"seed-{seed}"
        config = {
            "seed_everything": seed,
            "trainer": {"default_root_dir": str(root), "callbacks": callbacks},
            "checkpoint": {"monitor": "val/loss", "mode": "min"},
            "model": {"class_path": "toy.ToyRegressor", "init_args": {"hidden": 8}},
        }
        return RunRecord(root, config, {}, {}, {"val/loss": {5: float(seed)}})

    timer = {"class_path": "lightning.pytorch.callbacks.Timer"}
    pruning = {"class_path": "copier_lightning_core.tools.sweep.pruning.TrialPruning"}
    (row,), monitor, _ = table_rows([record(1, [timer, pruning]), record(2, [timer])], tmp_path)
    assert row.n == 2 and row.best == [1.0, 2.0] and monitor == "val/loss"
    assert row.config["model"] == "toy.ToyRegressor" and row.config["model.hidden"] == "8"


def test_a_run_that_adds_a_callback_differs_by_that_callback_not_by_the_whole_list(tmp_path):
    """A compile run's config adds TorchCompile to the callbacks; DDP names a strategy class."""

    def record(name: str, callbacks: list, strategy: Any) -> RunRecord:
        config = {
            "trainer": {"callbacks": callbacks, "strategy": strategy},
            "checkpoint": {"monitor": "val/loss", "mode": "min"},
        }
        return RunRecord(tmp_path / name, config, {}, {}, {"val/loss": {5: 1.0}})

    timer = {"class_path": "lightning.pytorch.callbacks.Timer", "init_args": {"interval": "step"}}
    compile_ = {"class_path": "pkg.compile.TorchCompile", "init_args": {"mode": "default"}}
    ddp = {
        "class_path": "lightning.pytorch.strategies.DDPStrategy",
        "init_args": {"find_unused_parameters": False, "timeout": None},
    }
    runs = [record("plain", [timer], "auto"), record("compiled", [timer, compile_], ddp)]
    table, _, _ = table_rows(runs, tmp_path)
    compiled = next(row for row in table if row.label == "compiled")
    assert compiled.config["trainer.callbacks[TorchCompile]"] == "pkg.compile.TorchCompile"
    assert compiled.config["trainer.callbacks[TorchCompile].mode"] == "default"
    assert compiled.config["trainer.callbacks[Timer].interval"] == "step"
    assert not any(key == "trainer.callbacks" for key in compiled.config)
    assert compiled.config["trainer.strategy"] == "lightning.pytorch.strategies.DDPStrategy"
    assert "trainer.strategy.timeout" not in compiled.config  # None: no setting


def test_the_table_and_markdown_show_mean_plus_minus_std(seeded, capsys):
    capsys.readouterr()
    assert compare([str(seeded)]) == 0
    text = capsys.readouterr().out
    assert "±" in text and "best val/loss (min)" in text and "model.hidden" in text
    assert compare([str(seeded), "--format", "markdown"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| run | n |") and set(lines[1]) <= {"|", "-", " "}


def test_the_plot_is_a_valid_png(seeded, tmp_path, capsys):
    import matplotlib.image

    path = tmp_path / "compare.png"
    assert compare([str(seeded), "--plot", str(path)]) == 0
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])  # the IHDR chunk
    assert width > 0 and height > 0
    pixels = matplotlib.image.imread(path)
    assert pixels.shape[:2] == (height, width)
    assert width > height  # two panels side by side: the curves and model.hidden


def test_no_printed_line_outgrows_its_columns_however_long_a_value_is(tmp_path, capsys):
    from copier_lightning_core.tools.compare.table import CELL_WIDTH, render

    error = "Traceback (most recent call last):\n" + "  File x.py, line 1\n" * 300
    long_values = {"widths": list(range(2000)), "note": error, "data.root": "/d" * 1500}

    def record(name: str, seed: int, **values: Any) -> RunRecord:
        root = tmp_path.joinpath(*["a-nested-folder"] * 100, name)  # a 1,600-character label
        config = {"checkpoint": {"monitor": "val/loss", "mode": "min"}, "seed": seed}
        config["model"] = {"init_args": {("a_very_long_argument_name_" * 8): seed, **values}}
        commit = {"available": True, "commit": f"{seed:040d}", "dirty": False}
        return RunRecord(root, config, {"git": commit}, {}, {"val/loss": {5: float(seed)}})

    runs = [record("plain", 1), record("long", 2, **long_values), record("x" * 200, 3)]
    table, monitor, mode = table_rows(runs, tmp_path)
    columns = 12  # run, 5 config keys (seed too), best, final, steps, train, wall, commit
    for style in ("table", "markdown"):
        lines = render(table, monitor, mode, style).splitlines()
        assert len(lines) == 4 + (style == "markdown")  # no value broke a row in two
        assert max(map(len, lines)) <= columns * (CELL_WIDTH + 3), style
        assert "model.init_args.a_v…" in lines[0] and "…" + "x" * 20 in lines[-1]
    csv_text = render(table, monitor, mode, "csv")  # the machine-readable format keeps all
    assert json.dumps(list(range(2000))) in csv_text and error.splitlines()[-1] in csv_text


def test_a_folder_that_is_not_a_run_is_a_clear_error(tmp_path):
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    with pytest.raises(Refusal, match=r"is not a run folder.*runs/<experiment>"):
        compare([str(tmp_path / "empty")])
    with pytest.raises(Refusal, match="is not a folder"):
        compare([str(tmp_path / "missing")])


def test_a_run_whose_checkpoint_is_truncated_is_one_paragraph_naming_it(seeded, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(seeded / "hidden-8" / "seed-1", run)
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])  # a copy cut short
    with pytest.raises(Refusal, match=rf"{last} is not a checkpoint: .* truncated"):
        compare([str(run)])


def test_compare_reads_the_summary_saved_beside_a_checkpoint_while_it_matches_the_file(
    seeded, tmp_path, monkeypatch
):
    run = tmp_path / "run"
    shutil.copytree(seeded / "hidden-8" / "seed-1", run)  # copies keep modification times
    checkpoints = run / "checkpoints"
    summary = checkpoints / SUMMARY
    assert summary.stat().st_mode & 0o777 == (checkpoints / "last.ckpt").stat().st_mode & 0o777
    from_file = read_run(run)  # what the checkpoint itself says, the summary moved away
    (checkpoints / SUMMARY).rename(tmp_path / "kept.json")
    from_checkpoint = read_run(run)
    (tmp_path / "kept.json").rename(checkpoints / SUMMARY)

    def no_unpickling(path: Path) -> dict:
        raise AssertionError(f"compare unpickled {path} although its summary matches it")

    monkeypatch.setattr(run_record, "load_checkpoint", no_unpickling)
    from_summary = read_run(run)
    for record in (from_file, from_summary):
        assert record.steps == from_checkpoint.steps == 12
        assert record.train_seconds == from_checkpoint.train_seconds is not None
        assert record.commit == from_checkpoint.commit
        assert record.config == from_checkpoint.config
        assert run_record.best_score(record.checkpoint, "val/loss") == pytest.approx(
            run_record.best_score(from_checkpoint.checkpoint, "val/loss"), rel=1e-12
        )
    # A checkpoint changed after its summary (another run's file copied over it) is read.
    shutil.copy(seeded / "hidden-16" / "seed-2" / "checkpoints" / "last.ckpt", checkpoints)
    with pytest.raises(AssertionError, match="unpickled"):
        read_run(run)


def test_a_run_made_before_the_run_records_still_compares(tmp_path, capsys):
    fit(tmp_path / "old")
    (tmp_path / "old" / "command.txt").unlink()  # older versions wrote no command.txt
    (row,) = rows(capsys, str(tmp_path / "old"))
    assert math.isclose(float(row["best"]), best_from_metrics_file(tmp_path / "old"), rel_tol=1e-9)


def test_metrics_scattered_over_versions_merge_with_the_later_run_winning(tmp_path):
    for version, lines in {0: ["5,3.0", "11,2.0"], 1: ["11,1.5", "17,1.0"]}.items():
        folder = tmp_path / "csv" / f"version_{version}"
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_text("\n".join(["step,val/loss", *lines]) + "\n")
    assert read_metrics(tmp_path)["val/loss"] == {5: 3.0, 11: 1.5, 17: 1.0}


def test_a_resumed_fit_continues_its_logger_version_and_records_each_command(tmp_path):
    root = tmp_path / "run"
    optional = {"TensorBoardLogger": ("tensorboard",), "MLFlowLogger": MLFLOW}
    loggers = ["CSVLogger", *(name for name, packages in optional.items() if installed(*packages))]
    module = "copier_lightning_core.run.loggers"
    classes = [{"class_path": f"{module}.{name}"} for name in loggers]
    fit(root, "--trainer.max_epochs=1", f"--trainer.logger={json.dumps(classes)}")
    fit(
        root,
        "--trainer.max_epochs=2",
        f"--trainer.logger={json.dumps(classes)}",
        "--ckpt_path=last",
    )
    for folder in {"CSVLogger": "csv", "TensorBoardLogger": "tensorboard"}.values():
        if (root / folder).exists():
            assert [path.name for path in (root / folder).iterdir()] == ["version_0"]
    metrics = read_metrics(root)["val/loss"]
    assert len(metrics) == 2  # the first epoch's row was kept, the second appended
    lines = (root / "command.txt").read_text().splitlines()
    commands = [line for line in lines if line and not line.startswith("# ended ")]
    assert len(commands) == 4 and commands[0].startswith("# ") and commands[2].startswith("# ")
    assert commands[1].startswith(f"python -m {PROJECT} fit ")
    assert "--ckpt_path=last" in commands[3] and "--ckpt_path" not in commands[1]


def test_a_loggers_version_or_run_id_is_where_a_run_logged_not_a_setting(tmp_path):
    logger = "copier_lightning_core.run.loggers.CSVLogger"
    csv_args = dict(version=0, flush_logs_every_n_steps=5)
    mlflow_args = dict(run_id="abc")
    loggers = [
        dict(class_path=logger, init_args=csv_args),
        dict(class_path="x.MLFlowLogger", init_args=mlflow_args),
    ]
    config = dict(trainer=dict(logger=loggers))
    flat = flat_config(RunRecord(tmp_path, config, {}, {}))
    assert flat == {
        "trainer.logger[CSVLogger]": logger,
        "trainer.logger[CSVLogger].flush_logs_every_n_steps": "5",
        "trainer.logger[MLFlowLogger]": "x.MLFlowLogger",
    }


@needs_mlflow
def test_a_resumed_fit_continues_its_mlflow_run(tmp_path):
    """One MLflow run in <root>/mlflow.db, the resumed fit's epoch appended to it.

    Both fits run as the user runs them, each in a fresh process: in this test process,
    MLflow state other tests left behind (MLFLOW_TRACKING_URI) made a fit log elsewhere.
    """
    root = tmp_path / "run"
    logger = [  # the CSV logger first: its folder is where the run's config is saved
        json.loads(CSV_ONLY.split("=", 1)[1]),
        {"class_path": "copier_lightning_core.run.loggers.MLFlowLogger"},
    ]
    toys = str(Path(__file__).parent)  # harness's toy modules, importable in the child
    # mlflow.set_tracking_uri (called by every MLFlowLogger) also sets MLFLOW_TRACKING_URI in
    # os.environ: an earlier test's store would be inherited as this run's.
    env = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [toys, env.get("PYTHONPATH")]))
    words = [
        *FAST, *FLAVOURS["tabular"], f"--trainer.logger={json.dumps(logger)}",
        f"--trainer.default_root_dir={root}", "--test_after_fit=false",
    ]  # fmt: skip
    for extra in (["--trainer.max_epochs=1"], ["--trainer.max_epochs=2", "--ckpt_path=last"]):
        command = [sys.executable, "-m", PROJECT, "fit", *words, *extra]
        result = launch.run(command, env=env, timeout=600)
        assert result.returncode == 0, result.stderr[-3000:]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{(root / 'mlflow.db').as_posix()}")
    experiments = [experiment.experiment_id for experiment in client.search_experiments()]
    (mlflow_run,) = client.search_runs(experiments)
    history = client.get_metric_history(mlflow_run.info.run_id, "val/loss")
    logged = read_metrics(root)["val/loss"].values()
    assert sorted(point.value for point in history) == sorted(logged)
    assert "provenance/seed" in mlflow_run.data.params
    assert not (root.parent / "mlruns").exists() and not list(root.parent.glob("*.db"))


@needs_mlflow
def test_mlflow_follows_mlflow_tracking_uri_and_a_tracking_uri_argument_wins(tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    from copier_lightning_core.run.loggers import MLFlowLogger

    def uri(name: str) -> str:
        return f"sqlite:///{(tmp_path / name).as_posix()}"

    # Without either, <root>/mlflow.db: the resumed fit above reads its run there.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri("from-env.db"))
    MLFlowLogger(save_dir=str(tmp_path / "root"))  # makes the store (seconds: migrations)
    assert (tmp_path / "from-env.db").is_file() and not (tmp_path / "root").exists()
    shutil.copy(tmp_path / "from-env.db", tmp_path / "from-arg.db")  # an empty store too
    logger = MLFlowLogger(save_dir=str(tmp_path / "root"), tracking_uri=uri("from-arg.db"))
    (run,) = MlflowClient(uri("from-arg.db")).search_runs([logger.experiment_id])
    assert run.info.run_id == logger.run_id
    assert MlflowClient(uri("from-env.db")).get_experiment_by_name("lightning_logs") is None
    assert not (tmp_path / "root").exists()


@needs_mlflow
def test_a_second_mlflow_logger_in_a_process_takes_no_store_mlflow_set_for_the_first(
    tmp_path, monkeypatch
):
    """mlflow.set_tracking_uri, which Lightning calls as a logger starts, writes the URI into
    MLFLOW_TRACKING_URI: a second fit in one process took it for the user's and logged
    into the first one's store."""
    from mlflow.tracking import MlflowClient

    from copier_lightning_core.run.loggers import MLFlowLogger

    def store(folder: str) -> str:
        return f"sqlite:///{(tmp_path / folder).as_posix()}"

    monkeypatch.setenv("MLFLOW_TRACKING_URI", "unset at the end of the test")
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    first = MLFlowLogger(save_dir=str(tmp_path / "first"))
    first.log_metrics({"loss": 1.0}, step=0)
    assert os.environ["MLFLOW_TRACKING_URI"] == store("first/mlflow.db")  # MLflow wrote it
    second = MLFlowLogger(save_dir=str(tmp_path / "second"))
    second.log_metrics({"loss": 2.0}, step=0)
    (run,) = MlflowClient(store("second/mlflow.db")).search_runs([second.experiment_id])
    assert run.info.run_id == second.run_id
    assert len(MlflowClient(store("first/mlflow.db")).search_runs([first.experiment_id])) == 1

    # The user's MLFLOW_TRACKING_URI still counts after a logger with its own URI ran.
    shutil.copy(tmp_path / "second" / "mlflow.db", tmp_path / "users.db")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store("users.db"))
    own = MLFlowLogger(tracking_uri=store("own.db"), artifact_location=tmp_path.as_uri())
    own.log_metrics({"loss": 3.0}, step=0)
    third = MLFlowLogger(save_dir=str(tmp_path / "third"))
    third.log_metrics({"loss": 4.0}, step=0)
    runs = MlflowClient(store("users.db")).search_runs([third.experiment_id])
    assert third.run_id in {run.info.run_id for run in runs}
    assert not (tmp_path / "third").exists()


@needs_mlflow
def test_mlflow_processes_other_than_rank_0_leave_the_store_to_it(tmp_path, monkeypatch):
    # Started together (torchrun, SLURM), every process creating one new SQLite store fails.
    from lightning.pytorch.utilities import rank_zero_only

    from copier_lightning_core.run.loggers import MLFlowLogger

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = MLFlowLogger(save_dir=str(tmp_path / "root"))
    logger.log_metrics({"loss": 1.0}, step=0)  # rank 0's job: nothing written here
    assert logger.version is None and not (tmp_path / "root").exists()


def test_the_command_line_imports_no_sweep_dependency_at_startup():
    # matplotlib itself may be there: torchmetrics imports it whenever it is installed.
    code = (
        "import sys\n"
        "from copier_lightning_core import cli\n"
        "heavy = {'optuna', 'optuna_integration', 'submitit'} & set(sys.modules)\n"
        "assert not heavy, heavy\n"
        "assert 'copier_lightning_core.tools.compare.plot' not in sys.modules\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_a_run_with_a_damaged_metrics_file_is_skipped_with_a_warning(tmp_path, capsys):
    """Random bytes in one run's metrics.csv: UnicodeDecodeError, and no table at all."""
    for name, content in {"good": b"step,val/loss\n5,0.5\n", "bad": bytes(range(128, 256))}.items():
        folder = tmp_path / name / "csv" / "version_0"
        folder.mkdir(parents=True)
        (folder / "metrics.csv").write_bytes(content)
    assert compare([str(tmp_path), "--format", "csv"]) == 0
    out, err = capsys.readouterr()
    assert [row["run"] for row in csv.DictReader(io.StringIO(out))] == ["good"]
    (warning,) = err.strip().splitlines()
    bad = tmp_path / "bad" / "csv" / "version_0" / "metrics.csv"
    assert warning.startswith(f"warning: skipped {tmp_path / 'bad'}: {bad} is not a readable")


def test_the_time_columns_say_what_they_measure_and_wall_covers_every_fit_command(
    seeded, tmp_path, capsys
):
    run = tmp_path / "run"
    shutil.copytree(seeded / "hidden-8" / "seed-1", run)
    record = (run / "command.txt").read_text()
    assert re.search(r"^# ended \S+ after [0-9.]+ s$", record, re.MULTILINE)
    # A resumed fit, a validate and a fit killed before its end, as command.txt records them.
    (run / "command.txt").write_text(
        "# 2030-01-01T00:00:00+00:00 on host in /project\n"
        f"python -m {PROJECT} fit --trainer.max_epochs=2\n"
        "# ended 2030-01-01T00:00:40+00:00 after 40.0 s\n"
        "# 2030-01-01T00:01:00+00:00 on host in /project\n"
        f"python -m {PROJECT} validate --ckpt_path=last\n"
        "# ended 2030-01-01T00:01:07+00:00 after 7.0 s\n"
        "# 2030-01-01T00:02:00+00:00 on host in /project\n"
        f"python -m {PROJECT} fit --ckpt_path=last --trainer.max_epochs=4\n"
        "# ended 2030-01-01T00:02:25+00:00 after 25.0 s (KeyboardInterrupt)\n"
    )
    (row,) = rows(capsys, str(run))
    assert float(row["wall_seconds"]) == 65.0  # the two fits, not the validate
    assert 0 < float(row["train_seconds"]) < 65.0  # Lightning's Timer: the fit loop alone
    assert compare([str(run)]) == 0
    out, err = capsys.readouterr()
    assert "train  wall" in out.splitlines()[0] and "1:05" in out
    assert "train: the fit loop, validation included" in err and "wall: the fit commands" in err


def test_a_parameter_the_spec_sampled_on_a_log_scale_gets_a_log_axis(seeded, tmp_path, monkeypatch):
    import matplotlib.axes
    import optuna
    from optuna.distributions import FloatDistribution, IntDistribution
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    from copier_lightning_core.tools.compare.plot import log_sampled

    sweep = tmp_path / "sweep"
    for trial, hidden in enumerate(HIDDEN):  # 8 and 16: less than a decade apart
        shutil.copytree(seeded / f"hidden-{hidden}" / "seed-1", sweep / f"trial-{trial:04d}")
    storage = JournalStorage(JournalFileBackend(str(sweep / "optuna.journal")))
    study = optuna.create_study(study_name="widths", storage=storage)
    space = {"model.hidden": IntDistribution(4, 32, log=True), "lr": FloatDistribution(0.1, 1.0)}
    study.ask(space)
    assert log_sampled([sweep]) == {"model.hidden": True, "lr": False}
    scales = []
    original = matplotlib.axes.Axes.set_xscale

    def record(axis, value, **kwargs):
        scales.append(value)
        return original(axis, value, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "set_xscale", record)
    assert compare([str(sweep), "--plot", str(tmp_path / "plot.png")]) == 0
    assert scales == ["log"]  # the model.hidden panel, as the study sampled it
