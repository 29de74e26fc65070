"""A stand-in for SLURM's commands, to test `sweep --launcher slurm` on one machine.

`install(folder, state)` writes `sbatch`, `srun`, `sacct`, `scontrol` and `scancel` into
`folder` (put it first on PATH), each calling this file with its name; the state lives in
`$FAKE_SLURM_STATE`. It does what submitit needs of SLURM:

- `sbatch FILE` keeps a copy of FILE in `submissions/`, prints `Submitted batch job N` and
  runs each array task (`#SBATCH --array=0-K%P`) at once in the background, as `bash FILE`
  with the SLURM_* variables of that task, in a session of its own. A task whose job asked
  for a requeue (`scontrol requeue ID`) is run again when it ends, as SLURM does.
- `srun [--output F] [--error F] ... CMD` runs CMD with its output appended to F (with
  %A, %a, %j, %t filled in) and records CMD's pid in `<ID>.pid`.
- `sacct -j N` reports each task's state (RUNNING, COMPLETED, FAILED); `scontrol requeue`
  and `scancel` are recorded in `calls.log`.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

STATE = Path(os.environ.get("FAKE_SLURM_STATE", "."))


COMMANDS = ("sbatch", "srun", "sacct", "scontrol", "scancel")


def install(folder: Path, state: Path) -> dict[str, str]:
    """The commands in `folder`; the environment variables that put them to use."""
    folder.mkdir(parents=True, exist_ok=True)
    state.mkdir(parents=True, exist_ok=True)
    for command in COMMANDS:
        path = folder / command
        path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{__file__}" {command} "$@"\n')
        path.chmod(0o755)
    return {"PATH": f"{folder}{os.pathsep}{os.environ['PATH']}", "FAKE_SLURM_STATE": str(state)}


def main() -> int:
    command, args = sys.argv[1], sys.argv[2:]
    with (STATE / "calls.log").open("a") as log:
        log.write(" ".join([command, *args]) + "\n")
    if command == "task":  # the background runner of one array task
        return _run_task(*args)
    return {"sbatch": _sbatch, "srun": _srun, "sacct": _sacct, "scontrol": _scontrol}.get(
        command, lambda _: 0
    )(args)


def _sbatch(args: list[str]) -> int:
    script = Path(args[-1])
    counter = STATE / "next_job_id"
    job = int(counter.read_text()) if counter.exists() else 1000
    counter.write_text(str(job + 1))
    (STATE / "submissions").mkdir(exist_ok=True)
    shutil.copy(script, STATE / "submissions" / f"{job}.sh")
    array = re.search(r"^#SBATCH --array=(\d+)-(\d+)", script.read_text(), re.MULTILINE)
    tasks = [str(i) for i in range(int(array[1]), int(array[2]) + 1)] if array else ["-"]
    for task in tasks:
        subprocess.Popen(
            [sys.executable, __file__, "task", str(job), task, str(script)],
            start_new_session=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    print(f"Submitted batch job {job}")
    return 0


def _job_id(job: str, task: str) -> str:
    return job if task == "-" else f"{job}_{task}"


def _run_task(job: str, task: str, script: str) -> int:
    job_id = _job_id(job, task)
    env = {
        **os.environ,
        "SLURM_JOB_ID": job if task == "-" else str(int(job) * 1000 + int(task)),
        "SLURM_JOB_NAME": "fake",
        "SLURM_NTASKS": "1",
        "SLURM_PROCID": "0",
        "SLURM_LOCALID": "0",
        "SLURM_NODEID": "0",
        "SLURM_JOB_NUM_NODES": "1",
        "SLURM_JOB_NODELIST": "localhost",
        "SLURM_SUBMIT_DIR": os.getcwd(),
    }
    if task != "-":
        env.update(SLURM_ARRAY_JOB_ID=job, SLURM_ARRAY_TASK_ID=task)
    requeue = STATE / f"{job_id}.requeue"
    while True:
        (STATE / f"{job_id}.state").write_text("RUNNING")
        code = subprocess.call(["bash", script], env=env)
        if not requeue.exists():
            break
        requeue.unlink()
        (STATE / f"{job_id}.state").write_text("REQUEUED")
    (STATE / f"{job_id}.state").write_text("COMPLETED" if code == 0 else "FAILED")
    return code


def _srun(args: list[str]) -> int:
    files = {"--output": None, "--error": None}
    while args and args[0].startswith("--"):
        option = args.pop(0)
        if option in files:
            files[option] = args.pop(0)
    job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    job_id = _job_id(job or os.environ["SLURM_JOB_ID"], task or "-")
    fill = {"%A": job or "", "%a": task or "", "%j": os.environ["SLURM_JOB_ID"], "%t": "0"}
    for option, target in (("--output", 1), ("--error", 2)):
        path = files[option]
        if path:
            for key, value in fill.items():
                path = path.replace(key, value)
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), target)
    (STATE / f"{job_id}.pid").write_text(str(os.getpid()))
    os.execvp(args[0], args)


def _sacct(args: list[str]) -> int:
    jobs = [args[i + 1] for i, arg in enumerate(args) if arg == "-j"]
    print("JobID|State|NodeList")
    for path in sorted(STATE.glob("*.state")):
        job_id = path.name.removesuffix(".state")
        if job_id.split("_")[0] in jobs:
            print(f"{job_id}|{path.read_text()}|localhost")
    return 0


def _scontrol(args: list[str]) -> int:
    if args[:1] == ["requeue"]:
        (STATE / f"{args[1]}.requeue").touch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
