"""`sweep SPEC.yaml [--trials N] [--launcher local|slurm] [--jobs K] [fit options]`.

Everything is checked before the first trial starts: the spec (spec.py), the fit options
and every edge of the search space, parsed as `fit` parses them (nothing is built), and,
on a rerun, that the journal is intact and the spec still describes the sweep in the folder.
"""

import argparse
import io
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

from ...platform.paths import project_path
from ...platform.project import program
from ...platform.refusal import Refusal
from .spec import SpecError, SweepSpec, fit_value, load_spec

SWEEPS_ROOT = "runs/sweeps"
# fit options the sweep sets itself, per trial
OWN_OPTIONS = {
    "--trainer.default_root_dir": "each trial's run root is runs/sweeps/<name>/trial-NNNN/",
    "--ckpt_path": "a rerun of the sweep resumes unfinished trials with --ckpt_path last itself",
}


def parser() -> argparse.ArgumentParser:
    from . import __doc__ as overview

    parser = argparse.ArgumentParser(
        prog=f"{program()} sweep",
        description=overview,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # `--trial 4` must not silently mean --trials
    )
    parser.add_argument("spec", type=Path, help="the sweep spec (see configs/sweeps/)")
    parser.add_argument("--trials", type=int, help="finished trials to reach (default: the spec's)")
    parser.add_argument("--launcher", choices=("local", "slurm"), default="local")
    parser.add_argument(
        "--jobs", type=int, help="trials at once (local: default 1; slurm: array parallelism)"
    )
    parser.add_argument("--name", help="the study's name (default: the spec's name or file name)")
    parser.add_argument("--dir", type=Path, help="the sweep's folder (default: runs/sweeps/<name>)")
    slurm = parser.add_argument_group("slurm (override the spec's slurm: section)")
    slurm.add_argument("--partition")
    slurm.add_argument("--gpus-per-trial", type=int, dest="gpus_per_node")
    slurm.add_argument("--time-min", type=int, dest="timeout_min", help="time limit per job")
    return parser


def sweep(argv: Sequence[str]) -> int:
    args, cli_options = parser().parse_known_args(list(argv))
    try:
        return _sweep(args, cli_options)
    except SpecError as error:
        raise Refusal(str(error)) from None


def _sweep(args: argparse.Namespace, cli_options: list[str]) -> int:
    from .launch import require_sbatch, run_local, run_slurm
    from .study import Sweep

    if args.launcher == "slurm":
        require_sbatch()
    spec = load_spec(args.spec, args.name)
    target = args.trials or spec.trials
    if target is None or target < 1:
        raise SpecError(
            f"how many trials? Give `--trials N` (at least 1) or `trials: N` in {args.spec}."
        )
    if args.jobs is not None and args.jobs < 1:
        raise SpecError(f"--jobs {args.jobs}: run at least 1 trial at a time.")
    fit_options = [*spec.fit_options, *cli_options]
    _check_own_options(fit_options, spec)
    resolved = check_fit_options(fit_options, spec)
    section = resolved.get("checkpoint") or {}
    metric = spec.metric or section.get("monitor")
    if not metric:
        raise SpecError(
            f"the sweep has no metric: set `metric:` in {args.spec}, or checkpoint.monitor in "
            "the config (a key your validation_step logs)."
        )
    direction = spec.direction or ("maximize" if section.get("mode") == "max" else "minimize")
    root = project_path(args.dir) if args.dir else project_path(SWEEPS_ROOT) / spec.name
    sweep = Sweep(spec, root, metric, direction, fit_options)
    say = _printer()
    say(f"sweep dir {sweep.root}  ({direction} {metric}, {target} trials, {args.launcher})")
    sweep.root.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock, Timeout

    lock = FileLock(sweep.lock)
    try:
        lock.acquire(timeout=0)
    except Timeout:
        raise SpecError(
            f"another `sweep` process is running the sweep in {sweep.root} (it holds "
            f"{sweep.lock}). Wait for it or stop it (Ctrl-C), then rerun; to run another "
            "sweep at the same time give it its own `--name`."
        ) from None
    try:
        if repaired := sweep.check_journal():
            say(repaired)
        if args.launcher == "slurm":
            flags = {"partition": args.partition, "gpus_per_node": args.gpus_per_node}
            status = run_slurm(
                sweep, target, args.jobs, {**flags, "timeout_min": args.timeout_min}, say
            )
        else:
            status = run_local(sweep, target, args.jobs or 1, say)
        return _summary(sweep, target, say) if status == 0 else status
    finally:
        lock.release()


