"""A sweep's trials: `ask_trial` starts one, `TrialJob` runs it to the study's `tell`.

Trials are asked by the one `sweep` process (one sampler, so a seeded sampler never
repeats itself); `TrialJob` runs a given trial, in a thread of the local launcher or as a
task of a SLURM job array (submitit):

1. Per seed (one fit without `seeds:`), a subprocess `python -m <package> fit <the sweep's
   fit options> <the trial's values> --trainer.default_root_dir <trial root>`, its output
   appended to `<trial root>/fit.log`. A root that already holds `checkpoints/last.ckpt`
   is resumed with `--ckpt_path last`: a trial stopped by a kill, Ctrl-C or preemption
   continues from its last checkpoint, in the same root and logger version. A fresh trial
   always gets a root of its own.
2. The value: the best `metric` recorded by the trial's `checkpoint:` callback (the sweep
   sets `checkpoint.monitor` / `checkpoint.mode` to its metric), the mean over seeds.
3. `study.tell`: complete, pruned (TrialPruning stopped it) or failed (the fit exited with
   an error; the trial's `error` attribute names its log).

A fit that exits 130 or 143 (SIGINT, SIGTERM), or that was running when the sweep was
asked to stop, was interrupted, not failed: the trial stays RUNNING for the next `sweep`
run to resume, or is resumed at once when only the fit itself was stopped.
"""

import json
import os
import shlex
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from submitit.helpers import Checkpointable

from ...checkpoints.load import load_checkpoint
from ...platform.paths import RunLayout
from ...platform.project import project_package
from ...run.run_record import best_score
from .pruning import PRUNED_AT, TrialPruning
from .spec import make_sampler
from .study import Sweep, trial_id

INTERRUPTED_CODES = {130, 143, -signal.SIGINT, -signal.SIGTERM}
RESUMES_IN_A_ROW = 3  # a fit interrupted more often than this, alone, is a failure
COMPLETE, PRUNED, FAILED, INTERRUPTED = "complete", "pruned", "failed", "interrupted"


def ask_trial(sweep: Sweep, study: Any) -> int:
    """A new trial, its values sampled now and recorded (user attrs: root, overrides).

    A seeded spec gets a sampler seeded for this trial (make_sampler), so a resumed sweep
    draws what an uninterrupted one would. The trial's number is the study's count of
    trials: only the `sweep` process holding the sweep's lock asks, one trial at a time.
    """
    if sweep.spec.sampler.get("seed") is not None:
        study.sampler = make_sampler(sweep.spec, trial=len(study.get_trials(deepcopy=False)))
    trial = study.ask(sweep.distributions())
    trial.set_user_attr("root", str(sweep.trial_root(trial.number).relative_to(sweep.root)))
    trial.set_user_attr(
        "overrides", {key: sweep.spec.space[key].decode(v) for key, v in trial.params.items()}
    )
    number: int = trial.number
    return number


