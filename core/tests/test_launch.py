"""A command forked by testing/launch.py behaves as the same `python -m` in a fresh process.

Each case runs a small package's `__main__` both ways and compares what a test reads of a
command: its exit status, its output, and what it saw of its folder, arguments,
environment and start method.
"""

import os
import subprocess
import sys
import sysconfig
import textwrap
import time
from pathlib import Path

import pytest

from copier_lightning_core.testing import launch

MAIN = """
import atexit, json, multiprocessing, os, signal, sys
atexit.register(lambda: print("atexit ran", flush=True))
case = sys.argv[1]
if case == "sees":
    print(json.dumps({
        "cwd": os.getcwd(), "argv": sys.argv[1:], "path": sys.path,
        "probe": os.environ.get("PROBE"), "home": os.environ.get("HOME"),
        "start_method": multiprocessing.get_start_method(), "name": __name__,
        "spec": __spec__.name,
    }))
    print("to stderr", file=sys.stderr)
elif case == "refused":
    sys.exit("error: one paragraph")
elif case == "status":
    raise SystemExit(3)
elif case == "raises":
    raise ValueError("boom")
elif case == "ctrl-c":
    raise KeyboardInterrupt
elif case == "kill-9":
    os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.fixture(scope="module")
def package(tmp_path_factory) -> Path:
    """A folder holding the package `launch_probe`, importable from it (as `python -m`
    finds a package in its working folder)."""
    folder = tmp_path_factory.mktemp("launch")
    (folder / "launch_probe").mkdir()
    (folder / "launch_probe" / "__init__.py").write_text("")
    (folder / "launch_probe" / "__main__.py").write_text(textwrap.dedent(MAIN))
    return folder


@pytest.mark.parametrize("case", ["sees", "refused", "status", "raises", "ctrl-c", "kill-9"])
def test_a_forked_command_ends_and_prints_as_a_fresh_one(package, case):
    command = [sys.executable, "-m", "launch_probe", case, "--flag=1"]
    env = {key: value for key, value in os.environ.items() if key != "HOME"}
    env["PROBE"] = case
    fresh = subprocess.run(command, cwd=package, env=env, capture_output=True, text=True)
    forked = launch.run(command, cwd=package, env=env)
    assert forked.returncode == fresh.returncode, forked.stderr
    assert forked.stdout == fresh.stdout
    # The same last line: the paragraph, or the exception a traceback ends with.
    last = [output.stderr.strip().splitlines()[-1:] for output in (forked, fresh)]
    assert last[0] == last[1], forked.stderr


def test_a_package_installed_after_the_server_started_is_importable(package, tmp_path):
    """An install is a `.pth` file in site-packages, which an interpreter reads at start:
    a command forked after it imports the package, as a fresh interpreter would."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    if not os.access(site_packages, os.W_OK):
        pytest.skip(f"{site_packages} is not writable")
    launch.run([sys.executable, "-m", "launch_probe", "status"], cwd=package)  # the server runs
    late = f"late_probe_{os.getpid()}"
    (tmp_path / late).mkdir()
    (tmp_path / late / "__main__.py").write_text("print('imported')")
    installed = site_packages / f"_{late}.pth"
    installed.write_text(f"{tmp_path}\n")
    try:
        result = launch.run([sys.executable, "-m", late], cwd=package)
    finally:
        installed.unlink()
    assert (result.returncode, result.stdout) == (0, "imported\n"), result.stderr


def test_a_command_of_another_interpreter_runs_in_a_fresh_process(package):
    python = str(Path(sys.executable).parent / "python3")
    assert launch.module_of([python, "-m", "launch_probe"]) is None
    assert launch.module_of([sys.executable, "-c", "pass"]) is None
    result = launch.run([sys.executable, "-c", "import os; print(os.getpid())"], cwd=package)
    assert result.returncode == 0 and int(result.stdout) != os.getpid()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")
def test_a_command_in_its_own_group_is_killed_with_its_group_after_the_timeout(package):
    sleeper = package / "sleeper"
    sleeper.mkdir()
    (sleeper / "__init__.py").write_text("")
    # A child that would outlive the command unless the command's group is killed.
    (sleeper / "__main__.py").write_text(
        "import subprocess, sys, time\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    started = launch.start([sys.executable, "-m", "sleeper"], package, own_group=True)
    deadline = time.monotonic() + 60
    while not started.read().endswith("\n") and time.monotonic() < deadline:
        assert started.poll() is None, started.read("stderr")  # ended before its child ran
        time.sleep(0.05)  # until the child runs: the timeout then kills a group of two
    child = int(started.read().split()[0])
    with pytest.raises(subprocess.TimeoutExpired):
        started.wait(timeout=0.1)
    started.close()
    deadline = time.monotonic() + 30
    while alive(child) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(child)


def alive(pid: int) -> bool:
    """Whether the process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"
