"""The progress bar (`callbacks/progress.py`): redrawn by time, not after every batch.

It is an entry of configs/default.yaml's callbacks (test_run_config.py removes it)."""

import io
import sys
from collections import Counter

import pytest
import yaml
from lightning.pytorch import Trainer
from lightning.pytorch.callbacks import Callback, TQDMProgressBar
from lightning.pytorch.callbacks.progress.tqdm_progress import Tqdm

import toy
from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.progress import ThrottledProgressBar
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.paths import default_config
from harness import FAST, FLAVOURS

BATCHES, EPOCHS = 384 // 64, 2  # the tabular toy trains on 384 of its 512 samples


def fit_with_bar(tmp_path, *extra: str, min_interval: float | None = None) -> tuple[Trainer, int]:
    """A fit with the progress bar on; how many times the bar drew a training batch.

    A draw of a training batch sets the metrics beside the bar from `on_train_batch_end`
    (both bars do, once a draw; validation's end sets them too, from another hook).
    """
    drawn: Counter = Counter()
    set_postfix = Tqdm.set_postfix

    def counted(self, *args, **kwargs):
        drawn[sys._getframe(1).f_code.co_name] += 1
        return set_postfix(self, *args, **kwargs)

    class BarCLI(ProjectCLI):
        def instantiate_trainer(self, **kwargs) -> Trainer:
            trainer = super().instantiate_trainer(**kwargs)
            if min_interval is not None:
                trainer.progress_bar_callback.min_interval = min_interval
            return trainer

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Tqdm, "set_postfix", counted)
        args = [a for a in FAST if not a.startswith("--trainer.enable_progress_bar")]
        cli = BarCLI(
            args=[
                "fit",
                *args,
                *FLAVOURS["tabular"],
                f"--trainer.max_epochs={EPOCHS}",
                f"--trainer.default_root_dir={tmp_path}",
                "--test_after_fit=false",
                *extra,
            ]
        )
    return cli.trainer, drawn["on_train_batch_end"]


def test_the_default_bar_draws_the_first_and_last_batch_and_then_by_time(tmp_path):
    trainer, drawn = fit_with_bar(tmp_path, min_interval=3600.0)  # no time-based redraw
    assert type(trainer.progress_bar_callback) is ThrottledProgressBar
    assert drawn == 2 * EPOCHS  # Lightning's own bar: every one of BATCHES * EPOCHS


def test_a_draw_writes_the_line_once_with_the_count_and_the_metrics(monkeypatch):
    bar = ThrottledProgressBar(min_interval=0.0)  # every batch is due
    bar.train_progress_bar = Tqdm(total=10, file=io.StringIO())
    writes = []
    line = bar.train_progress_bar
    monkeypatch.setattr(line, "refresh", lambda *_, **__: writes.append((line.n, line.postfix)))
    monkeypatch.setattr(bar, "get_metrics", lambda *_: {"loss": "1.0"})
    monkeypatch.setattr(ThrottledProgressBar, "total_train_batches", 10)
    bar.on_train_batch_end(None, None, None, None, 3)
    assert writes == [(4, "loss=1.0")]  # Lightning's bar: (4, None), then (4, "loss=1.0")


def test_a_run_stopped_by_an_exception_closes_its_bar_at_once(tmp_path):
    """Not at the process's exit, after the command's last line."""

    class RefuseAtTheSecondBatch(Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
            if batch_idx == 1:
                raise Refusal("stopped by a test")

    bar = ThrottledProgressBar()
    trainer = Trainer(
        accelerator="cpu",
        max_epochs=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
        callbacks=[bar, RefuseAtTheSecondBatch()],
    )
    with pytest.raises(Refusal):
        trainer.fit(toy.ToyRegressor(), datamodule=toy.ToyTabularData(batch_size=16))
    assert bar.train_progress_bar.disable  # closed: tqdm draws a closed bar no more


def test_a_bar_of_your_own_in_place_of_the_configs_is_used_as_it_is(tmp_path):
    callbacks = yaml.safe_load(default_config().read_text())["trainer"]["callbacks"]
    own = [
        {"class_path": "lightning.pytorch.callbacks.TQDMProgressBar"}
        if entry["class_path"].endswith(".ThrottledProgressBar")
        else entry
        for entry in callbacks
    ]
    config = tmp_path / "own-bar.yaml"
    config.write_text(yaml.safe_dump({"trainer": {"callbacks": own}}))
    trainer, drawn = fit_with_bar(tmp_path / "run", f"--config={config}")
    assert type(trainer.progress_bar_callback) is TQDMProgressBar
    assert drawn == BATCHES * EPOCHS


def test_progress_bars_can_still_be_turned_off(tmp_path):
    cli = ProjectCLI(
        args=["validate", *FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={tmp_path}"]
    )
    assert cli.trainer.progress_bar_callback is None