class TrialJob(Checkpointable):
    """Runs one trial (see the module's doc); submitit requeues it on preemption.

    Args:
        sweep: the sweep it belongs to.
        number: the trial, asked by `ask_trial` (new) or left RUNNING by an earlier run.
    """

    def __init__(self, sweep: Sweep, number: int) -> None:
        self.sweep, self.number = sweep, number
        self.package = project_package()  # named here: a SLURM job runs under submitit's main
        self.env: dict[str, str] = {}  # added to the fit's environment (a GPU per slot)
        self.stop = threading.Event()  # set: the sweep is stopping, leave the trial RUNNING
        self.say: Callable[[str], None] = print
        self._process: subprocess.Popen[bytes] | None = None
        self._on_slurm = False

    def __getstate__(self) -> dict[str, Any]:
        return {
            "sweep": self.sweep,
            "number": self.number,
            "env": self.env,
            "package": self.package,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        # Only the trial travels (to a SLURM job, or into submitit's checkpoint): no process.
        self.sweep, self.number, self.env = state["sweep"], state["number"], state["env"]
        self.package = state["package"]
        self.stop, self.say = threading.Event(), print
        self._process, self._on_slurm = None, False

    def __call__(self) -> str:
        """A SLURM array task (submitit calls it)."""
        self._on_slurm = True
        return self.run()

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Submitit's hook on preemption or time-out: stop the fit cleanly, then requeue.

        The fit writes last.ckpt on SIGTERM (resume.InterruptCheckpoint); the requeued job
        resumes it from there.
        """
        self.stop.set()
        self.terminate()
        deadline = time.monotonic() + 60
        while self._process is not None and self._process.poll() is None:
            if time.monotonic() > deadline:
                break
            time.sleep(0.2)
        return super().checkpoint(*args, **kwargs)

    def terminate(self) -> None:
        """SIGTERM to the running fit, which checkpoints and exits."""
        if self._process is not None and self._process.poll() is None:
            self._process.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()

    def run(self) -> str:
        """Train the trial (see the module's doc); its outcome."""
        import optuna

        study = self.sweep.study(sampling=False)
        storage = self.sweep.storage()  # Optuna's storage API sets attributes of a trial by id
        tid = trial_id(storage, study.study_name, self.number)
        trial = storage.get_trial(tid)
        if trial.user_attrs.get(PRUNED_AT) is not None:  # pruned, then the sweep died
            study.tell(self.number, state=optuna.trial.TrialState.PRUNED)
            return PRUNED
        values: dict[str, float] = dict(trial.user_attrs.get("seed_values", {}))
        for index, seed in enumerate(self.sweep.spec.seeds or [None]):
            if str(seed) in values:
                continue
            outcome = self._fit(storage, tid, trial.params, seed, prune=index == 0)
            for _ in range(RESUMES_IN_A_ROW):
                if outcome != INTERRUPTED or self.stop.is_set():
                    break
                self.say(f"trial {self.number}: its fit was interrupted alone; resuming it")
                outcome = self._fit(storage, tid, trial.params, seed, prune=index == 0)
            if outcome == INTERRUPTED and self.stop.is_set():
                return INTERRUPTED
            root = self.sweep.trial_root(self.number, seed)
            if outcome != COMPLETE:
                how = "was interrupted again and again" if outcome == INTERRUPTED else "failed"
                return self._fail(study, storage, tid, f"its fit {how}: see {root / 'fit.log'}")
            if storage.get_trial(tid).user_attrs.get(PRUNED_AT) is not None:
                study.tell(self.number, state=optuna.trial.TrialState.PRUNED)
                return PRUNED
            value = _best(root, self.sweep.metric)
            if value is None:
                return self._fail(
                    study, storage, tid, f"no best {self.sweep.metric} was recorded in {root}"
                )
            values[str(seed)] = value
            storage.set_trial_user_attr(tid, "seed_values", values)
        study.tell(self.number, statistics.fmean(values.values()))
        return COMPLETE

    def _fail(self, study: Any, storage: Any, tid: int, reason: str) -> str:
        import optuna

        storage.set_trial_user_attr(tid, "error", reason)
        study.tell(self.number, state=optuna.trial.TrialState.FAIL)
        return FAILED

    def _fit(
        self, storage: Any, tid: int, params: dict[str, Any], seed: int | None, prune: bool
    ) -> str:
        root = self.sweep.trial_root(self.number, seed)
        resume = RunLayout(root).last.is_file()
        command = [
            sys.executable,
            "-m",
            self.package,
            "fit",
            "--trainer.enable_progress_bar=false",  # the log is a file: no bar redrawn in it
            *self.sweep.fit_options,
            *self.sweep.fit_args(params),
            f"--trainer.default_root_dir={root}",
            f"--checkpoint.monitor={self.sweep.metric}",
            f"--checkpoint.mode={'min' if self.sweep.direction == 'minimize' else 'max'}",
        ]
        if seed is not None:
            command.append(f"--seed_everything={seed}")
        if prune and self.sweep.spec.pruner is not None:
            pruning = {
                "class_path": f"{TrialPruning.__module__}.TrialPruning",
                "init_args": {
                    "journal": str(self.sweep.journal),
                    "study_name": self.sweep.spec.name,
                    "trial": self.number,
                    "monitor": self.sweep.metric,
                    "pruner": self.sweep.spec.pruner,
                },
            }
            command.append(f"--trainer.callbacks+={json.dumps(pruning)}")
        if resume:
            command.append("--ckpt_path=last")
        if self.stop.is_set():  # the sweep is stopping: start nothing more
            return INTERRUPTED
        root.mkdir(parents=True, exist_ok=True)
        what = "resuming from last.ckpt" if resume else "started"
        seed_text = "" if seed is None else f" (seed {seed})"
        self.say(f"trial {self.number}{seed_text}: {what} in {root}")
        started = time.time()
        with (root / "fit.log").open("a", encoding="utf-8") as log:
            log.write(f"\n$ {shlex.join(command)}\n")
            log.flush()
            self._process = subprocess.Popen(
                command,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self._environment(),
                # On SLURM, the job's signals reach the fit too: submitit's USR2 would kill it
                # (its default action); SIGTERM stays, so the fit checkpoints on preemption.
                preexec_fn=_ignore_usr2 if self._on_slurm else None,
            )
            if self.stop.is_set():  # stopped while it started: it missed the signal
                self.terminate()
            while (code := self._process.poll()) is None:
                time.sleep(0.2)
        fits = storage.get_trial(tid).user_attrs.get("fits", [])
        record = {"seed": seed, "start": started, "end": time.time(), "exit": code}
        storage.set_trial_user_attr(tid, "fits", [*fits, {**record, "resumed": resume}])
        if self.stop.is_set() or code in INTERRUPTED_CODES:
            return INTERRUPTED
        return COMPLETE if code == 0 else FAILED

    def _environment(self) -> dict[str, str]:
        env = {**os.environ, **self.env}
        if self._on_slurm:
            # The fit is one plain process of this job (Lightning launches DDP itself if the
            # trial has several GPUs): Lightning's SLURM environment would take this task's
            # ranks and requeue the job itself, which submitit does.
            env = {key: value for key, value in env.items() if not key.startswith("SLURM_")}
        return env


def _best(root: Any, metric: str) -> float | None:
    path = RunLayout(root).last
    return best_score(load_checkpoint(path), metric) if path.is_file() else None


def _ignore_usr2() -> None:
    signal.signal(signal.SIGUSR2, signal.SIG_IGN)
