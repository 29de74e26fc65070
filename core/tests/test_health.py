"""The health callbacks (`copier_lightning_core.callbacks.health`) on real fits, and their cost."""

import csv
import logging
import math
import os
import re
import sys
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch import Callback, Trainer
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.plugins import MixedPrecision
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from copier_lightning_core.callbacks.health import (
    DataWaitMonitor,
    FirstBatchCheck,
    GradientHealth,
    HealthCheckFailed,
    MemoryStats,
    NonFiniteGuard,
    data_wait,
    nonfinite,
)
from copier_lightning_core.callbacks.health.first_batch import _label_problems, image_grid
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.loaders import LoaderOptions
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing import launch
from harness import FAST, FLAVOURS, PROJECT
from toy import ToyRegressor, ToySequenceData, ToyTabularData

HEALTH_MODULE = "copier_lightning_core.callbacks.health"
TESTS = Path(__file__).parent


def fit(args: list[str], adjust=lambda trainer: None) -> ProjectCLI:
    """`fit` through the real CLI; `adjust(trainer)` may edit the callbacks before it runs."""

    class AdjustedCLI(ProjectCLI):
        def instantiate_trainer(self, **kwargs) -> Trainer:
            trainer = super().instantiate_trainer(**kwargs)
            adjust(trainer)
            return trainer

    return AdjustedCLI(args=["fit", "--test_after_fit=false", *args])


def without_health(trainer: Trainer) -> None:
    trainer.callbacks = [
        c for c in trainer.callbacks if not type(c).__module__.startswith(HEALTH_MODULE)
    ]


def tiny_trainer(tmp_path: Path, callbacks: list[Callback], **kwargs) -> Trainer:
    options = {
        "accelerator": "cpu",
        "devices": 1,
        "max_epochs": 1,
        "logger": False,
        "enable_checkpointing": False,
        "enable_progress_bar": False,
        "enable_model_summary": False,
        "default_root_dir": tmp_path,
        **kwargs,
    }
    return Trainer(callbacks=callbacks, **options)


def guard_of(trainer: Trainer) -> NonFiniteGuard:
    return next(c for c in trainer.callbacks if isinstance(c, NonFiniteGuard))


class Recorder(Callback):
    """Test-only: the full state before each batch and each loss (host reads are fine here)."""

    def __init__(self) -> None:
        self.states: list[dict[str, torch.Tensor]] = []
        self.losses: list[float] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.states.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})

    def on_before_backward(self, trainer, pl_module, loss) -> None:
        self.losses.append(float(loss.detach()))


# --- non-finite guard -------------------------------------------------------------------


@pytest.fixture(params=["host", "host, large state", "device"])
def flag_reads(request, monkeypatch) -> str:
    """The guard's two ways of acting on its flag: read on the host at each step (where
    that waits for nothing: the CPU), or left on the device (GPUs), forced here on the CPU.
    On the device a step is skipped by a fused optimizer or has its gradients zeroed
    (default), or is undone with `torch.where` (`keep_copy`). On the host, a small state's
    largest magnitude is taken from one concatenated copy, a large one's tensor by tensor
    (forced here for the toys)."""
    if request.param == "device":
        monkeypatch.setattr(nonfinite, "FREE_FLAG_READS", frozenset())
    if request.param == "host, large state":
        monkeypatch.setattr(nonfinite, "CONCATENATED_STATE_LIMIT", 0)
    return request.param


