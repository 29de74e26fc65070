"""Where a sweep's trials run: here (`--launcher local`) or as a SLURM job array (`slurm`).

Both bring the study to exactly N finished trials (complete, pruned or failed): trials
left RUNNING by an earlier run are resumed first, then new ones are asked until N.

- local: `--jobs K` threads, each running one trial's fit processes at a time. With GPUs,
  each slot gets one (`CUDA_VISIBLE_DEVICES`); on CPU, each fit gets 1/K of the cores'
  threads. The first Ctrl-C (or SIGTERM) sends SIGTERM to every running fit, which writes
  `last.ckpt` and exits; the trials stay RUNNING and the next run resumes them. A second
  Ctrl-C kills the fits (they resume from their previous checkpoint).
- slurm: one submitit array (`slurm_array_parallelism` = `--jobs`), one task per trial,
  each a `TrialJob` that submitit requeues on preemption or time-out; this process only
  waits for them. Ctrl-C leaves the jobs running; rerunning waits for them again and
  resubmits trials whose jobs are gone.
"""

import os
import shutil
import signal
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any

from ...platform.refusal import Refusal
from .study import Sweep, trial_id
from .trial import TrialJob, ask_trial

# SLURM states of a job that may still run its trial (sacct's names).
SLURM_ALIVE = {
    "PENDING",
    "RUNNING",
    "REQUEUED",
    "REQUEUE_FED",
    "REQUEUE_HOLD",
    "CONFIGURING",
    "COMPLETING",
    "RESIZING",
    "SUSPENDED",
}


def plan(sweep: Sweep, target: int) -> tuple[Any, list[Any], int]:
    """The study, its RUNNING trials and how many new trials make `target` finished ones."""
    import optuna

    study = sweep.study()
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == optuna.trial.TrialState.RUNNING]
    finished = sum(t.state.is_finished() for t in trials)
    return study, running, max(0, target - finished - len(running))