def _check_own_options(options: list[str], spec: SweepSpec) -> None:
    for option in options:
        name = option.split("=", 1)[0]
        if name in OWN_OPTIONS:
            raise SpecError(f"{name} is set by the sweep ({OWN_OPTIONS[name]}); leave it out.")
        if name == "--seed_everything" and spec.seeds:
            raise SpecError(
                f"--seed_everything and the spec's `seeds: {spec.seeds}` both set the seed; "
                "keep one (the seeds repeat each trial, one fit per seed)."
            )


def check_fit_options(options: list[str], spec: SweepSpec) -> dict[str, Any]:
    """Parse `fit` with the options at every edge of the space; the resolved config.

    Each parse is `fit`'s own (doctor's parse-only CLI): jsonargparse checks names and
    types against the real signatures, and nothing is built. One point sets every parameter to its first edge;
    then each other edge (the high end, every other choice) is tried alone.
    """
    first = {key: param.corners()[0] for key, param in spec.space.items()}
    points = [first] + [
        {**first, key: value} for key, param in spec.space.items() for value in param.corners()[1:]
    ]
    seed = [f"--seed_everything={spec.seeds[0]}"] if spec.seeds else []
    resolved: dict[str, Any] = {}
    for point in points:
        values = [f"--{k}={fit_value(spec.space[k].decode(v))}" for k, v in point.items()]
        config, err = _parse([*options, *seed, *values])
        if config is None:
            raise SpecError(
                f"`fit` refuses the sweep's options with the trial values {' '.join(values)}. "
                f"Each key under `space:` in {spec.path} is a `fit` option without its "
                f"leading `--` (see `{program()} fit --help`); fix the key, its "
                f"values, or the options given to the sweep (its own flags: `{program()} sweep --help`; "
                f"any other goes to every fit). fit says:\n{_fit_error(err)}"
            )
        resolved = resolved or config
    return resolved


def _parse(options: list[str]) -> tuple[dict[str, Any] | None, str]:
    """(the resolved config, "") or (None, why not), as doctor parses: the library's
    refusal, or the error jsonargparse printed before it exited."""
    from ...run.resolve import resolve_config

    err = io.StringIO()
    try:
        with redirect_stderr(err):
            return resolve_config(options), ""
    except Refusal as refusal:
        return None, str(refusal)
    except SystemExit:
        return None, err.getvalue()


def _fit_error(stderr: str) -> str:
    """The parser's own diagnosis: from its last `error:` line on, without the usage."""
    lines = stderr.rstrip().splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("error:")]
    return "\n".join("  " + line for line in lines[starts[-1] if starts else 0 :])


def _printer() -> Callable[[str], None]:
    def say(message: str) -> None:
        print(f"[sweep] {message}", flush=True)

    return say


def _summary(sweep: Any, target: int, say: Callable[[str], None]) -> int:
    import optuna

    study = sweep.study(sampling=False)
    trials = study.get_trials(deepcopy=False)
    counts = {
        state.name.lower(): sum(t.state == state for t in trials)
        for state in optuna.trial.TrialState
        if any(t.state == state for t in trials)
    }
    finished = sum(t.state.is_finished() for t in trials)
    say(
        f"{finished} of {target} trials finished: "
        + ", ".join(f"{n} {s}" for s, n in counts.items())
    )
    complete = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if complete:
        best = study.best_trial
        params = ", ".join(
            f"{k}={v}" for k, v in best.user_attrs.get("overrides", best.params).items()
        )
        say(f"best: trial {best.number}, {sweep.metric} {best.value:.6g} ({params})")
    say(f"compare: {program()} compare {sweep.root} --plot {sweep.root / 'compare.png'}")
    if finished < target:
        say("some trials did not finish: rerun the same command to resume them")
        return 1
    return 0
