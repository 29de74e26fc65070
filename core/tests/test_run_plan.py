"""The run plan (run_plan.py): a command's decisions made in one function, as data; and
one read of its checkpoint: resolved once, loaded once, handed on.

`plan_run` is given the config ProjectCLI parses, as the CLI gives it: a fresh fit, a
fit going on with the experiment's newest run, `validate --ckpt_path best` and a checkpoint
file from outside any run each get their folder, checkpoint, lock and loggers.

Every `torch.load` of a file during one command is counted, whoever makes it (the
library's readers, LightningCLI's, the Trainer's): a resumed `fit --ckpt_path last`,
`validate`, `test` and `predict` with `--ckpt_path best` (which also reads `last.ckpt`
once, where the best one is recorded) and with a file, a folder of shards gathered for
one process, and `fit --init_from`. A second read of any file fails the test.
"""

import os
import pickle
import shutil
from collections import Counter
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from copier_lightning_core import Refusal
from copier_lightning_core.checkpoints.checkpoint_io import AtomicCheckpointIO
from copier_lightning_core.checkpoints.load import RUN_STATE
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.run.run_plan import RunPlan
from harness import FAST, FLAVOURS, Run, planned


def tabular_run(root: Path) -> Run:
    return Run("tabular", root, [*FAST, f"--trainer.default_root_dir={root}", *FLAVOURS["tabular"]])


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """One epoch of fit, only read by this module's tests: last.ckpt and one best checkpoint."""
    run = tabular_run(tmp_path_factory.mktemp("trained") / "run")
    run.cli("fit", "--test_after_fit=false")
    return run


