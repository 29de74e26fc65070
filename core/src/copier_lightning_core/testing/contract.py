"""The library's contract, checked on a project's model and data as configs/default.yaml names them.

A project's `tests/test_contract.py` imports these tests (`from
copier_lightning_core.testing.contract import *`), and pytest collects them there.

Replace the example with your own LightningModule and DataModule, point the config at them,
and plain `pytest` proves the run works for them end to end, on the CPU, in well under a
minute for a small model: a few steps of `fit`; a `kill -9` mid-epoch and one at an epoch
boundary, each resumed to the end bit-identical to an uninterrupted run (which needs a
train loader that saves its position: torchdata's StatefulDataLoader, or a plain
DataLoader, which the library rebuilds as one; with a DataLoader subclass both are
skipped, saying so); validate, test and predict from the
checkpoint; an export whose ONNX and safetensors copies match the eager model on
`example_input_array` (skipped, saying why, when the module sets none and its validation
batches are not a tensor or an (inputs, target) pair); and every sweep spec and experiment
file under configs/ parsing against the configured model and data; and the owner's files importing only the
library's public names.

Every run is the configured one (model, data, optimizer, seed, callbacks) cut short by
Trainer flags: 2 epochs of at most 4 batches, 2 validation batches, a last.ckpt every 2
steps, on one CPU process, without loggers. The library's own deep tests (every preset,
signal and tool on toy models) are the library's own test suite.

`pytest -m conformance` runs the conformance matrix (conformance.py) on the same model and
data instead: one test per cell (`test_conformance[ddp]`), every preset and tool as the
template's own suite runs them on real architectures; plain `pytest` skips them. A cell
this model cannot run is refused in one paragraph; `[tool.copier-lightning-core]
conformance-refusals = {fsdp2 = "words of that paragraph"}` in pyproject.toml accepts that
refusal (the test is then reported as xfailed, with the paragraph); any other refusal fails.
"""

import os
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from lightning.pytorch import LightningModule
from lightning.pytorch.utilities.model_helpers import is_overridden

from copier_lightning_core import ProjectCLI, Refusal
from copier_lightning_core.platform.paths import default_config, project_path
from copier_lightning_core.platform.project import project_package, project_root, project_settings
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.testing.conformance import CELLS, conformance_requested, run_cell
from copier_lightning_core.testing.interrupts import signal_at
from copier_lightning_core.testing.matrix import Arch, Matrix, step_checkpoint_config
from copier_lightning_core.testing.public_api import owner_files, private_imports
from copier_lightning_core.tools.determinism import compare_checkpoints
from copier_lightning_core.tools.export import export

Fitted = tuple[ProjectCLI, Path]  # one uninterrupted fit, and its checkpoints folder
EPOCHS, BATCHES = 2, 4  # training batches per epoch
SAVE_EVERY = 2  # optimizer steps between last.ckpt saves
CUT_SHORT = [
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    f"--trainer.max_epochs={EPOCHS}",
    f"--trainer.limit_train_batches={BATCHES}",
    "--trainer.limit_val_batches=2",
    "--trainer.limit_test_batches=2",
    "--trainer.limit_predict_batches=2",
    "--trainer.num_sanity_val_steps=0",
    "--trainer.logger=false",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]


def every_2_steps_config(folder: Path) -> Path:
    """The configured callbacks, with last.ckpt written every SAVE_EVERY steps, in `folder`."""
    return step_checkpoint_config(default_config(), SAVE_EVERY, folder)


@pytest.fixture(scope="module")
def every_2_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return every_2_steps_config(tmp_path_factory.mktemp("contract"))


def fit_args(root: Path, every_2_steps: Path) -> list[str]:
    return [
        "fit",
        f"--config={every_2_steps}",
        f"--trainer.default_root_dir={root}",
        *CUT_SHORT,
        "--test_after_fit=false",
    ]


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory, every_2_steps: Path) -> Fitted:
    """One uninterrupted fit of the configured model and data, in this process."""
    root = tmp_path_factory.mktemp("contract") / "uninterrupted"
    cli = ProjectCLI(args=fit_args(root, every_2_steps))
    return cli, root / "checkpoints"


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return loaded


def batches_trained(cli: ProjectCLI) -> int:
    return int(cli.trainer.fit_loop.epoch_loop.batch_progress.total.completed)


def steps_per_batch(cli: ProjectCLI) -> float:
    """Optimizer steps per training batch, as the run made them: `global_step` counts
    optimizer steps, one per batch under automatic optimization, one per `optimizer.step()`
    under manual optimization (a GAN's two optimizers: two per batch)."""
    return float(cli.trainer.global_step / max(1, batches_trained(cli)))


