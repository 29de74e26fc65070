"""Loader workers leave SIGTERM / Ctrl-C to the main process, which exits 143 / 130.

A whole run stopped by a signal to its process group: test_resume.py. Here: the pieces,
and an exit that does not hang on workers that ignore SIGTERM.
"""

import os
import pickle
import signal
import subprocess
import sys
import textwrap
from functools import partial

import pytest
from lightning.fabric.utilities.seed import pl_worker_init_function
from torch.utils.data import DataLoader

from copier_lightning_core import Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.signals import (
    IgnoreInterrupts,
    interrupt_exit_codes,
    shield_workers,
)
from harness import FAST, FLAVOURS


def test_shielding_chains_the_loader_s_own_worker_init_fn(monkeypatch):
    own = partial(print, "seeded")
    loader = DataLoader(range(4), num_workers=1, worker_init_fn=own)
    shield_workers(loader, rank=0)
    shield_workers(loader, rank=0)  # twice: still one shield
    assert isinstance(loader.worker_init_fn, IgnoreInterrupts) and loader.worker_init_fn.then is own
    pickle.dumps(loader.worker_init_fn)  # workers started with "spawn" receive it pickled


def test_shielding_keeps_lightning_s_worker_seeding(monkeypatch):
    """Lightning seeds workers only through a loader without a worker_init_fn of its own."""
    monkeypatch.setenv("PL_SEED_WORKERS", "1")
    loader = DataLoader(range(4), num_workers=1)
    shield_workers(loader, rank=3)
    seeding = loader.worker_init_fn.then
    assert seeding.func is pl_worker_init_function and seeding.keywords == {"rank": 3}
    in_process = DataLoader(range(4), num_workers=0)
    shield_workers(in_process, rank=0)
    assert in_process.worker_init_fn is None  # no workers, nothing to shield


def test_every_loader_a_datamodule_builds_is_shielded_without_loader_options(tmp_path):
    args = [*FAST, *FLAVOURS["tabular"], "--data=faulty_data.PlainLoadersData"]
    args += ["--data.loader_processes=1", "--trainer.max_steps=2", "--trainer.logger=false"]
    cli = ProjectCLI(
        args=["fit", *args, f"--trainer.default_root_dir={tmp_path}", "--test_after_fit=false"]
    )
    assert cli.trainer.global_step == 2
    validation = cli.trainer.val_dataloaders  # one loader, as the DataModule returns it
    for loader in (cli.trainer.train_dataloader, validation):
        assert isinstance(loader.worker_init_fn, IgnoreInterrupts), loader


@pytest.mark.parametrize(("sig", "code"), [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_outside_a_trainer_stops_the_command_with_128_plus_its_number(sig, code):
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as stopped, interrupt_exit_codes():
        os.kill(os.getpid(), getattr(signal, sig))  # handled before the next line runs
        raise AssertionError("the signal did not stop the command")
    assert stopped.value.code == code
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_refusal_on_the_way_out_of_an_interrupted_command_keeps_the_interrupts_code():
    """A Trainer stops after the batch in which SIGTERM came; a refusal raised on the way out
    (a check that ran meanwhile) must not hide from a scheduler that the run was stopped."""
    with pytest.raises(SystemExit) as stopped, interrupt_exit_codes():
        ours = signal.getsignal(signal.SIGTERM)
        assert callable(ours)
        # As a running Trainer's handler does: it records the stop, then calls the one before.
        signal.signal(signal.SIGTERM, lambda signum, frame: ours(signum, frame))
        os.kill(os.getpid(), signal.SIGTERM)
        raise Refusal("found while the run was stopping.")
    assert stopped.value.code == 143


# A command whose loader workers are busy (slow items) when SIGTERM reaches the whole group.
# The main process stops at once (exit 143) without shutting its loader down; at exit,
# multiprocessing would wait forever for workers that ignore SIGTERM.
BUSY_WORKERS = textwrap.dedent(
    """
    import time
    from torchdata.stateful_dataloader import StatefulDataLoader
    from copier_lightning_core.platform.signals import interrupt_exit_codes, shield_workers

    class Slow:
        def __len__(self):
            return 64

        def __getitem__(self, index):
            time.sleep(0.5)
            return index

    loader = StatefulDataLoader(Slow(), batch_size=2, num_workers=2)
    shield_workers(loader, rank=0)
    with interrupt_exit_codes():
        batches = iter(loader)
        next(batches)
        print("busy", flush=True)
        time.sleep(60)
    """
)


@pytest.mark.slow
@pytest.mark.skipif(sys.platform == "win32", reason="no process groups")
def test_a_signalled_command_exits_at_once_though_its_workers_ignore_sigterm():
    process = subprocess.Popen(
        [sys.executable, "-c", BUSY_WORKERS],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "busy"
        os.killpg(process.pid, signal.SIGTERM)
        _, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 143, errors[-3000:]
    assert "Traceback" not in errors, errors[-3000:]
