"""`doctor --try`: a few steps of `fit`, in a fresh process, for each config given.

The checks read the config only. Whether dynamo can trace your model's forward, whether
your module runs at a preset's precision, whether what a preset adds suits your steps: only
a run tells. A trial is `fit` with the same flags and Lightning's `fast_dev_run=2` (two
training and two validation batches, no sanity check, loggers or checkpoints), into a
temporary folder, and reports pass or the first line of what stopped it.

One trial per `--config` file, with every other flag, so a failure names its preset; when
several are given, one more with all of them, as `fit` stacks them. A file that names the
model or the data (your own run's config) is not tried alone but kept in every trial: each
preset is tried on your model, not on the example.
"""

import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import yaml

from ...platform.project import project_package
from .registry import Result, failed, passed, warned

STEPS = 2
TRIAL_FLAGS = (
    f"--trainer.fast_dev_run={STEPS}",
    "--trainer.enable_progress_bar=false",
    "--test_after_fit=false",
)
STACKED = "all together"
# One name, not a tuple in the clause: ruff writes those apart for Python 3.14 targets.
_UNREADABLE = (OSError, yaml.YAMLError)


def trials(argv: Sequence[str]) -> dict[str, list[str]]:
    """The flags of each trial, by name: each `--config` file with every other flag, in the
    order given, and, when there are several, all of them together."""
    words, configs = [], []
    given = iter(argv)
    for word in given:
        if word in ("-c", "--config"):
            word = f"--config={next(given, '')}"
        if word.startswith("--config="):
            configs.append(word)
        words.append(word)
    presets = [config for config in configs if not _names_model_or_data(config)]
    if not presets:
        return {"the default run": words}
    named = {
        preset.split("=", 1)[1]: [w for w in words if w == preset or w not in presets]
        for preset in presets
    }
    return named | {STACKED: words} if len(presets) > 1 else named


def _names_model_or_data(config: str) -> bool:
    """Whether a `--config=PATH` file sets `model:` or `data:` (a run's own config)."""
    try:
        loaded = yaml.safe_load(Path(config.split("=", 1)[1]).read_text())
    except _UNREADABLE:
        return False  # the checks name an unreadable file; its trial shows it too
    return isinstance(loaded, dict) and bool({"model", "data"} & loaded.keys())


def try_fit(flags: Sequence[str]) -> Result:
    """Run `fit` for a few steps with these flags in a fresh process, into a temporary root."""
    command = ["-m", project_package(), "fit", *flags, *TRIAL_FLAGS]
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="doctor-try-") as root:
        into = f"--trainer.default_root_dir={Path(root) / 'run'}"
        done = subprocess.run(
            [sys.executable, *command, into], capture_output=True, text=True, check=False
        )
    seconds = time.perf_counter() - start
    if done.returncode == 0:
        from ...callbacks.compile import graph_breaks_said  # imports torch: not in --static
        from ...callbacks.loader_hooks import resume_gaps_said

        output = done.stdout + done.stderr
        # What the run said of graph breaks (TorchCompile): it fits, but each costs time.
        breaks = graph_breaks_said(output)
        said = f"; {breaks}" if breaks else ""
        ran = f"{STEPS} training and {STEPS} validation batches in {seconds:.0f} s{said}"
        # What its train loader cannot resume exactly: it trains, but a resume is not exact.
        gaps = resume_gaps_said(output)
        if gaps:
            return warned(f"{ran}; a resumed run would not be exact: {gaps}", "")
        return passed(ran)
    rerun = shlex.join(["python", *command, "--trainer.default_root_dir=runs/doctor-try"])
    return failed(refusal(done.stdout + done.stderr, done.returncode), f"`{rerun}` shows it all")


def refusal(output: str, returncode: int) -> str:
    """The first line of what stopped a run: its `error:` paragraph, or the exception that
    ends its last traceback (the first line there that is not an indented frame)."""
    lines = [line for line in output.splitlines() if line.strip()]
    for index in reversed(range(len(lines))):
        if lines[index].startswith("error:"):
            return lines[index]
        if lines[index].startswith("Traceback (most recent call last)"):
            return next((line for line in lines[index + 1 :] if line[0] != " "), lines[index])
    return lines[-1] if lines else f"exited with status {returncode} and no output"