def last_save(batches: int, per_batch: int) -> int:
    """The step of the last.ckpt a run leaves after `batches` batches: the epoch's end, or
    the last batch that ended on a multiple of SAVE_EVERY optimizer steps."""
    if batches % BATCHES == 0:
        return batches * per_batch
    return max(n * per_batch for n in range(batches + 1) if n * per_batch % SAVE_EVERY == 0)


def test_fit_trains_the_configured_model_and_checkpoints_it(fitted: Fitted) -> None:
    cli, checkpoints = fitted
    assert batches_trained(cli) == EPOCHS * BATCHES, (
        f"{EPOCHS * BATCHES} training batches expected (2 epochs of {BATCHES}), "
        f"{batches_trained(cli)} trained; does the training DataLoader yield fewer batches?"
    )
    last = load(checkpoints / "last.ckpt")
    assert last["global_step"] == cli.trainer.global_step > 0, (
        f"last.ckpt holds step {last['global_step']}, the run ended at "
        f"{cli.trainer.global_step} optimizer steps ({steps_per_batch(cli):g} per batch); "
        "under manual optimization, does training_step call `optimizer.step()`?"
    )
    weights = last["state_dict"]
    assert weights.keys() == cli.model.state_dict().keys()
    for name, tensor in weights.items():
        assert not tensor.is_floating_point() or torch.isfinite(tensor).all(), name
    (first_epoch,) = checkpoints.glob("epoch00-step*.ckpt")
    first = load(first_epoch)["state_dict"]
    assert any(not torch.equal(first[name], weights[name]) for name in weights), (
        "no weight changed between the first and the second epoch"
    )


# where the run is killed -> (interrupts.PauseAt point, training batches before it)
KILLS = {
    "mid_epoch": ("train_batch", BATCHES - 1),
    "epoch_boundary": ("epoch_start", BATCHES),
}


@pytest.mark.parametrize("kill", list(KILLS))
def test_a_killed_run_resumes_bit_identical(
    kill: str, fitted: Fitted, every_2_steps: Path, tmp_path: Path
) -> None:
    """SIGKILL to the run's process group (DataLoader workers too), then `--ckpt_path last`:
    every checkpoint the resumed run writes equals the uninterrupted run's, tensor for tensor."""
    cli, reference = fitted
    if not callable(getattr(cli.trainer.train_dataloader, "state_dict", None)):
        pytest.skip(
            "the train loader cannot save its position (a DataLoader subclass, which the "
            "library does not rebuild, or LoaderChecks left out of trainer.callbacks), so "
            "a resumed run draws a new order for the rest of the epoch (or the next one): "
            "build it with torchdata's StatefulDataLoader (same arguments as DataLoader)"
        )
    per_batch = steps_per_batch(cli)
    if not per_batch.is_integer():
        pytest.skip(
            f"the module made {per_batch:g} optimizer steps per batch on average: the kill "
            "points are global steps, which a varying count per batch does not name"
        )
    point, batches = KILLS[kill]
    step, saved_step = batches * int(per_batch), last_save(batches, int(per_batch))
    args = fit_args(tmp_path / "run", every_2_steps)
    marker = tmp_path / "paused"
    pause = {"point": point, "step": step, "marker": str(marker)}
    # A fresh process inherits no seed from this one (seed_everything reads PL_GLOBAL_SEED).
    env = {key: value for key, value in os.environ.items() if not key.startswith("PL_")}
    command = [sys.executable, "-m", project_package(), *args]
    _, output = signal_at(command, project_root(), env, pause, "SIGKILL")
    assert marker.exists(), f"the run ended before step {step}:\n{output[-3000:]}"
    resumed = tmp_path / "run" / "checkpoints"
    assert load(resumed / "last.ckpt")["global_step"] == saved_step
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    names = sorted(path.name for path in reference.glob("*.ckpt"))
    assert sorted(path.name for path in resumed.glob("*.ckpt")) == names
    for name in names:
        difference = compare_checkpoints(load(resumed / name), load(reference / name))
        assert difference is None, f"{name}: the resumed run differs first at {difference}"


def test_validate_test_and_predict_run_from_the_checkpoint(fitted: Fitted, tmp_path: Path) -> None:
    cli, checkpoints = fitted
    root = f"--trainer.default_root_dir={tmp_path / 'evaluated'}"
    ckpt = f"--ckpt_path={checkpoints / 'last.ckpt'}"
    validated = ProjectCLI(args=["validate", root, *CUT_SHORT, ckpt])
    monitor = cli.trainer.checkpoint_callback.monitor
    assert monitor in validated.trainer.callback_metrics, (
        f"validate from the checkpoint did not log {monitor!r} (`checkpoint.monitor`)"
    )
    if is_overridden("test_step", cli.model, LightningModule):
        tested = ProjectCLI(args=["test", root, *CUT_SHORT, ckpt])
        assert tested.trainer.callback_metrics, "test from the checkpoint logged nothing"
    ProjectCLI(args=["predict", root, *CUT_SHORT, ckpt])
    written = list((tmp_path / "evaluated" / "predictions").iterdir())
    assert len(written) == 1 and written[0].stat().st_size > 0, written