# Learning rates that overflow float32 a few steps in. The tabular toy's Adam moves each
# weight by about lr whatever the gradient, so only an absurd lr overflows it; the sequence
# toy's SGD with momentum compounds gradients that grow with the weights: NaN at step 3.
ABSURD_LR = {"tabular": "1e30", "sequence": "1e8"}
SHORT_EPOCHS = {"tabular": [], "sequence": ["--data.train_size=192"]}
BATCHES_PER_EPOCH = {"tabular": 384 // 64, "sequence": 192 // 32}


def finite(state: dict[str, torch.Tensor]) -> bool:
    return all(torch.isfinite(t).all() for t in state.values() if t.is_floating_point())


@pytest.mark.parametrize("flavour", ["tabular", pytest.param("sequence", marks=pytest.mark.slow)])
@pytest.mark.usefixtures("flag_reads")
def test_with_a_copy_an_absurd_learning_rate_stops_the_run_with_the_weights_from_before(
    flavour, tmp_path
):
    args = [*FAST, *FLAVOURS[flavour], *SHORT_EPOCHS[flavour], "--trainer.max_epochs=4"]
    args.append(f"--model.lr={ABSURD_LR[flavour]}")
    guarded, unguarded = Recorder(), Recorder()

    def adjust(trainer: Trainer) -> None:
        guard_of(trainer).check_every_n_steps = 3  # the host looks only every 3 batches
        guard_of(trainer).keep_copy = True  # a bad update, not only a bad loss, is undone
        trainer.callbacks.append(guarded)

    with pytest.raises(HealthCheckFailed) as failure:
        fit([*args, f"--trainer.default_root_dir={tmp_path / 'guarded'}"], adjust)
    message = str(failure.value)
    assert message.startswith("error: training diverged")
    step = int(re.search(r"global step (\d+) ", message)[1])
    assert f"global step {step} (batch {step % BATCHES_PER_EPOCH[flavour]} of epoch" in message
    assert re.search(r"= (nan|inf)\. ", message)
    assert len(guarded.states) - 1 - step < 3  # stopped at the first read after it

    # The same run without the guard (same lr schedule, so same length): identical up to
    # that step, broken right after it.
    def unguard(trainer: Trainer) -> None:
        trainer.callbacks = [c for c in trainer.callbacks if not isinstance(c, NonFiniteGuard)]
        trainer.callbacks.append(unguarded)

    fit([*args, f"--trainer.default_root_dir={tmp_path / 'free'}"], unguard)
    before = guarded.states[step]
    for name, tensor in before.items():
        assert torch.equal(unguarded.states[step][name], tensor), name
    assert finite(before) and not finite(unguarded.states[step + 1])

    checkpoint = tmp_path / "guarded" / "checkpoints" / "before-nonfinite.ckpt"
    assert str(checkpoint) in message
    kept = torch.load(checkpoint, weights_only=True)["state_dict"]
    assert kept.keys() == before.keys()
    for name, tensor in before.items():
        assert torch.equal(kept[name], tensor), name
    for later in guarded.states[step + 1 :]:  # no update applied while the host was not looking
        assert all(torch.equal(later[name], tensor) for name, tensor in before.items())


@pytest.mark.slow
def test_divergence_exits_non_zero_from_the_command_line(tmp_path):
    python_path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    result = launch.run(
        [
            sys.executable,
            "-m",
            PROJECT,
            "fit",
            *FAST,
            *FLAVOURS["sequence"],
            *SHORT_EPOCHS["sequence"],
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_epochs=4",
            f"--model.lr={ABSURD_LR['sequence']}",
        ],
        cwd=project_root(),
        env={**os.environ, "PYTHONPATH": python_path},  # the toys are importable
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].startswith("error: training diverged")
    assert (tmp_path / "checkpoints" / "before-nonfinite.ckpt").is_file()


class NaNLossAt(ToyRegressor):
    """The toy, with a NaN loss at one global step."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.bad_step = bad_step

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)
        return loss * math.nan if self.global_step == self.bad_step else loss


def fp16(init_scale: float) -> MixedPrecision:
    """Real fp16 with a GradScaler on CPU (Lightning would otherwise pick bf16 there)."""
    return MixedPrecision("16-mixed", "cpu", torch.amp.GradScaler("cpu", init_scale=init_scale))


def test_an_fp16_overflow_step_skipped_by_the_grad_scaler_is_not_a_failure(tmp_path):
    precision = fp16(init_scale=2.0**40)  # fp16 gradients overflow until the scale comes down
    guard = NonFiniteGuard(check_every_n_steps=1, check_grad_norm=True)
    trainer = tiny_trainer(tmp_path, [guard], plugins=[precision], max_steps=20, max_epochs=None)
    trainer.fit(ToyRegressor(), datamodule=ToyTabularData(batch_size=16))
    assert precision.scaler.get_scale() < 2.0**40  # the scaler did skip overflow steps
    assert trainer.global_step == 20


@pytest.mark.usefixtures("flag_reads")
def test_a_nan_loss_under_fp16_still_stops_the_run(tmp_path):
    recorder = Recorder()
    guard = NonFiniteGuard(check_every_n_steps=1)
    trainer = tiny_trainer(tmp_path, [guard, recorder], plugins=[fp16(2.0**8)], max_epochs=3)
    with pytest.raises(HealthCheckFailed, match=r"global step 7 .* loss = nan"):
        trainer.fit(NaNLossAt(bad_step=7), datamodule=ToyTabularData(batch_size=16))
    kept = torch.load(tmp_path / "checkpoints" / "before-nonfinite.ckpt", weights_only=True)
    for name, tensor in recorder.states[7].items():
        assert torch.equal(kept["state_dict"][name], tensor), name


class NaNLossWithStridedWeight(NaNLossAt):
    """NaNLossAt with a non-contiguous weight (same values, strides swapped), as a
    channels_last convolution has; Adam's moments for it are non-contiguous too."""

    def __init__(self, bad_step: int) -> None:
        super().__init__(bad_step)
        layer = self.net[0]
        layer.weight = nn.Parameter(layer.weight.detach().t().contiguous().t())


@pytest.mark.usefixtures("flag_reads")
def test_with_a_copy_a_bad_step_is_undone_in_non_contiguous_tensors_too(tmp_path):
    recorder = Recorder()
    guard = NonFiniteGuard(check_every_n_steps=4, keep_copy=True)
    module = NaNLossWithStridedWeight(bad_step=7)
    assert not module.net[0].weight.is_contiguous()
    trainer = tiny_trainer(tmp_path, [guard, recorder], max_epochs=3)
    with pytest.raises(HealthCheckFailed, match=r"global step 7 .* loss = nan"):
        trainer.fit(module, datamodule=ToyTabularData(batch_size=16))
    kept = torch.load(tmp_path / "checkpoints" / "before-nonfinite.ckpt", weights_only=True)
    for name, tensor in recorder.states[7].items():
        assert torch.equal(kept["state_dict"][name], tensor), name
        assert torch.equal(recorder.states[-1][name], tensor), name  # batch 8: still undone


@pytest.mark.usefixtures("flag_reads")
def test_with_a_copy_a_bad_first_optimizer_step_leaves_the_optimizer_state_untouched(tmp_path):
    """State created by the bad step itself (Adam's moments) is zeroed, not NaN."""
    trainer = tiny_trainer(tmp_path, [NonFiniteGuard(check_every_n_steps=1, keep_copy=True)])
    with pytest.raises(HealthCheckFailed, match="global step 0 "):
        trainer.fit(NaNLossAt(bad_step=0), datamodule=ToyTabularData())
    kept = torch.load(tmp_path / "checkpoints" / "before-nonfinite.ckpt", weights_only=True)
    moments = [t for s in kept["optimizer_states"][0]["state"].values() for t in s.values()]
    assert moments and all(torch.count_nonzero(t) == 0 for t in moments)


class FusedNaNLossAt(NaNLossAt):
    """NaNLossAt with a fused Adam, whose step reads a `found_inf` flag on the device."""

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.hparams.lr, fused=True)


