"""Which folder a command without `--trainer.default_root_dir` runs in.

Runs are grouped by experiment (`--experiment NAME`, default `default`):
`runs/<experiment>/<YYYY-MM-DD_HH-MM-SS>/` (`--runs_dir` moves `runs/`), one folder per `fit`, named when it starts,
so a plain rerun never meets an earlier run and a listing sorts oldest first (the names
of fits started in the same second get `-1`, `-2`, ...). The folder is claimed by making
it (an atomic `mkdir`), so two fits started at once never share one.

- `fit` gets a fresh folder; `fit --ckpt_path last` resumes the newest run of the
  experiment (the newest folder that holds checkpoints), and says which; `fit --ckpt_path
  <a run>/checkpoints/X.ckpt` keeps writing into that run.
- `validate`, `test`, `predict` with `--ckpt_path last|best` read the newest run and write
  into it (predictions land beside its checkpoints); with a checkpoint of a run, that run;
  otherwise a fresh folder.
- A folder given with `--trainer.default_root_dir` is used as it is (run_root.py refuses
  a second fit into it).
- A project from before run folders kept its run in `runs/default/` itself: that folder
  counts as the oldest run of experiment `default`; later runs are made inside it.

Every process of one run must agree on the folder, and only one of them names it:

- Lightning's own DDP launcher starts the other processes from this one: the launching
  process puts the folder it settled on (new, or the run it resumes) in
  `<PACKAGE>_RUN_ROOT`, which they inherit and take as it is.
- torchrun starts every process itself, on every node: `scripts/torchrun.sh` exports
  `<PACKAGE>_RUN_NAME` (for several nodes, the same `RUN_NAME` is given to each). Any
  other multi-process launch without it is refused, rather than each rank writing
  its own folder.
- Under SLURM (`srun`, configs/presets/slurm.yaml) the name carries the job and step id
  (`<date>_<time>_job<ID>.<STEP>`): task 0 makes it, the other tasks, on any node, wait for
  it on the shared filesystem; a requeued job, with the same ids, finds its folder again
  and resumes there from Lightning's `hpc_ckpt_*.ckpt`.
"""

import os
import re
import time
from datetime import datetime
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info

from ..platform.paths import DEFAULT_EXPERIMENT, RunLayout, experiments_folder, project_path
from ..platform.project import project_package
from ..platform.refusal import Refusal
from .ckpt_path import names_newest_run, run_of_checkpoint
from .run_root import is_launching_process

TIME_FORMAT = "%Y-%m-%d_%H-%M-%S"
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
RESERVED = {"sweeps"}  # runs/sweeps/ holds the sweeps' folders
SLURM_WAIT_S = 300  # how long SLURM tasks other than 0 wait for task 0's folder


def run_name_variable() -> str:
    """`<PACKAGE>_RUN_NAME`: a new run's folder name, from a launcher (scripts/torchrun.sh)."""
    return f"{project_package().upper()}_RUN_NAME"


def run_root_variable() -> str:
    """`<PACKAGE>_RUN_ROOT`: the run root, for the processes started here."""
    return f"{project_package().upper()}_RUN_ROOT"


def check_experiment(name: str) -> str:
    """The name, or exit: it must be one plain folder name (it becomes `runs/<name>/`)."""
    if not SAFE_NAME.fullmatch(name) or name in RESERVED:
        raise Refusal(
            f"experiment name {name!r} cannot be a folder name: its runs go to "
            "runs/<experiment>/. Use letters, digits, dots, dashes and underscores, "
            f"starting with a letter or digit (not {', '.join(sorted(RESERVED))}, which "
            "holds the sweeps)."
        )
    return name


def experiment_config(name: str) -> Path | None:
    """`configs/experiments/<name>.yaml` when `--experiment name` has one; exit if it has none.

    The default experiment needs no file; any other name must have one, so a misspelt
    name stops here instead of starting an unnamed series of runs.
    """
    experiments = experiments_folder()
    path = experiments / f"{check_experiment(name)}.yaml"
    if path.is_file() or name == DEFAULT_EXPERIMENT:
        return path if path.is_file() else None
    known = sorted(p.stem for p in experiments.glob("*.yaml")) if experiments.is_dir() else []
    raise Refusal(
        f"--experiment {name}: there is no {path}. An experiment is a config file "
        f"stacked on configs/default.yaml; its runs go to runs/{name}/. Choose one of: "
        f"{', '.join(known) or '(none yet)'}, or create {path.name} there (copy "
        "configs/experiments/example.yaml)."
    )


def experiment_folder(runs_dir: str, name: str) -> Path:
    return project_path(runs_dir) / check_experiment(name)


def holds_a_run(folder: Path) -> bool:
    """Checkpoints in `<folder>/checkpoints/` (temporary ones aside) or a SLURM requeue's."""
    layout = RunLayout(folder)
    if any(folder.glob("hpc_ckpt_*.ckpt")):
        return True
    if not layout.checkpoints.is_dir():
        return False
    return any(not entry.name.startswith(".") for entry in layout.checkpoints.iterdir())


