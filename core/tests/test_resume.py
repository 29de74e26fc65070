"""Bit-exact resume: kill a run anywhere, resume with `--ckpt_path last`, get the same tensors.

The sequence toy runs with shuffling, 2 loader workers (StatefulDataLoader), random token
dropout from torch's global RNG and a one-cycle schedule that reads
`estimated_stepping_batches`; it checkpoints every 3 steps plus each epoch's end. It is
killed at an exact point: from inside with SIGKILL (interrupts.KillAt), or from outside,
by SIGKILL, SIGTERM or SIGINT sent to the process or to its whole process group while it
waits at that point (interrupts.PauseAt). SIGTERM and SIGINT must end it with exit code
143 / 130, no traceback, and a `last.ckpt` of the step it stopped at. After
`fit --ckpt_path last` the final model, optimizer and scheduler states must be
`torch.equal` to those of one uninterrupted run with the same seed. The same holds for a
DataModule that returns plain shuffled `torch.utils.data.DataLoader`s.
"""

import os
import signal
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from torch.utils.data import DataLoader, IterableDataset

from copier_lightning_core.callbacks.loader_hooks import watch_loaders
from copier_lightning_core.callbacks.resume import ResumeState, rng_states, set_rng_states
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.paths import default_config
from copier_lightning_core.testing.interrupts import signal_at
from copier_lightning_core.tools.determinism import compare_checkpoints
from harness import FLAVOURS, PROJECT, killed_run

TESTS = Path(__file__).parent
STEPS = 16  # 2 epochs of 256 / 32 batches
# point of the kill -> (KillAt point, global step, step of the last.ckpt it leaves)
KILLS = {
    "mid_epoch": ("train_batch", 11, 9),
    "epoch_boundary": ("epoch_start", 8, 8),
    "during_validation": ("validation", 8, 6),
    "during_checkpoint_save": ("save", 12, 9),
}


