"""`tune`: short measured fits on the toys, a table, and a commented config `fit` accepts."""

import math
import re
import shlex
import warnings

import pytest
import yaml

from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.tools.tune import batch_size, learning_rate
from copier_lightning_core.tools.tune.measure import Measurement
from harness import FAST, Run

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
DATA_WAIT_HINT = "Training waited for data"


def words(config_text: str) -> str:
    """The written config with its comment lines joined: a reason may wrap anywhere."""
    return " ".join(config_text.replace("#", " ").split())


def paced(root, *, chunk_seconds: float, item_seconds: float, num_samples: int) -> list[str]:
    """toy.ToyPacedRegressor on toy.ToyPacedData: a step and a load that take set times."""
    return [
        *FAST,
        f"--trainer.default_root_dir={root}",
        "--model=toy.ToyPacedRegressor",
        f"--model.chunk_seconds={chunk_seconds}",
        "--model.saturates_at=32",
        "--data=toy.ToyPacedData",
        f"--data.num_samples={num_samples}",
        f"--data.item_seconds={item_seconds}",
        "--checkpoint.monitor=val/loss",
    ]


def test_tune_measures_and_writes_a_config_that_fit_takes(run: Run, tmp_path, capsys):
    output = tmp_path / "tuned.yaml"
    options = ["--workers=0", "--steps=2", "--max-trials=3", "--precision=32-true,bf16-mixed"]
    options += ["--lr-steps=40", f"--output={output}"]
    assert main(["tune", *options, *run.args]) == 0
    table = capsys.readouterr().out
    assert "measured on one cpu device" in table
    # The hint repeats the options tune measured with: the file holds values, not the classes.
    assert f"train with `{shlex.join(['fit', *run.args, '--config', str(output)])}`" in table
    assert "precision    bf16-mixed" in table
    tuned = yaml.safe_load(output.read_text())
    text = words(output.read_text())
    # 384 training samples, 16 steps per epoch at least: 8 and 16 timed, 32 not
    assert tuned["data"]["init_args"]["batch_size"] in (8, 16)
    assert "Not tried above 16: 16 steps per epoch at least (384 training samples)." in text
    assert "No device memory limit is measured on cpu." in text
    assert tuned["trainer"]["precision"] in ("32-true", "bf16-mixed")
    # the DataModule without `num_workers` (tabular) gets no worker sweep
    assert ("num_workers" in tuned["data"]["init_args"]) == (run.flavour == "sequence")
    # the lr finder: a finite lr inside the searched range, at the module's `lr`, and its plot
    lr = tuned["model"]["init_args"]["lr"]
    assert math.isfinite(lr) and 1e-8 <= lr <= 1.0
    plot = tmp_path / "tuned-lr.png"
    assert plot.read_bytes().startswith(PNG_SIGNATURE) and plot.stat().st_size > 1000
    cli = ProjectCLI(args=["fit", *run.args, f"--config={output}", "--trainer.max_steps=1"])
    assert cli.datamodule.hparams.batch_size == tuned["data"]["init_args"]["batch_size"]
    assert cli.model.hparams.lr == lr and cli.trainer.global_step == 1


def test_tune_recommends_by_its_rule_on_the_throughput_it_measured(tmp_path):
    """Samples/s grow up to 32 and stay flat beyond (toy.ToyPacedRegressor): 64 and 128 fit
    as well and are timed; 2048 samples allow up to 128. Which size wins depends on timings
    (a benchmark's business, not a test's): the test holds tune to its rule, the smallest
    size within the tolerance of the best rate it measured, on the rates it reports."""
    output = tmp_path / "tuned.yaml"
    options = ["--min-batch-size=16", "--steps=2", "--workers=", "--lr-steps=0"]
    options += ["--tolerance=0.1", f"--output={output}"]
    args = paced(tmp_path / "run", chunk_seconds=0.1, item_seconds=0.0, num_samples=2048)
    assert main(["tune", *options, *args]) == 0
    chosen = yaml.safe_load(output.read_text())["data"]["init_args"]["batch_size"]
    text = words(output.read_text())
    # "16: 155, 32: 310, ...", up to the first word that is no "size: rate" pair: the next
    # reason ("Not tried above 128: 16 steps ...") is not a rate.
    by_size = re.search(r"samples/s by size: (\d+: \d+(?:, \d+: \d+)*)", text)[1]
    rates = {int(size): float(rate) for size, rate in re.findall(r"(\d+): (\d+)", by_size)}
    assert sorted(rates) == [16, 32, 64, 128]
    bar = (1 - 0.1) * max(rates.values())  # rates are printed rounded: a 1 sample/s slack
    assert rates[chosen] >= bar - 1
    assert all(rates[size] < bar + 1 for size in rates if size < chosen)


def test_the_batch_size_rule_takes_the_smallest_size_near_the_best_with_memory_headroom():
    rates = {16: 500.0, 32: 900.0, 64: 980.0, 128: 1000.0, 256: 1010.0}
    memory = {16: 0.1, 32: 0.2, 64: 0.4, 128: 0.7, 256: 0.95}
    measured = [Measurement(size, rate, 0.0, memory[size]) for size, rate in rates.items()]
    # 256 is over the 80% headroom; the best with headroom is 128; 64 is within 5% of it
    assert batch_size.choose(measured, tolerance=0.05, max_memory=0.8).value == 64
    assert batch_size.choose(measured, tolerance=0.0, max_memory=0.8).value == 128
    assert batch_size.choose(measured, tolerance=0.0, max_memory=1.0).value == 256
    bounds = batch_size.Bounds(4096, 16, 256, "cuda")
    text = " ".join(batch_size.reasons(measured[2], measured, bounds, 0.05, 0.8))
    assert "98% of the best throughput measured (1000 samples/s at 128)" in text
    assert "40% of the cuda memory" in text and "Over 80% of device memory: 256" in text