def runs_of(folder: Path) -> list[Path]:
    """The runs of an experiment folder that hold checkpoints, oldest first.

    The folder itself first when it holds a run (a project's `runs/default` from before
    run folders); then its subfolders by name, which is by start time.
    """
    if not folder.is_dir():
        return []
    children = sorted((p for p in folder.iterdir() if p.is_dir()), key=_start_order)
    found = [child for child in children if holds_a_run(child)]
    return [folder, *found] if holds_a_run(folder) else found


def _start_order(path: Path) -> tuple[str, int, str]:
    """`<stamp>`, `<stamp>-1`, `<stamp>-2`, ..., `<stamp>-10`: numbers compared as numbers."""
    match = re.fullmatch(r"(.{19})-(\d+)(.*)", path.name)
    if match:
        return match[1], int(match[2]), match[3]
    return path.name[:19], 0, path.name[19:]


def newest_run(folder: Path, command: str, ckpt_path: str) -> Path:
    """The newest run in the experiment's folder, printed; exit when it has none."""
    experiment = folder.name
    runs = runs_of(folder)
    if not runs:
        raise Refusal(
            f"{command} --ckpt_path {ckpt_path}: experiment {experiment!r} has no run "
            f"with checkpoints in {folder}. Train one first (`fit` "
            f"{'' if experiment == DEFAULT_EXPERIMENT else f'--experiment {experiment} '}"
            "makes a new run folder there), or name the run: `--trainer.default_root_dir "
            "runs/<experiment>/<run>` or `--ckpt_path path/to/file.ckpt`."
        )
    rank_zero_info(
        f"--ckpt_path {ckpt_path}: the newest run of experiment {experiment!r}, {runs[-1]}"
    )
    return runs[-1]


def planned_root(command: str, folder: Path, ckpt_path: str | None) -> tuple[Path, bool]:
    """(the run root in the experiment's `folder`, whether it is a fresh folder still to be
    claimed with `claim_fresh`).

    Writes nothing (doctor parses a fit's flags without running it), except under SLURM,
    where task 0 makes the folder the other tasks wait for.
    """
    handed = os.environ.get(run_root_variable())
    if handed and not is_launching_process():
        return Path(handed), False
    if names_newest_run(ckpt_path):
        return newest_run(folder, command, ckpt_path), False
    run = run_of_checkpoint(ckpt_path)
    if run is not None:
        return run, False  # a run's checkpoint: the run goes on there
    given = os.environ.get(run_name_variable())
    if given:
        return folder / check_run_name(given), False
    if os.environ.get("SLURM_JOB_ID") and os.environ.get("SLURM_PROCID"):
        return _slurm_root(folder), False
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise Refusal(
            f"this process is one of {os.environ['WORLD_SIZE']} started by a launcher "
            f"(torchrun?), and nothing tells them which run folder to share. Set "
            f"{run_name_variable()} to the same name in every process (scripts/torchrun.sh "
            "does; on several nodes give it `RUN_NAME=<name>`), or pass "
            "`--trainer.default_root_dir runs/<experiment>/<run>`."
        )
    return folder / datetime.now().strftime(TIME_FORMAT), True


def check_run_name(name: str) -> str:
    if not SAFE_NAME.fullmatch(name):
        raise Refusal(
            f"{run_name_variable()}={name!r} cannot be a folder name. Use letters, "
            "digits, dots, dashes and underscores."
        )
    return name


def claim_fresh(root: Path) -> Path:
    """Make the fresh run folder `root`, or `root-1`, `root-2`, ... when one is taken."""
    root.parent.mkdir(parents=True, exist_ok=True)
    candidate, n = root, 0
    while True:
        try:
            candidate.mkdir()
            break
        except FileExistsError:
            n += 1
            candidate = root.with_name(f"{root.name}-{n}")
    return candidate


def hand_down(root: Path) -> None:
    """The run root, in this process's environment, which Lightning's DDP launcher copies
    into the processes it starts: they take it in `planned_root`, whatever else changed
    meanwhile (a newer run of the experiment)."""
    os.environ[run_root_variable()] = str(root)


def forget_handed_down() -> None:
    """Once the command is over: no later process started from this one inherits it."""
    os.environ.pop(run_root_variable(), None)


def _slurm_root(folder: Path) -> Path:
    """`<stamp>_job<ID>.<STEP>`: made by task 0, found by the others and by a requeue."""
    suffix = f"_job{os.environ['SLURM_JOB_ID']}.{os.environ.get('SLURM_STEP_ID', '0')}"
    deadline = time.monotonic() + SLURM_WAIT_S
    while True:
        found = sorted(folder.glob(f"*{suffix}")) if folder.is_dir() else []
        if found:
            return found[-1]
        if os.environ["SLURM_PROCID"] == "0":
            root = folder / f"{datetime.now().strftime(TIME_FORMAT)}{suffix}"
            root.mkdir(parents=True, exist_ok=True)
            return root
        if time.monotonic() > deadline:
            raise Refusal(
                f"SLURM task {os.environ['SLURM_PROCID']} waited {SLURM_WAIT_S} s for "
                f"task 0 to make the run folder {folder}/*{suffix}. The run folder must be on "
                "a filesystem every node shares; or pass `--trainer.default_root_dir`."
            )
        time.sleep(1)
