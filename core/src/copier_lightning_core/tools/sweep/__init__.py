"""`sweep`: hyperparameter search with Optuna, every trial an ordinary `fit`.

    python -m <package> sweep configs/sweeps/example.yaml --trials 8 [--jobs 2] [fit options]
    python -m <package> sweep configs/sweeps/example.yaml --launcher slurm --jobs 4

The spec (configs/sweeps/) names the searched config keys and their ranges, the metric,
Optuna's sampler and pruner, and optional seeds each trial repeats over. The study lives in
`runs/sweeps/<name>/optuna.journal` (a file: no database; `optuna-dashboard` opens it);
each trial is a `fit` subprocess in its own run root `runs/sweeps/<name>/trial-NNNN/`, with
checkpoints, logs, provenance and the command that made it, as any run. Fit options given
here apply to every trial.

Rerunning the same command resumes the sweep: finished trials are kept, a trial that was
running resumes from its last.ckpt (`--ckpt_path last`, same root), and the study ends
with exactly N finished trials. Ctrl-C stops every running trial cleanly (each writes
last.ckpt) for the next run to resume. With a pruner, each trial reports its metric after
every validation and stops early when pruned (one process per trial; under DDP pruning is
off). `--launcher slurm` runs the trials as one SLURM job array through submitit, with
requeue and exact resume on preemption. `compare runs/sweeps/<name>` tables and plots them.

Optuna, optuna-integration, submitit and matplotlib are the `sweep` extra:
`pip install -e ".[sweep]"`. This package imports none of them until a sweep runs.
"""

from .command import sweep

__all__ = ["sweep"]