def best_of(run: Run) -> Path:
    """The best checkpoint the run's ModelCheckpoint records (what `--ckpt_path best` means)."""
    (best,) = (path for path in run.checkpoints.glob("*.ckpt") if path.name != "last.ckpt")
    return best


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Each file `torch.load` reads during the test -> how many times."""
    counts: Counter = Counter()
    real_load = torch.load

    def counting_load(source, *args, **kwargs):
        file = _file_of(source)
        if file is not None:
            counts[file] += 1
        return real_load(source, *args, **kwargs)

    monkeypatch.setattr(torch, "load", counting_load)
    return counts


def _file_of(source: object) -> Path | None:
    """The file a `torch.load` argument reads: a path, or an open file (fsspec's or
    Python's); None for bytes of no file (torch's reader of shards loads each tensor so)."""
    if isinstance(source, str | os.PathLike):
        return Path(source).resolve()
    for name in ("path", "name"):
        value = getattr(source, name, None)
        if isinstance(value, str):
            return Path(value).resolve()
    return None


@pytest.fixture(scope="module")
def experiment(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Path]:
    """(the options that aim a command at a runs folder, its one run of experiment `default`)."""
    runs = tmp_path_factory.mktemp("experiment") / "runs"
    options = [*FAST, *FLAVOURS["tabular"], f"--runs_dir={runs}", "--test_after_fit=false"]
    run = Path(ProjectCLI(args=["fit", *options]).trainer.default_root_dir)
    return options, run


def decisions(plan: RunPlan) -> dict[str, object]:
    """What a plan decided, as plain data."""
    return {
        "root": plan.root,
        "fresh": plan.fresh,
        "checkpoint": plan.path,
        "loaded": plan.checkpoint is not None,
        "hyperparameters": plan.hparams is not None,
        "lock": plan.lock,
        "loggers": plan.loggers,
    }


def test_a_plain_fit_plans_a_fresh_locked_folder_and_loads_nothing(experiment):
    options, run = experiment
    plan, config = planned("fit", *options)
    # Named by the second it is planned in: within the fixture run's own second that is the
    # run's name, which `claim` then takes as `<name>-1` (test_run_folders.py).
    assert plan.root.parent == run.parent and plan.root.name >= run.name
    assert decisions(plan) == {
        "root": plan.root,
        "fresh": True,
        "checkpoint": None,
        "loaded": False,
        "hyperparameters": False,
        "lock": True,
        "loggers": {},
    }
    assert config.trainer.default_root_dir == str(plan.root)
    assert config.trainer.logger[0].init_args.save_dir == str(plan.root)


def test_fit_with_last_goes_on_in_the_newest_run_with_its_logger_version(experiment):
    options, run = experiment
    plan, config = planned("fit", *options, "--ckpt_path=last")
    last = run / "checkpoints" / "last.ckpt"
    assert decisions(plan) == {
        "root": run,
        "fresh": False,
        "checkpoint": last,
        "loaded": True,
        "hyperparameters": True,
        "lock": True,
        "loggers": {"CSVLogger": 0},  # csv/version_0 goes on, not a version_1
    }
    assert config.ckpt_path == str(last)
    assert config.trainer.logger[0].init_args.version == 0


def test_validate_best_reads_the_best_checkpoint_of_the_newest_run_and_takes_no_lock(experiment):
    options, run = experiment
    plan, config = planned("validate", *options, "--ckpt_path=best")
    best = best_of(Run("tabular", run, options))
    assert decisions(plan) == {
        "root": run,
        "fresh": False,
        "checkpoint": best,
        "loaded": True,
        "hyperparameters": True,
        "lock": False,
        "loggers": {},
    }
    assert config.ckpt_path == str(best)


def test_a_checkpoint_from_outside_any_run_starts_a_fresh_run(experiment, tmp_path):
    options, run = experiment
    outside = tmp_path / "shared.ckpt"
    shutil.copy(run / "checkpoints" / "last.ckpt", outside)
    plan, _ = planned("fit", *options, f"--ckpt_path={outside}")
    assert plan.root.parent == run.parent and plan.root != run
    assert decisions(plan) == {
        "root": plan.root,
        "fresh": True,
        "checkpoint": outside,
        "loaded": True,
        "hyperparameters": True,
        "lock": True,
        "loggers": {"CSVLogger": 0},  # the version its provenance records, in the new folder
    }


def test_a_resumed_fit_reads_last_ckpt_once(tmp_path, reads):
    run = tabular_run(tmp_path / "run")
    first = run.cli("fit", "--test_after_fit=false").trainer.global_step
    reads.clear()
    resumed = run.cli("fit", "--trainer.max_epochs=2", "--ckpt_path=last", "--test_after_fit=false")
    assert resumed.trainer.global_step == 2 * first  # it did resume
    assert reads == {(run.checkpoints / "last.ckpt").resolve(): 1}


@pytest.mark.parametrize("command", ["validate", "test", "predict"])
@pytest.mark.parametrize("given", ["best", "a file"])
def test_an_evaluation_reads_its_checkpoint_once(trained, reads, command, given):
    best = best_of(trained)
    cli = trained.cli(command, f"--ckpt_path={'best' if given == 'best' else best}")
    assert cli.trainer.ckpt_path == str(best)
    expected = {best.resolve(): 1}
    if given == "best":  # which checkpoint is the best is recorded in last.ckpt
        expected[(trained.checkpoints / "last.ckpt").resolve()] = 1
    assert reads == expected


def test_a_folder_of_shards_is_gathered_once_and_its_copy_read_once(trained, tmp_path, reads):
    checkpoint = torch.load(trained.checkpoints / "last.ckpt", weights_only=True)
    folder = tmp_path / "sharded" / "last.ckpt"  # as an FSDP2 run saves it: DCP files, meta.pt
    dcp.save({"state_dict": checkpoint.pop("state_dict")}, checkpoint_id=str(folder))
    checkpoint.pop("optimizer_states")
    torch.save(checkpoint, folder / RUN_STATE)
    reads.clear()
    cli = trained.cli("validate", f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={folder}")
    assert "val/loss" in cli.trainer.callback_metrics
    assert reads[(folder / RUN_STATE).resolve()] == 1
    assert reads[Path(cli.trainer.ckpt_path).resolve()] == 1  # the gathered copy
    assert max(reads.values()) == 1, reads


def test_init_from_reads_its_file_once(trained, tmp_path, reads):
    source = best_of(trained)
    trained.cli(
        "fit",
        f"--trainer.default_root_dir={tmp_path / 'fresh'}",
        "--trainer.limit_train_batches=0",
        f"--init_from={source}",
        "--test_after_fit=false",
    )
    assert reads == {source.resolve(): 1}


def test_the_checkpoint_writer_hands_back_a_preloaded_checkpoint_once(tmp_path, reads):
    path = tmp_path / "last.ckpt"
    io = AtomicCheckpointIO()
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    preloaded = {"state_dict": {"w": torch.zeros(3)}, "provenance": {}}
    io.preload(path, preloaded)
    assert io.load_checkpoint(str(path)) is preloaded  # no read
    assert reads == {}
    assert torch.equal(io.load_checkpoint(path)["state_dict"]["w"], torch.ones(3))  # read now
    io.preload(path, preloaded)
    spawned = pickle.loads(pickle.dumps(io))  # as ddp_spawn hands the plugin to a process
    assert torch.equal(spawned.load_checkpoint(path)["state_dict"]["w"], torch.ones(3))
    other = tmp_path / "other.ckpt"
    io.preload(other, preloaded)
    io.load_checkpoint(path)  # another file is read, and the preloaded one let go:
    with pytest.raises(Refusal, match="does not exist"):
        io.load_checkpoint(other)
    assert reads == {path.resolve(): 3}