def test_the_recommended_worker_count_is_one_fit_does_not_warn_about(tmp_path):
    # The step (20 ms, slept) outlasts loading a batch by far: 0 workers wait little.
    output = tmp_path / "tuned.yaml"
    options = ["--min-batch-size=16", "--max-trials=1", "--steps=4", "--workers=0"]
    options += ["--lr-steps=0", f"--output={output}"]
    args = paced(tmp_path / "run", chunk_seconds=0.02, item_seconds=0.0, num_samples=256)
    assert main(["tune", *options, *args]) == 0
    text = words(output.read_text())
    assert "under fit's DataWaitMonitor hint_above (20%)" in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ProjectCLI(args=["fit", *args, f"--config={output}", "--test_after_fit=false"])
    assert not [w for w in caught if DATA_WAIT_HINT in str(w.message)]


def test_tune_says_when_no_worker_count_keeps_the_data_wait_under_fits_threshold(tmp_path):
    # Loading a batch (16 x 5 ms, slept) outlasts the step: with 0 or 1 worker, fit waits.
    output = tmp_path / "tuned.yaml"
    options = ["--min-batch-size=16", "--max-trials=1", "--steps=3", "--workers=0,1"]
    options += ["--lr-steps=0", f"--output={output}"]
    args = paced(tmp_path / "run", chunk_seconds=0.0, item_seconds=0.005, num_samples=256)
    assert main(["tune", *options, *args]) == 0
    text = words(output.read_text())
    assert "no count tried kept an epoch's data wait under fit's DataWaitMonitor" in text
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ProjectCLI(args=["fit", *args, f"--config={output}", "--test_after_fit=false"])
    assert [w for w in caught if DATA_WAIT_HINT in str(w.message)]


def test_tune_measures_a_module_whose_scheduler_steps_on_a_validation_metric(denoiser, tmp_path):
    # ToyDenoiser's ReduceLROnPlateau needs val_snr_db at every epoch's end: the measured
    # fits must validate too (once, untimed), or Lightning stops them; the lr finder
    # replaces the scheduler while it searches.
    output = tmp_path / "tuned.yaml"
    options = ["--steps=2", "--max-trials=2", "--lr-steps=15", f"--output={output}"]
    assert main(["tune", *options, *denoiser.args]) == 0
    # 192 training samples, 16 steps per epoch at least: only 8 is timed
    assert yaml.safe_load(output.read_text())["data"]["init_args"] == {"batch_size": 8}


def test_the_lr_goes_where_the_module_reads_it_or_tune_says_why_not():
    adamw = {"class_path": "torch.optim.AdamW", "init_args": {"lr": 0.003}}
    where = learning_rate.config_key({"init_args": {"optimizer": adamw}})  # the example's
    assert where == ("model", "init_args", "optimizer", "init_args", "lr")
    where = learning_rate.config_key({"init_args": {"learning_rate": 0.1}})
    assert where == ("model", "init_args", "learning_rate")
    assert learning_rate.config_key({"init_args": {"net": None}}) is None
    paragraph = learning_rate.no_key_paragraph("MyModule", 0.0123)
    assert "MyModule takes no learning rate" in paragraph and "0.0123" in paragraph


def test_the_lr_suggestion_is_the_steepest_fall_against_log_lr():
    lrs = [10 ** (-8 + 8 * n / 39) for n in range(40)]
    # flat, then a fall from the 25th point on: the fastest fall is at its start
    losses = [2.0] * 25 + [2.0 - 0.1 * n for n in range(15)]
    index = learning_rate.steepest_descent(lrs, losses)
    assert index is not None and 24 <= index <= 38
    assert learning_rate.steepest_descent(lrs, [2.0 + n for n in range(40)]) is None


def test_without_matplotlib_the_plot_is_skipped_not_a_crash(tmp_path, monkeypatch):
    real = learning_rate.importlib.util.find_spec
    monkeypatch.setattr(
        learning_rate.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "matplotlib" else real(name, *args),
    )
    assert learning_rate.save_plot(None, tmp_path / "lr.png", 0) is False
    assert not (tmp_path / "lr.png").exists()


@pytest.mark.parametrize(
    ("option", "message"),
    [
        ("--tolerance=1.5", "--tolerance 1.5"),
        ("--min-lr=1", "--min-lr 1.0, --max-lr 1.0"),
        ("--workers=0,-1", "--workers -1: num_workers=-1 is not valid: use 0"),
        ("--workers=many", "--workers many: num_workers='many' is not valid"),
    ],
)
def test_bad_tune_options_are_refused_before_any_fit(option, message, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(["tune", option])
    assert stopped.value.code == 2 and message in capsys.readouterr().err


def test_tune_does_not_overwrite_a_file_it_did_not_write(tmp_path, capsys):
    mine = tmp_path / "mine.yaml"
    mine.write_text("trainer:\n  max_epochs: 3\n")
    with pytest.raises(SystemExit):
        main(["tune", f"--output={mine}"])
    assert "was not written by tune" in capsys.readouterr().err
    assert mine.read_text() == "trainer:\n  max_epochs: 3\n"
