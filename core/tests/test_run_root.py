"""One run per root: a second fit is refused unless it resumes; two live fits never share one.

(`validate`, `test` and `predict` into a run folder: test_train.py, test_checkpoints.py.)
"""

import contextlib
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from copier_lightning_core import Refusal
from copier_lightning_core.platform.paths import RunLayout
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.run.run_root import claim_for_fit
from harness import FAST, FLAVOURS, Run, planned


def test_a_second_fit_into_a_run_folder_is_refused_and_changes_nothing(fitted: Run):
    saved = {path: path.read_bytes() for path in fitted.checkpoints.iterdir()}
    with pytest.raises(Refusal) as stopped:
        fitted.cli("fit", "--test_after_fit=false")
    message = str(stopped.value)
    assert f"{fitted.root} already holds a run" in message
    assert "--ckpt_path last" in message and "--trainer.default_root_dir" in message
    assert {path: path.read_bytes() for path in fitted.checkpoints.iterdir()} == saved


def test_parsing_alone_neither_refuses_nor_locks_a_folder(fitted: Run, tmp_path):
    """doctor (and a sweep checking its spec) parse a fit's command line without running it."""
    config = resolve_config(fitted.args)  # a root that holds a run: a fit would be refused
    assert config["trainer"]["default_root_dir"] == str(fitted.root)
    fresh = tmp_path / "fresh"
    resolve_config([*fitted.args, f"--trainer.default_root_dir={fresh}"])
    assert not fresh.exists()


def test_a_checkpoint_from_another_folder_starts_a_new_run_and_is_refused_there(fitted, tmp_path):
    other = tmp_path / "other"
    (other / "checkpoints").mkdir(parents=True)
    (other / "checkpoints" / "last.ckpt").write_bytes(b"an earlier run of its own")
    with pytest.raises(Refusal, match="already holds a run"):
        claim_for_fit(RunLayout(other), str(fitted.checkpoints / "last.ckpt"))


def test_a_slurm_requeue_may_run_into_its_own_folder_without_ckpt_path(tmp_path):
    """Lightning resumes a requeued job from <root>/hpc_ckpt_*.ckpt only without ckpt_path."""
    layout = RunLayout(tmp_path / "run")
    layout.checkpoints.mkdir(parents=True)
    layout.last.write_bytes(b"the run's last checkpoint")
    with pytest.raises(Refusal, match="already holds a run"):
        claim_for_fit(layout, None)
    (layout.root / "hpc_ckpt_1.ckpt").write_bytes(b"what SIGUSR1 saved")
    claim_for_fit(layout, None)  # no refusal


# Takes the lock as a fit does, forks a child that outlives it (as a DataLoader worker can
# for a few seconds), says so, and waits to be killed: both sleep far longer than any
# machine takes to run the test, so the group is still there to kill at the end.
HOLDER = textwrap.dedent(
    """
    import multiprocessing, sys, time
    from copier_lightning_core.platform.paths import RunLayout
    from copier_lightning_core.run.run_root import claim_for_fit

    claim_for_fit(RunLayout(sys.argv[1]), None)
    multiprocessing.get_context("fork").Process(target=time.sleep, args=(3600,)).start()
    print("held", flush=True)
    time.sleep(3600)
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="no fork; the lock is msvcrt's there")
@pytest.mark.parametrize("run", ["tabular"], indirect=True)
def test_a_live_fit_locks_its_folder_and_a_sigkilled_one_leaves_no_lock(run: Run, tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run.root)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(Refusal, match=f"another fit is running into .*process {holder.pid}"):
            run.cli("fit", "--test_after_fit=false")
        os.kill(holder.pid, signal.SIGKILL)  # the main process only: its child lives on
        holder.wait()
        cli = run.cli("fit", "--test_after_fit=false")  # at once: the lock went with it
        assert cli.trainer.global_step > 0
    finally:
        with contextlib.suppress(ProcessLookupError):  # the group ended already
            os.killpg(holder.pid, signal.SIGKILL)


def test_the_launching_process_alone_takes_the_lock(tmp_path, monkeypatch):
    """A DDP or torchrun rank other than 0 neither checks nor locks the folder its rank 0 holds."""
    layout = RunLayout(tmp_path / "run")
    layout.checkpoints.mkdir(parents=True)
    layout.last.write_bytes(b"written by rank 0 meanwhile")
    args = [*FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={layout.root}"]
    assert planned("fit", *args)[0].lock  # rank 0 would refuse this folder
    monkeypatch.setenv("LOCAL_RANK", "1")
    plan, config = planned("fit", *args)
    assert not plan.lock
    plan.claim(config)
    assert not (layout.root / ".run.lock").exists()
