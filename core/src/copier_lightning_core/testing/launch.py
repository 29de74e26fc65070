"""Start `python -m <package> ARGS` in a process of its own, without starting an interpreter.

A test that kills, signals or pauses a run needs the run in another process. A fresh
interpreter that imports torch, Lightning and the library costs about 3.5 s of CPU before
the command does anything: more than many of the short runs the tests start. The standard
library's forkserver pays it once per test process: a server that imported them forks
each command, which then runs the package's `__main__` as `python -m` does (runpy), in
the folder and environment given, with its own process id, process group (optional) and
exit status. A kill, a signal to its group and the exit status are real, and its import
path is the one a fresh interpreter would start with; only the imports are shared.

What still needs a fresh interpreter starts one: DDP's second rank (Lightning launches it
with `python -m`), a sweep's trials, and any command whose point is how a shell starts it.
"""

import atexit
import contextlib
import functools
import json
import multiprocessing
import os
import runpy
import signal
import subprocess
import sys
import tempfile
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from multiprocessing.context import ForkServerContext
from pathlib import Path

# What every command imports; an ImportError here is ignored by the server.
PRELOAD = ["torch", "lightning.pytorch", "copier_lightning_core.cli"]


@functools.cache
def _forkserver() -> ForkServerContext:
    """The context whose server this process's commands are forked from (started by the
    first of them, ended with this process)."""
    server = multiprocessing.get_context("forkserver")
    server.set_forkserver_preload(PRELOAD)
    return server