@pytest.mark.parametrize(
    ("reads", "module"),
    [("host", NaNLossAt), ("device", FusedNaNLossAt)],
    ids=["flag read on the host", "fused optimizer skips on the device"],
)
def test_a_nan_loss_skips_that_step_and_every_later_one_then_stops(
    reads, module, tmp_path, monkeypatch
):
    if reads == "device":
        monkeypatch.setattr(nonfinite, "FREE_FLAG_READS", frozenset())
    recorder = Recorder()
    guard = NonFiniteGuard(check_every_n_steps=5)  # the host looks after batch 4
    trainer = tiny_trainer(tmp_path, [guard, recorder], max_epochs=3)
    with pytest.raises(
        HealthCheckFailed, match=r"global step 3 .* loss = nan\. No update"
    ) as failure:
        trainer.fit(module(bad_step=3), datamodule=ToyTabularData(batch_size=16))
    assert len(recorder.states) == 5
    checkpoint = tmp_path / "checkpoints" / "before-nonfinite.ckpt"
    assert str(checkpoint) in failure.value.message
    kept = torch.load(checkpoint, weights_only=True)
    for name, tensor in recorder.states[3].items():
        assert torch.equal(kept["state_dict"][name], tensor), name
        assert torch.equal(recorder.states[4][name], tensor), name  # batch 4: skipped too
    assert kept["optimizer_states"][0]["state"][0]["step"] == 3  # no step counted either