@pytest.fixture(scope="module")
def every_3_steps(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default callbacks, with the step checkpoint every 3 steps instead of 100."""
    callbacks = yaml.safe_load(default_config().read_text())["trainer"]["callbacks"]
    for callback in callbacks:
        if "every_n_train_steps" in callback.get("init_args", {}):
            callback["init_args"]["every_n_train_steps"] = 3
    path = tmp_path_factory.mktemp("config") / "every_3_steps.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    return path


def fit_args(root: Path, config: Path, workers: int = 2) -> list[str]:
    return [
        "fit",
        f"--config={config}",
        f"--trainer.default_root_dir={root}",
        "--trainer.max_epochs=2",
        "--trainer.accelerator=cpu",
        "--trainer.devices=1",
        "--trainer.logger=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        *FLAVOURS["sequence"],  # later values win: the overrides below
        "--model=kill_points.ScheduledSequenceClassifier",
        "--data.train_size=256",
        "--data.val_size=64",
        f"--data.num_workers={workers}",
        "--test_after_fit=false",
    ]


def final_state(root: Path) -> dict:
    return torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


@pytest.fixture(scope="module")
def reference(tmp_path_factory, every_3_steps) -> dict:
    root = tmp_path_factory.mktemp("uninterrupted")
    ProjectCLI(args=fit_args(root, every_3_steps))
    state = final_state(root)
    assert state["global_step"] == STEPS
    return state


@pytest.mark.slow
@pytest.mark.parametrize("kill", list(KILLS))
def test_resume_after_sigkill_is_bit_exact(kill, tmp_path, every_3_steps, reference):
    point, step, saved_step = KILLS[kill]
    args = fit_args(tmp_path / "run", every_3_steps)
    result = killed_run(args, point, step)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    assert final_state(tmp_path / "run")["global_step"] == saved_step  # still loadable
    if point == "save":  # the cut-short write is a separate file that "last" ignores
        assert list((tmp_path / "run" / "checkpoints").glob(".*.partial"))
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    resumed = final_state(tmp_path / "run")
    assert resumed["global_step"] == STEPS
    assert compare_checkpoints(resumed, reference) is None


@pytest.fixture(scope="module")
def reference_in_the_main_process(tmp_path_factory, every_3_steps) -> Path:
    """An uninterrupted run whose loaders have no worker processes: its run folder."""
    root = tmp_path_factory.mktemp("uninterrupted-no-workers")
    ProjectCLI(args=fit_args(root, every_3_steps, workers=0))
    return root


@pytest.mark.slow
@pytest.mark.parametrize(
    "kill",
    [
        pytest.param(("train_batch", 5, "SIGKILL", -signal.SIGKILL), id="sigkill-mid_epoch"),
        pytest.param(("epoch_start", 8, "SIGKILL", -signal.SIGKILL), id="sigkill-epoch_boundary"),
        # The epoch's last batch: Lightning then cuts the epoch's validation short.
        pytest.param(("after_batch", 8, "SIGTERM", 143), id="sigterm-epoch_end"),
    ],
)
def test_a_run_loading_in_the_main_process_resumes_exactly_with_every_checkpoint(
    kill, tmp_path, every_3_steps, reference_in_the_main_process
):
    """num_workers 0: the loader's generator and the epoch's validation survive a resume.

    Making a loader's iterator draws its worker seeds from the loader's generator, which
    torchdata's restore does not replay (the next epoch's order then differed), and a
    signal in an epoch's last batch left that epoch unvalidated on resume (its best
    checkpoint was never written). Every checkpoint the uninterrupted run keeps must exist
    after the resume, with the same tensors.
    """
    point, step, sig, code = kill
    args = fit_args(tmp_path / "run", every_3_steps, workers=0)
    result = killed_run(args, point, step, sig)
    assert result.returncode == code, result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    reference = reference_in_the_main_process / "checkpoints"
    resumed = tmp_path / "run" / "checkpoints"
    names = sorted(path.name for path in reference.glob("*.ckpt"))
    assert sorted(path.name for path in resumed.glob("*.ckpt")) == names
    for path in reference.glob("*.ckpt"):
        expected = torch.load(path, map_location="cpu", weights_only=True)
        got = torch.load(resumed / path.name, map_location="cpu", weights_only=True)
        assert compare_checkpoints(got, expected) is None, path.name


# Signals sent from outside while the run waits at an exact point (interrupts.PauseAt):
# to the main process alone, or to its whole process group, as a scheduler or Ctrl-C in a
# terminal does (the loader's 2 workers get it too). Each signal and each target once,
# each point of the list above at least once.
# case -> (point, global step, signal, target, step of the last.ckpt it leaves)
SIGNALLED = {
    "sigterm-group-mid_epoch": ("after_batch", 11, "SIGTERM", "group", 11),
    "sigint-group-during_validation": ("validation", 8, "SIGINT", "group", 8),
    "sigterm-process-during_checkpoint_save": ("save", 12, "SIGTERM", "process", 12),
    "sigint-process-mid_epoch": ("after_batch", 13, "SIGINT", "process", 13),
}
EXIT_CODES = {"SIGTERM": 143, "SIGINT": 130, "SIGKILL": -signal.SIGKILL}


def signalled_run(args: list[str], point: str, step: int, sig: str, target: str, marker: Path):
    """Start the run in its own session; signal it once it waits at the point; let it end."""
    pause = {"point": point, "step": step, "marker": str(marker)}
    command = [sys.executable, "-m", PROJECT, *args]
    return signal_at(command, TESTS, os.environ, pause, sig, group=target == "group")


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SIGNALLED))
def test_a_signal_from_outside_leaves_a_checkpoint_that_resumes_exactly(
    case, tmp_path, every_3_steps, reference
):
    point, step, sig, target, saved_step = SIGNALLED[case]
    args = fit_args(tmp_path / "run", every_3_steps)
    returncode, output = signalled_run(args, point, step, sig, target, tmp_path / "marker")
    assert returncode == EXIT_CODES[sig], output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    assert final_state(tmp_path / "run")["global_step"] == saved_step
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    assert compare_checkpoints(final_state(tmp_path / "run"), reference) is None


@pytest.mark.slow
def test_two_signals_to_the_group_in_one_epoch_resume_exactly(tmp_path, every_3_steps, reference):
    """SIGKILL, then SIGTERM to the resumed run, both in the second epoch, both to the group."""
    args = fit_args(tmp_path / "run", every_3_steps)
    resume = ["--ckpt_path=last"]
    kills = (("after_batch", 10, "SIGKILL", 9, []), ("after_batch", 14, "SIGTERM", 14, resume))
    for n, (point, step, sig, saved_step, resume) in enumerate(kills):
        marker = tmp_path / f"marker-{n}"
        returncode, output = signalled_run([*args, *resume], point, step, sig, "group", marker)
        assert returncode == EXIT_CODES[sig], output[-3000:]
        assert final_state(tmp_path / "run")["global_step"] == saved_step
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    assert compare_checkpoints(final_state(tmp_path / "run"), reference) is None


# A DataModule returning plain `DataLoader(shuffle=True)`s, no generator: 160 / 32 = 5
# batches an epoch, 10 steps; checkpoints at steps 3, 5, 6, 9, 10.
# case -> (KillAt point, global step, loader workers)
PLAIN_KILLS = {
    "mid_epoch-no_workers": ("train_batch", 4, 0),
    "mid_epoch-2_workers": ("train_batch", 4, 2),
    "epoch_boundary": ("epoch_start", 5, 0),
}
PLAIN_STEPS = 10


def plain_args(root: Path, config: Path, workers: int) -> list[str]:
    return [
        *fit_args(root, config),
        "--data=kill_points.PlainSequenceData",  # later values win
        f"--data.num_workers={workers}",
        "--data.train_size=160",
    ]


@pytest.fixture(scope="module")
def plain_references(tmp_path_factory, every_3_steps):
    """worker count -> the final checkpoint of one uninterrupted run (made once)."""
    made: dict[int, dict] = {}

    def reference(workers: int) -> dict:
        if workers not in made:
            root = tmp_path_factory.mktemp(f"uninterrupted-plain-{workers}")
            ProjectCLI(args=plain_args(root, every_3_steps, workers))
            made[workers] = final_state(root)
            assert made[workers]["global_step"] == PLAIN_STEPS
        return made[workers]

    return reference


@pytest.mark.slow
@pytest.mark.parametrize("case", list(PLAIN_KILLS))
def test_a_plain_shuffled_dataloader_resumes_bit_exactly(
    case, tmp_path, every_3_steps, plain_references
):
    """Killed mid-epoch or at an epoch's end, a plain DataLoader's run resumes exactly:
    it is rebuilt as a StatefulDataLoader (said once in the log), whose position and
    generator the checkpoint holds."""
    point, step, workers = PLAIN_KILLS[case]
    args = plain_args(tmp_path / "run", every_3_steps, workers)
    result = killed_run(args, point, step)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    ProjectCLI(args=[*args, "--ckpt_path=last"])
    resumed = final_state(tmp_path / "run")
    assert resumed["global_step"] == PLAIN_STEPS
    assert compare_checkpoints(resumed, plain_references(workers)) is None
    assert (result.stdout + result.stderr).count(
        "train_dataloader(): 1 DataLoader(s) (torch.utils.data.dataloader.DataLoader)"
    ) == 1


class Stream(IterableDataset):
    """Numbers read in order, as from a file or a socket: nothing to save its place with."""

    def __iter__(self):
        return iter(torch.arange(8.0))


class StreamData(L.LightningDataModule):
    def train_dataloader(self) -> DataLoader:
        return DataLoader(Stream(), batch_size=2)


def test_an_iterable_dataset_without_state_is_named_with_its_fix_before_training():
    """Warned once when the train loader is made, however often it is asked for."""
    data = StreamData()
    watch_loaders(data)
    with pytest.warns(UserWarning, match="IterableDataset") as caught:
        loader = data.train_dataloader()
        data.train_dataloader()  # Lightning asks again, e.g. for estimated_stepping_batches
    (warning,) = [w for w in caught if "IterableDataset" in str(w.message)]
    assert "state_dict()" in str(warning.message) and "Stream" in str(warning.message)
    assert callable(loader.state_dict)  # rebuilt, as every plain DataLoader for training


def test_a_checkpoint_written_before_the_loaded_states_are_applied_keeps_them():
    """An interrupt between loading a checkpoint and the first batch saves what was loaded."""
    state = ResumeState()
    loaded = {"rng": rng_states(), "loaders": []}
    state.load_state_dict(loaded)
    torch.rand(3)  # this process's RNG moves on; the run's saved state did not
    assert state.state_dict() is loaded


def test_rng_states_round_trip_through_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np

    torch.save({"rng": rng_states()}, tmp_path / "rng.pt")
    expected = (torch.rand(3), np.random.rand(3), random.random())
    set_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True)["rng"])
    again = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], again[0])
    assert np.array_equal(expected[1], again[1]) and expected[2] == again[2]