def _run_module(
    package: str,
    args: list[str],
    cwd: str,
    env: dict[str, str],
    fresh_path: list[str],
    stdout: str,
    stderr: str,
    own_group: bool,
) -> None:
    """In the forked process: what `cd CWD && env ENV python -m PACKAGE ARGS` does, with
    `fresh_path` the import path a fresh interpreter in ENV starts with (_fresh_path)."""
    if own_group:
        os.setsid()  # a process group of its own, as a scheduler's job has
    for fd, file in ((1, stdout), (2, stderr)):
        written = os.open(file, os.O_WRONLY | os.O_APPEND)
        os.dup2(written, fd)
        os.close(written)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = [cwd, *fresh_path]  # `python -m` puts the working folder first
    sys.argv = [package, *args]
    # The forkserver made itself this process's start method; a fresh interpreter has none
    # set (loader workers fork, on Linux).
    multiprocessing.set_start_method(None, force=True)
    status: int | str | None = 0
    interrupted = False
    try:
        runpy.run_module(package, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        status = stop.code
    except KeyboardInterrupt:
        traceback.print_exc()
        interrupted = True
    except BaseException:
        traceback.print_exc()
        status = 1
    # multiprocessing ends the process with os._exit, which skips what the interpreter does
    # at exit: the atexit handlers (the library's own among them) and flushing the streams.
    # atexit offers no public call that runs them.
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    if interrupted:  # as the interpreter ends on Ctrl-C: killed by SIGINT, status -2
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    raise SystemExit(status)


@dataclass
class Launched:
    """A command started by `start`: its process, and the files its output goes to."""

    command: list[str]
    process: multiprocessing.process.BaseProcess
    stdout: Path
    stderr: Path
    own_group: bool

    @property
    def pid(self) -> int:
        assert self.process.pid is not None
        return self.process.pid

    def poll(self) -> int | None:
        """Its exit status (negative: the signal that ended it), or None while it runs."""
        return self.process.exitcode

    @property
    def returncode(self) -> int | None:
        """As subprocess.Popen's: `poll()`."""
        return self.process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        """Its exit status, once it ends; after `timeout` seconds it (and its group) is
        killed and subprocess.TimeoutExpired raised, as subprocess.run does."""
        self.process.join(timeout)
        if self.process.exitcode is None:
            self.kill()
            raise subprocess.TimeoutExpired(self.command, timeout or 0, self.read())
        return self.process.exitcode

    def kill(self) -> None:
        """SIGKILL to it, and to its group when it has one (loader workers, a second rank)."""
        with contextlib.suppress(ProcessLookupError):
            (os.killpg if self.own_group else os.kill)(self.pid, signal.SIGKILL)
        self.process.join()

    def read(self, stream: str = "stdout") -> str:
        """What it printed so far on `stream` (both, interleaved, when they share a file)."""
        return (self.stdout if stream == "stdout" else self.stderr).read_text(errors="replace")

    def communicate(self, timeout: float | None = None) -> tuple[str, str | None]:
        """As subprocess.Popen's: wait for it to end, then what it printed on stdout and
        stderr (None when they shared a file); its output files are deleted."""
        self.wait(timeout)
        merged = self.stdout == self.stderr
        output = self.read("stdout"), None if merged else self.read("stderr")
        self.close()
        return output

    def close(self) -> None:
        """Delete its output files (it must have ended)."""
        self.stdout.unlink(missing_ok=True)
        self.stderr.unlink(missing_ok=True)


def _fresh_path(cwd: str, env: Mapping[str, str]) -> list[str]:
    """The import path a fresh interpreter started in CWD with ENV has, less its first entry
    (the script's folder, which `python -m` makes the working folder).

    The server's own path is the one of the process that started it, when it started: a
    test process's (pytest's folders on it), and without the packages installed since (an
    editable install is a `.pth` file, read at start only). A fresh interpreter's path
    costs about 20 ms to ask for, and makes the command's imports those of a fresh start.
    """
    ask = "import json, sys; print(json.dumps(sys.path[1:]))"
    answer = subprocess.run(
        [sys.executable, "-c", ask], cwd=cwd, env=dict(env), capture_output=True, text=True
    )
    if answer.returncode != 0:
        raise RuntimeError(f"{sys.executable} did not start in {cwd}: {answer.stderr[-2000:]}")
    path: list[str] = json.loads(answer.stdout)
    return path


def module_of(command: Sequence[str]) -> str | None:
    """The package of `[sys.executable, "-m", PACKAGE, ...]`, which `start` can fork; None
    for any other command (another interpreter, a script), which needs a fresh process."""
    if len(command) >= 3 and command[0] == sys.executable and command[1] == "-m":
        return command[2]
    return None


def start(
    command: Sequence[str],
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    own_group: bool = False,
    merge_output: bool = False,
) -> Launched:
    """Start `command`, `[sys.executable, "-m", PACKAGE, *ARGS]`, in CWD with ENV (this
    process's folder and environment when None), in a process group of its own when
    `own_group`."""
    package = module_of(command)
    if package is None:
        raise ValueError(f"not a `python -m` command of this interpreter: {command}")
    outputs = []
    for stream in ("stdout",) if merge_output else ("stdout", "stderr"):
        handle, name = tempfile.mkstemp(prefix=f"{package}-", suffix=f".{stream}")
        os.close(handle)
        outputs.append(name)
    if merge_output:
        outputs.append(outputs[0])
    folder = str(cwd or os.getcwd())
    environment = dict(os.environ if env is None else env)
    process = _forkserver().Process(
        target=_run_module,
        args=(
            package,
            list(command[3:]),
            folder,
            environment,
            _fresh_path(folder, environment),
            *outputs,
            own_group,
        ),
        daemon=False,  # it may start loader workers of its own
    )
    process.start()
    return Launched(list(command), process, Path(outputs[0]), Path(outputs[1]), own_group)


def run(
    command: Sequence[str],
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = 900,
) -> subprocess.CompletedProcess[str]:
    """What `subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
    timeout=timeout)` gives; forked as `start` does when the command is this interpreter's
    `-m PACKAGE` (and the platform has a forkserver: not Windows), else in a fresh
    process. A forked command runs in a process group of its own, killed whole at the
    timeout: a hung run (a DDP rank waiting for one that died) fails its test instead of
    the test run, and leaves no process behind."""
    if module_of(command) is None or "forkserver" not in multiprocessing.get_all_start_methods():
        return subprocess.run(
            command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
        )
    launched = start(command, cwd, env, own_group=True)
    try:
        stdout, stderr = launched.communicate(timeout)
    finally:
        launched.close()  # after a timeout too
    return subprocess.CompletedProcess(list(command), launched.wait(), stdout, stderr or "")


__all__ = ["Launched", "module_of", "run", "start"]