def test_a_nan_loss_with_an_unfused_optimizer_on_a_gpu_zeroes_the_gradients(tmp_path, monkeypatch):
    """Without a host read or a fused kernel nothing skips the step: its gradients are
    zeroed, so no NaN reaches the state, and the message says the weights still moved."""
    monkeypatch.setattr(nonfinite, "FREE_FLAG_READS", frozenset())
    trainer = tiny_trainer(tmp_path, [NonFiniteGuard(check_every_n_steps=5)], max_epochs=3)
    with pytest.raises(HealthCheckFailed, match=r"global step 3 .* zero gradients"):
        trainer.fit(NaNLossAt(bad_step=3), datamodule=ToyTabularData(batch_size=16))
    kept = torch.load(tmp_path / "checkpoints" / "before-nonfinite.ckpt", weights_only=True)
    assert finite(kept["state_dict"])


class NaNFeaturesInBatch(ToyTabularData):
    """The tabular toy's data, in order, with one NaN feature in training batch `bad_batch`."""

    def __init__(self, bad_batch: int) -> None:
        super().__init__(batch_size=16)
        self.bad_batch = bad_batch

    def setup(self, stage: str) -> None:
        super().setup(stage)
        features, targets = (t[self.train_set.indices] for t in self.train_set.dataset.tensors)
        features[self.bad_batch * self.hparams.batch_size + 5, 3] = math.nan
        self.train_set = TensorDataset(features, targets)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)


@pytest.mark.parametrize("keep_copy", [False, True], ids=["no copy", "copy"])
@pytest.mark.usefixtures("flag_reads")
def test_nan_in_the_data_is_named_as_bad_data_with_its_batch(keep_copy, tmp_path):
    guard = NonFiniteGuard(check_every_n_steps=5, keep_copy=keep_copy)  # looks after batch 4
    trainer = tiny_trainer(tmp_path, [guard], max_epochs=3)
    with pytest.raises(HealthCheckFailed) as failure:
        trainer.fit(ToyRegressor(), datamodule=NaNFeaturesInBatch(bad_batch=3))
    message = failure.value.message
    assert message.startswith(
        "the training data is not finite: batch[0] held NaN or inf values at global step 3 "
        "(batch 3 of epoch 0), loss = nan. The data is at fault"
    )
    assert nonfinite.FIXES not in message  # not the advice for a diverging run
    assert str(tmp_path / "checkpoints" / "before-nonfinite.ckpt") in message