def run_local(sweep: Sweep, target: int, jobs: int, say: Callable[[str], None]) -> int:
    """Run the trials here, `jobs` at a time; the exit status (130/143: stopped)."""
    study, running, new = plan(sweep, target)
    queue = deque(TrialJob(sweep, t.number) for t in running)
    if running:
        say(
            f"resuming {len(running)} unfinished trial(s): {', '.join(str(t.number) for t in running)}"
        )
    stop, lock = threading.Event(), threading.Lock()
    active: set[TrialJob] = set()
    errors: list[BaseException] = []
    stopped_by: list[int] = []

    def next_job() -> TrialJob | None:
        # New trials are asked only when a slot is free: each is sampled knowing every
        # trial finished before it, from the one study (and sampler) of this process.
        nonlocal new
        with lock:
            if stop.is_set():
                return None
            if not queue and new > 0:
                new -= 1
                queue.append(TrialJob(sweep, ask_trial(sweep, study)))
            job = queue.popleft() if queue else None
            if job is not None:
                active.add(job)
            return job

    def worker(slot: int) -> None:
        while (job := next_job()) is not None:
            job.stop, job.say, job.env = stop, say, _slot_environment(slot, jobs)
            try:
                _report(sweep, study, job, job.run(), say)
            except BaseException as error:  # a bug, not a trial's failure: stop the sweep
                errors.append(error)
                stop.set()
            finally:
                with lock:
                    active.discard(job)

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Only flags and signals here: the journal is written by the worker threads.
        stopped_by.append(signum)
        stop.set()
        for job in list(active):
            job.terminate() if len(stopped_by) == 1 else job.kill()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    threads = [threading.Thread(target=worker, args=(slot,), daemon=True) for slot in range(jobs)]
    try:
        for thread in threads:
            thread.start()
        while any(thread.is_alive() for thread in threads):
            for thread in threads:
                thread.join(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if errors:
        raise errors[0]
    if stopped_by:
        say(
            "stopped: the running trials wrote last.ckpt and stay unfinished; rerun the same "
            "command to resume them"
        )
        return 128 + stopped_by[0]
    return 0


def _slot_environment(slot: int, jobs: int) -> dict[str, str]:
    """One GPU per slot when there are GPUs and several slots; else a share of the CPU threads."""
    if jobs == 1:
        return {}
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if not visible and "CUDA_VISIBLE_DEVICES" not in os.environ:
        import torch

        visible = [str(i) for i in range(torch.cuda.device_count())]
    if visible:
        return {"CUDA_VISIBLE_DEVICES": visible[slot % len(visible)]}
    if "OMP_NUM_THREADS" in os.environ:
        return {}
    return {"OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // jobs))}


def _report(
    sweep: Sweep, study: Any, job: TrialJob, outcome: str, say: Callable[[str], None]
) -> None:
    if outcome == "interrupted":
        return
    trial = study.get_trials(deepcopy=False)[job.number]
    if outcome == "complete":
        best = study.best_trial
        say(
            f"trial {job.number}: {sweep.metric} {trial.value:.6g}  "
            f"(best so far: trial {best.number}, {best.value:.6g})"
        )
    elif outcome == "pruned":
        say(f"trial {job.number}: pruned at epoch {trial.user_attrs.get('pruned_at_epoch')}")
    else:
        say(f"trial {job.number}: failed, {trial.user_attrs.get('error')}")


def slurm_parameters(sweep: Sweep, jobs: int | None, flags: dict[str, Any]) -> dict[str, Any]:
    """submitit's SlurmExecutor parameters from the spec's `slurm:` section and the flags."""
    settings = {**sweep.spec.slurm, **{k: v for k, v in flags.items() if v is not None}}
    parameters: dict[str, Any] = {
        "job_name": f"sweep-{sweep.spec.name}",
        "nodes": 1,
        "ntasks_per_node": 1,  # one task: the trial's fit launches its own DDP processes
        "time": settings.pop("timeout_min", 60),
    }
    if "mem_gb" in settings:
        parameters["mem"] = f"{settings.pop('mem_gb')}GB"
    if jobs is not None:
        settings["array_parallelism"] = jobs
    return {**parameters, **settings}


def require_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise Refusal(
            "--launcher slurm needs SLURM's `sbatch` on PATH: run the sweep on the "
            "cluster's login node, or use --launcher local."
        )


def run_slurm(
    sweep: Sweep, target: int, jobs: int | None, flags: dict[str, Any], say: Callable[[str], None]
) -> int:
    """Submit the trials as one job array and wait for it; the exit status."""
    require_sbatch()
    import submitit

    folder = sweep.slurm_folder / "%j"
    study, running, new = plan(sweep, target)
    alive: list[str] = []  # job ids still on the cluster
    orphans: list[int] = []  # trials whose job is gone
    for trial in running:
        job_id = trial.user_attrs.get("slurm_job")
        state = submitit.SlurmJob(folder, job_id).state if job_id else "NONE"
        if state in SLURM_ALIVE:
            alive.append(job_id)
        else:
            orphans.append(trial.number)
    waiting: list[Any] = [submitit.SlurmJob(folder, job_id) for job_id in alive]
    if alive:
        say(f"waiting for {len(alive)} trial job(s) still on the cluster: {', '.join(alive)}")
    # An array's trials are all sampled now, before any of them ran: the sampler learns
    # from the trials finished before this submission (an earlier run of the sweep).
    numbers = orphans + [ask_trial(sweep, study) for _ in range(new)]
    submitted = []
    if numbers:
        executor = submitit.SlurmExecutor(folder=folder)
        executor.update_parameters(**slurm_parameters(sweep, jobs, flags))
        with executor.batch():
            submitted = [executor.submit(TrialJob(sweep, number)) for number in numbers]
        storage = sweep.storage()
        for number, job in zip(numbers, submitted, strict=True):
            storage.set_trial_user_attr(
                trial_id(storage, sweep.spec.name, number), "slurm_job", job.job_id
            )
        resumed = f" ({len(orphans)} resumed)" if orphans else ""
        say(
            f"submitted {len(numbers)} trial job(s){resumed}: array {submitted[0].job_id.split('_')[0]}, "
            f"logs in {sweep.slurm_folder}"
        )
    try:
        while not all(job.done() for job in [*waiting, *submitted]):
            time.sleep(2)
    except KeyboardInterrupt:
        say(
            "stopped waiting: the jobs keep running on the cluster. Rerun the same command to "
            "wait for them again (nothing is resubmitted twice), or `scancel` the array."
        )
        return 130
    for job in [*waiting, *submitted]:
        try:
            job.result()
        except Exception as error:  # submitit re-raises what ended the job, of any type
            reason = (str(error).strip().splitlines() or [type(error).__name__])[-1]
            say(
                f"job {job.job_id} ended without finishing its trial ({reason}); log: {job.paths.stderr}"
            )
    return 0