def test_export_matches_the_model_on_a_sample_input(fitted: Fitted, tmp_path: Path) -> None:
    """ONNX and safetensors copies against the eager model, on `example_input_array` (or,
    without one, the inputs of a validation batch that is a tensor or an (inputs, target) pair)."""
    _, checkpoints = fitted
    pytest.importorskip("onnxruntime", reason='the export extra: pip install -e ".[export]"')
    try:
        status = export([str(checkpoints / "last.ckpt"), "--output", str(tmp_path)])
    except Refusal as refusal:
        if "needs a sample input" in refusal.message:
            pytest.skip(str(refusal))
        raise
    assert status == 0, "an exported copy differs from the eager model beyond --tolerance"
    assert {path.suffix for path in tmp_path.iterdir()} >= {".onnx", ".safetensors"}


# Your sweep specs and experiment files: each must parse against the configured model and
# data (a spec written for the example's keys, `model.optimizer.lr`, fails once it is gone).
SWEEP_SPECS = sorted(project_path("configs/sweeps").glob("*.yaml"))
EXPERIMENT_FILES = sorted(project_path("configs/experiments").glob("*.yaml"))


@pytest.mark.parametrize("spec", SWEEP_SPECS, ids=lambda path: path.name)
def test_a_sweep_spec_parses_against_the_configured_run(spec: Path) -> None:
    pytest.importorskip("optuna", reason='sweeps need the sweep extra: pip install -e ".[sweep]"')
    from copier_lightning_core.tools.sweep import command
    from copier_lightning_core.tools.sweep.spec import load_spec

    loaded = load_spec(spec)
    assert loaded.space and loaded.trials
    resolved = command.check_fit_options(loaded.fit_options, loaded)
    assert resolved["checkpoint"]["monitor"]  # the metric the sweep falls back to


@pytest.mark.parametrize("experiment", EXPERIMENT_FILES, ids=lambda path: path.name)
def test_an_experiment_file_parses_against_the_configured_run(experiment: Path) -> None:
    resolved = resolve_config([f"--experiment={experiment.stem}"])
    assert resolved["model"] and resolved["data"]


def test_your_files_import_only_the_librarys_public_names() -> None:
    """A later release of the library within the pin may move anything else."""
    root = project_root()
    problems = [
        f"{path.relative_to(root)}:{line}: {statement}"
        for path in owner_files(root)
        for line, statement in private_imports(path.read_text(encoding="utf-8"))
    ]
    assert not problems, (
        "These imports reach inside copier_lightning_core, whose modules a later release may "
        "rename or move; import only what `copier_lightning_core.__all__` lists "
        "(LoaderOptions, ProjectCLI, Refusal, logs_this_step, project_path), or copy what "
        "you need into your own code:\n" + "\n".join(problems)
    )


# The conformance matrix on the configured model and data: `pytest -m conformance`.
CONFORMANCE = "pytest -m conformance"
REFUSALS = "conformance-refusals"  # [tool.copier-lightning-core]: cell -> words of a refusal
OWN = "own"  # the architecture: configs/default.yaml alone


def accepted_refusals() -> dict[str, str]:
    """The refusals pyproject.toml's `conformance-refusals` accepts: cell -> words of one."""
    table = project_settings(project_root()).get(REFUSALS, {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        pytest.fail(
            f"[tool.copier-lightning-core] {REFUSALS} in pyproject.toml is not a table of "
            f'strings: write it as {REFUSALS} = {{fsdp2 = "words of the refusal"}}.',
            pytrace=False,
        )
    unknown = sorted(table.keys() - CELLS.keys())
    if unknown:
        pytest.fail(
            f"[tool.copier-lightning-core] {REFUSALS} names {unknown}, which are no cells of "
            f"the conformance matrix; the cells are: {', '.join(CELLS)}.",
            pytrace=False,
        )
    return dict(table)


@pytest.fixture(scope="module")
def own_matrix(tmp_path_factory: pytest.TempPathFactory) -> Matrix:
    return Matrix(project_root(), tmp_path_factory.mktemp("conformance"), {OWN: Arch()})


@pytest.mark.conformance
@pytest.mark.parametrize("cell", list(CELLS))
def test_conformance(cell: str, request: pytest.FixtureRequest) -> None:
    """One cell of the conformance matrix (conformance.CELLS says what it proves)."""
    if not conformance_requested(request.config):
        pytest.skip(f"the conformance matrix: `{CONFORMANCE}` runs it (`-k {cell}`: this cell)")
    expected = accepted_refusals().get(cell)
    record = run_cell(request.getfixturevalue("own_matrix"), OWN, cell, expected)
    if record["outcome"] == "refused":
        pytest.xfail(f"refused, as {REFUSALS} accepts: {record['detail']}")