class NaNGradientAt(ToyRegressor):
    """The toy, with one NaN gradient (and a finite loss) at one global step."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.bad_step = bad_step

    def on_after_backward(self) -> None:
        if self.global_step == self.bad_step:
            self.net[0].weight.grad[0, 0] = math.nan


def test_a_nan_gradient_with_a_finite_loss_is_skipped_when_the_norm_is_checked(tmp_path):
    recorder = Recorder()
    guard = NonFiniteGuard(check_every_n_steps=5, check_grad_norm=True)
    trainer = tiny_trainer(tmp_path, [guard, recorder], max_epochs=3)
    with pytest.raises(HealthCheckFailed, match=r"global step 2 .* gradient norm = nan"):
        trainer.fit(NaNGradientAt(bad_step=2), datamodule=ToyTabularData(batch_size=16))
    assert math.isfinite(recorder.losses[2])
    kept = torch.load(tmp_path / "checkpoints" / "before-nonfinite.ckpt", weights_only=True)
    for name, tensor in recorder.states[2].items():
        assert torch.equal(kept["state_dict"][name], tensor), name


class BadUpdateAt(ToyRegressor):
    """The toy, whose optimizer step at one global step leaves a NaN weight behind, with a
    finite loss and finite gradients (as an overflowing update does)."""

    def __init__(self, bad_step: int) -> None:
        super().__init__()
        self.bad_step = bad_step

    def configure_optimizers(self):
        optimizer = super().configure_optimizers()

        def poison(optimizer, args, kwargs) -> None:
            if self.global_step == self.bad_step:
                with torch.no_grad():
                    self.net[0].weight[0, 0] = math.nan

        optimizer.register_step_post_hook(poison)
        return optimizer


@pytest.mark.usefixtures("flag_reads")
def test_a_bad_update_stops_before_any_checkpoint_is_written_and_names_the_last_good_one(
    tmp_path,
):
    recorder = Recorder()
    every_two = ModelCheckpoint(
        dirpath=tmp_path / "checkpoints", every_n_train_steps=2, save_top_k=-1, save_last=True
    )
    guard = NonFiniteGuard()  # the host would look only after 50 batches: the save looks first
    trainer = tiny_trainer(
        tmp_path, [guard, recorder, every_two], enable_checkpointing=True, max_epochs=3
    )
    with pytest.raises(HealthCheckFailed) as failure:
        trainer.fit(BadUpdateAt(bad_step=5), datamodule=ToyTabularData(batch_size=16))
    message = failure.value.message
    assert re.search(r"global step 5 .* largest weight.* = nan, after an update", message)
    saved = sorted(p.name for p in (tmp_path / "checkpoints").iterdir())
    assert saved == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]  # not step 6
    named = Path(re.search(r"written before it is (\S+):", message)[1])
    assert named.parent == tmp_path / "checkpoints" and named.name in saved[1:]
    kept = torch.load(named, weights_only=True)["state_dict"]
    for name, tensor in recorder.states[4].items():
        assert torch.equal(kept[name], tensor), name
    assert "keep_copy: true" in message


# A module that makes a NaN loss or weight at a global step, and the stop message's start.
ON_FINITE_DATA = {
    "loss before any update": (
        NaNLossAt,
        0,
        "the loss was not finite before the run's first update, on finite inputs: at global "
        "step 0 (batch 0 of epoch 0), loss = nan.",
    ),
    "loss after updates": (
        NaNLossAt,
        3,
        "training diverged: a non-finite value appeared at global step 3 (batch 3 of epoch "
        "0), loss = nan.",
    ),
    "weights after an update": (
        BadUpdateAt,
        3,
        "training diverged: a non-finite value appeared at global step 3 (batch 3 of epoch "
        "0), largest weight",
    ),
}


@pytest.mark.parametrize("keep_copy", [False, True], ids=["no copy", "copy"])
@pytest.mark.parametrize("case", ON_FINITE_DATA)
def test_on_finite_data_the_message_blames_the_loss_or_the_update_not_the_data(
    case, keep_copy, tmp_path
):
    module, bad_step, told = ON_FINITE_DATA[case]
    guard = NonFiniteGuard(check_every_n_steps=5, keep_copy=keep_copy)
    trainer = tiny_trainer(tmp_path, [guard], max_epochs=3)
    with pytest.raises(HealthCheckFailed) as failure:
        # The same data as above, its NaN in a batch long after the stop.
        trainer.fit(module(bad_step), datamodule=NaNFeaturesInBatch(bad_batch=20))
    message = failure.value.message
    assert message.startswith(told) and "training data" not in message
    diverged = message.startswith("training diverged")
    assert (nonfinite.FIXES in message) == diverged  # the advice for a bad update only


# --- no per-step host reads -------------------------------------------------------------

HOST_READS = ("item", "cpu", "tolist", "__bool__")
STEPS = {"tabular": (10, 30), "sequence": (4, 12)}  # training batches of the short and long fit


def count_host_reads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    counts: Counter = Counter()
    for name in HOST_READS:
        original = getattr(torch.Tensor, name)

        def counted(self, *args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counted)
    return counts


@pytest.mark.parametrize("flavour", ["tabular", pytest.param("sequence", marks=pytest.mark.slow)])
def test_health_checks_add_no_host_read_per_step(flavour, tmp_path, monkeypatch):
    """Host reads with the default health callbacks grow with the steps exactly as without
    them (the optimizer and Lightning's logging read on their own). On the CPU the guard
    reads its flag after each step, which waits for nothing there; it keeps it on the device
    here, as it does on a GPU."""
    monkeypatch.setattr(nonfinite, "FREE_FLAG_READS", frozenset())
    counts = count_host_reads(monkeypatch)
    args = [*FAST, *FLAVOURS[flavour], "--data.batch_size=8", "--trainer.limit_val_batches=1"]
    totals = {}
    for health in (True, False):
        for steps in STEPS[flavour]:

            def adjust(trainer: Trainer, health=health) -> None:
                if not health:
                    without_health(trainer)
                counts.clear()  # count the fit only, not building it

            root = tmp_path / f"{health}-{steps}"
            fit(
                [
                    *args,
                    f"--trainer.default_root_dir={root}",
                    f"--trainer.limit_train_batches={steps}",
                ],
                adjust,
            )
            totals[health, steps] = {name: counts[name] for name in HOST_READS}
    few, many = STEPS[flavour]
    assert totals[True, many]["item"] > totals[True, few]["item"]  # the counting works
    for name in HOST_READS:
        with_health = totals[True, many][name] - totals[True, few][name]
        without = totals[False, many][name] - totals[False, few][name]
        assert with_health == without, (name, totals)


# --- one real fit of the sequence toy, with every health callback -----------------------


@dataclass
class HealthRun:
    root: Path
    log: str
    metrics: list[dict[str, str]]


@pytest.fixture(scope="module")
def health_run(tmp_path_factory) -> HealthRun:
    root = tmp_path_factory.mktemp("health")
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())
    lightning_logger = logging.getLogger("lightning.pytorch")
    lightning_logger.addHandler(handler)
    try:
        fit(
            [
                *FAST,
                *FLAVOURS["sequence"],
                "--data.num_workers=auto",  # resolved per machine, logged and recorded
                f"--trainer.default_root_dir={root}",
            ]
        )
    finally:
        lightning_logger.removeHandler(handler)
    return HealthRun(root, "\n".join(records), csv_rows(next(root.rglob("metrics.csv"))))


def csv_rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def logged(run: HealthRun, key: str) -> list[float]:
    return [float(row[key]) for row in run.metrics if row.get(key)]


def test_loader_settings_are_logged_once_and_recorded_with_the_run(health_run):
    lines = [line for line in health_run.log.splitlines() if "DataLoader settings" in line]
    assert len(lines) == 1, lines  # train, val and test loaders resolved the same
    # The CSV logger rewrites hparams.yaml on every save; TensorBoard's is written once,
    # before the loaders (and so their resolved settings) exist.
    csv_hparams = list(health_run.root.glob("csv/*/hparams.yaml"))
    if not csv_hparams:
        pytest.skip("no CSV logger in this project's default config")
    hparams = yaml.safe_load(csv_hparams[0].read_text())
    assert hparams["num_workers"] == "auto"  # what was asked ...
    recorded = hparams["dataloader"]  # ... and what it resolved to
    assert recorded["num_workers"] == LoaderOptions().kwargs()["num_workers"]
    assert recorded["persistent_workers"] == (recorded["num_workers"] > 0)


def test_gradient_norms_are_logged_at_the_interval(health_run):
    assert len(logged(health_run, "grad_2.0_norm_total")) == 1  # step 0 of 12; every 50
    assert logged(health_run, "grad_2.0_norm/embed.weight")[0] > 0


def test_data_wait_fraction_is_logged_per_epoch(health_run):
    (fraction,) = logged(health_run, "health/data_wait_fraction")
    assert 0 < fraction < 1


def test_first_batch_shapes_are_logged(health_run):
    assert (
        "First training batch: batch['tokens'] torch.int64 (32, 12), "
        "batch['mask'] torch.bool (32, 12), batch['label'] torch.int64 (32,)" in health_run.log
    )


# --- first batch ------------------------------------------------------------------------


def test_labels_outside_num_classes_stop_before_the_first_update(run):
    if run.flavour == "tabular":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            fit(run.args)  # a regressor's float targets are no labels: nothing to check or say
        assert not [w for w in caught if "num_classes" in str(w.message)]
        return
    recorder = Recorder()
    # num_classes is linked from the data to the model, so the labels themselves go wrong
    shifted = ["--data=test_health.LabelsPastNumClasses"]
    with pytest.raises(HealthCheckFailed, match=r"labels range over \[1, 3\] .* num_classes=3"):
        fit([*run.args, *shifted], lambda t: t.callbacks.append(recorder))
    assert recorder.losses == []  # caught in the sanity check's batch: nothing trained
    assert not (run.checkpoints / "last.ckpt").exists()


def test_integer_targets_without_num_classes_warn_that_their_range_goes_unchecked():
    batch = (torch.randn(4, 3), torch.tensor([0, 2, 1, 5]))
    with pytest.warns(UserWarning, match="integer targets but the module declares no"):
        assert _label_problems(batch, None, warn=True) == []


class LabelsPastNumClasses(ToySequenceData):
    """The sequence toy's data with every label one too high: 3 of num_classes=3 occurs."""

    def setup(self, stage: str) -> None:
        super().setup(stage)
        for item in [*self.train_set.items, *self.val_set.items]:
            item["label"] = item["label"] + 1


class LabelledModule(ToyRegressor):
    num_classes = 3


@pytest.mark.parametrize(
    ("batch", "problem"),
    [
        ((torch.tensor([[1.0, math.nan]]), torch.tensor([0])), r"batch\[0\] has non-finite values"),
        ((torch.ones(2, 2), torch.tensor([0.0, 2.0])), "targets are torch.float32"),
        ({"x": torch.ones(2, 2), "label": torch.tensor([0, 3])}, r"range over \[0, 3\]"),
        ({"x": torch.tensor([math.inf]), "y": torch.tensor([0])}, r"batch\['x'\] has non-finite"),
        ((torch.ones(2, 2), torch.tensor([-1, 1])), r"range over \[-1, 1\]"),
    ],
)
def test_first_batch_violations_are_clear_errors(batch, problem):
    with pytest.raises(HealthCheckFailed, match=problem):
        FirstBatchCheck().on_train_batch_start(Trainer(logger=False), LabelledModule(), batch, 0)


@pytest.mark.parametrize(
    "batch",
    [
        (torch.ones(2, 2), torch.tensor([0, 2])),
        (torch.ones(2, 2), torch.tensor([-100, 2])),  # cross_entropy's ignore_index
        (torch.ones(2, 2), torch.full((2, 3), 1 / 3)),  # per-class scores
        {  # the sequence toy's batches
            "tokens": torch.tensor([[3, 7], [1, 0]]),
            "mask": torch.tensor([[True, True], [True, False]]),
            "label": torch.tensor([0, 2]),
        },
    ],
)
def test_valid_first_batches_pass(batch):
    FirstBatchCheck().on_train_batch_start(Trainer(logger=False), LabelledModule(), batch, 0)


class CountingDataset(Dataset):
    def __init__(self, base: Dataset) -> None:
        self.base, self.reads = base, 0

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        self.reads += 1
        return self.base[index]


def test_the_first_batch_check_draws_no_extra_batch(tmp_path):
    reads = {}
    for check in (True, False):
        data = ToyTabularData()
        data.setup("fit")
        data.train_set = CountingDataset(data.train_set)
        callbacks = [FirstBatchCheck()] if check else []
        tiny_trainer(tmp_path, callbacks, limit_val_batches=0).fit(
            ToyRegressor(), train_dataloaders=DataLoader(data.train_set, batch_size=64)
        )
        reads[check] = data.train_set.reads
    assert reads[True] == reads[False] == len(data.train_set)


def test_image_batches_make_a_grid():
    images = torch.rand(5, 3, 8, 6)
    grid = image_grid(images)
    assert grid.shape == (3, 2 * 10, 3 * 8)  # 2 rows of 3 tiles, one-pixel borders
    assert grid.min() >= 0 and grid.max() <= 1


@pytest.mark.parametrize("as_dict", [False, True], ids=["tuple", "dict"])
def test_the_image_grid_reaches_tensorboard(tmp_path, as_dict):
    pytest.importorskip("tensorboard")
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    logger = TensorBoardLogger(tmp_path)
    trainer = Trainer(logger=logger)
    images, labels = torch.rand(4, 3, 8, 8), torch.tensor([0, 1, 2, 0])
    batch = {"image": images, "label": labels} if as_dict else (images, labels)
    FirstBatchCheck().on_train_batch_start(trainer, LabelledModule(), batch, 0)
    logger.experiment.flush()
    events = EventAccumulator(logger.log_dir)
    events.Reload()
    assert events.Tags()["images"] == ["first_batch"]


# --- gradients --------------------------------------------------------------------------


class WithUnusedHead(ToyRegressor):
    def __init__(self) -> None:
        super().__init__()
        self.unused_head = nn.Linear(4, 2)


def test_parameters_without_a_gradient_are_named_once(tmp_path):
    with pytest.warns(
        UserWarning, match=r"2 parameter\(s\) got no gradient.*unused_head.weight, unused_head.bias"
    ) as warnings:
        tiny_trainer(tmp_path, [GradientHealth()], limit_train_batches=3).fit(
            WithUnusedHead(), datamodule=ToyTabularData()
        )
    assert sum("got no gradient" in str(w.message) for w in warnings) == 1


@pytest.mark.parametrize(
    ("thresholds", "warning"),
    [
        ({"explode_above": 1e-9}, "gradients are exploding"),
        ({"vanish_below": 1e9}, "gradients are vanishing"),
    ],
)
def test_exploding_and_vanishing_gradients_warn(tmp_path, thresholds, warning):
    health = GradientHealth(every_n_steps=2, **thresholds)
    logger = CSVLogger(tmp_path)
    with pytest.warns(UserWarning, match=warning):
        tiny_trainer(tmp_path, [health], limit_train_batches=5, logger=logger).fit(
            ToyRegressor(), datamodule=ToyTabularData()
        )
    rows = csv_rows(Path(logger.log_dir) / "metrics.csv")
    steps = [row["step"] for row in rows if row.get("grad_2.0_norm_total")]
    assert steps == ["0", "2", "4"]


# --- data wait --------------------------------------------------------------------------


class SlowDataset(Dataset):
    def __init__(self, seconds: float) -> None:
        self.base = TensorDataset(torch.randn(64, 8), torch.randn(64, 1))
        self.seconds = seconds

    def __len__(self) -> int:
        return len(self.base)

    def __getitem__(self, index: int):
        time.sleep(self.seconds)
        return self.base[index]


def test_a_slow_loader_is_measured_and_gets_a_hint(tmp_path):
    logger = CSVLogger(tmp_path)
    trainer = tiny_trainer(
        tmp_path, [DataWaitMonitor(hint_above=0.5)], logger=logger, limit_val_batches=0
    )
    with pytest.warns(
        UserWarning, match=r"waited for data \d+% .*num_workers=0.*more DataLoader workers"
    ):
        trainer.fit(ToyRegressor(), train_dataloaders=DataLoader(SlowDataset(0.01), batch_size=8))
    assert trainer.callback_metrics["health/data_wait_fraction"] > 0.5


def test_at_the_machines_worker_ceiling_the_hint_is_cheaper_loading(tmp_path, monkeypatch):
    """With no CPU left for another worker, more workers would only take turns."""
    monkeypatch.setattr(data_wait, "available_cpus", lambda: 1)
    trainer = tiny_trainer(tmp_path, [DataWaitMonitor(hint_above=0.5)], limit_val_batches=0)
    with pytest.warns(UserWarning, match=r"waited for data") as said:
        trainer.fit(ToyRegressor(), train_dataloaders=DataLoader(SlowDataset(0.01), batch_size=8))
    (hint,) = [str(w.message) for w in said if "waited for data" in str(w.message)]
    assert "more DataLoader workers" not in hint and "cheaper loading" in hint


# --- memory -----------------------------------------------------------------------------


def test_memory_stats_do_nothing_without_cuda(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA; see the gpu test")
    trainer = tiny_trainer(tmp_path, [MemoryStats(snapshot_on_oom=True)], limit_train_batches=2)
    trainer.fit(ToyRegressor(), datamodule=ToyTabularData())
    assert not any(key.startswith("memory/") for key in trainer.callback_metrics)


def test_an_out_of_memory_error_dumps_the_snapshot_and_names_it(tmp_path, monkeypatch, capsys):
    """The dump itself needs CUDA: it is replaced by a file write, the rest is real."""
    monkeypatch.setattr(
        torch.cuda.memory, "_dump_snapshot", lambda path: Path(path).write_bytes(b"snapshot")
    )
    monitor = MemoryStats(snapshot_on_oom=True)
    monitor._recording = True  # as after setup on CUDA
    monkeypatch.setattr(torch.cuda.memory, "_record_memory_history", lambda **kwargs: None)
    trainer = Trainer(default_root_dir=tmp_path, logger=False)
    error = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 80.00 GiB")
    monitor.on_exception(trainer, ToyRegressor(), error)
    snapshot = tmp_path / "memory" / "oom-snapshot-rank0.pickle"
    assert snapshot.read_bytes() == b"snapshot"
    notes = getattr(error, "__notes__", None) or [capsys.readouterr().out]  # Python < 3.11
    assert str(snapshot) in "\n".join(notes)
    assert not monitor._recording


class AllocatesTooMuch(ToyRegressor):
    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        if self.global_step == 2:
            torch.empty(2**50, dtype=torch.uint8, device=self.device)  # 1 PiB
        return super().training_step(batch, batch_idx)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_memory_is_logged_and_an_oom_leaves_a_snapshot(tmp_path):
    trainer = tiny_trainer(
        tmp_path, [MemoryStats(snapshot_on_oom=True)], accelerator="gpu", limit_train_batches=2
    )
    trainer.fit(ToyRegressor(), datamodule=ToyTabularData())
    assert trainer.callback_metrics["memory/peak_gib"] > 0
    trainer = tiny_trainer(tmp_path, [MemoryStats(snapshot_on_oom=True)], accelerator="gpu")
    with pytest.raises(torch.cuda.OutOfMemoryError) as failure:
        trainer.fit(AllocatesTooMuch(), datamodule=ToyTabularData())
    snapshot = tmp_path / "memory" / "oom-snapshot-rank0.pickle"
    assert snapshot.stat().st_size > 0
    assert str(snapshot) in "".join(getattr(failure.value, "__notes__", []))
