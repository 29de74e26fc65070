"""What the library's tests share: the project they serve, the fast CLI options, the
flavours, a run root.

The tests run from the folder of a project rendered by the template (its pyproject.toml
names the package, platform/project.py), on the modules of `toy.py`, never on the
project's example model: each flavour names its module, its data and the metric its
checkpoints are judged by.
"""

import json
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from jsonargparse import Namespace

from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.platform.project import SETTINGS_TABLE, project_package, project_root
from copier_lightning_core.platform.refusal import Refusal
from copier_lightning_core.run.run_plan import RunPlan, plan_run
from copier_lightning_core.testing import launch

NO_PROJECT = (
    "the library's tests run inside a project rendered by the copier-lightning template: they "
    "train through its command line (`python -m <package>`), read its configs/ and check its "
    "files. Run them from that project's folder, with the project installed in this Python: "
    "`cd <project> && python -m pytest -c {core}/pyproject.toml --rootdir {core} "
    "-p no:cacheprovider {core}/tests` (the project's pyproject.toml names its package under "
    "[tool.{table}])."
)


def served_project() -> str:
    """The package of the project these tests run in.

    Without one, pytest ends with the paragraph above and status 1: a SystemExit raised
    while pytest loads conftest.py ends it with its message alone, where a Refusal (an
    ordinary exception) or `pytest.exit` there would print as an import error with a
    traceback.
    """
    try:
        project_root()  # the package named, and importable from this Python
    except Refusal as refusal:
        core = Path(__file__).resolve().parents[1]
        no_project = Refusal(NO_PROJECT.format(core=core, table=SETTINGS_TABLE))
        raise SystemExit(str(no_project)) from refusal
    return project_package()


PROJECT = served_project()

FAST = [
    "--trainer.max_epochs=1",
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
# Every argument of the toys is given, so all of a test's values read here. (Named in place of
# configs/default.yaml's classes, the toys get none of its values: lightning_cli.py.)
FLAVOURS = {
    "tabular": [
        "--model=toy.ToyRegressor",
        "--model.num_features=8",
        "--model.hidden=16",
        "--model.lr=0.01",
        "--data=toy.ToyTabularData",
        "--data.num_features=8",
        "--data.num_samples=512",
        "--data.batch_size=64",
        "--checkpoint.monitor=val/loss",
        "--checkpoint.mode=min",
    ],
    "sequence": [
        "--model=toy.ToySequenceClassifier",
        "--model.num_classes=3",
        "--model.vocab_size=30",
        "--model.dim=16",
        "--model.lr=0.03",
        "--data=toy.ToySequenceData",
        "--data.num_classes=3",
        "--data.vocab_size=30",
        "--data.length=12",
        "--data.train_size=384",
        "--data.val_size=96",
        "--data.batch_size=32",
        "--data.num_workers=0",
        "--checkpoint.monitor=valid_nll",
        "--checkpoint.mode=min",
    ],
}
PREDICT_SIZES = {"tabular": 64, "sequence": 96}
# Not a flavour (the tests of every flavour do not run it): toy.ToyDenoiser, whose network
# is required and not in its hyperparameters, whose scheduler needs a validation metric.
DENOISER = [
    "--model=toy.ToyDenoiser",
    "--model.net=torch.nn.Linear",
    "--model.net.in_features=32",
    "--model.net.out_features=32",
    "--model.noise=0.3",
    "--model.lr=0.01",
    "--data=toy.ToySignals",
    "--data.length=32",
    "--data.num_samples=256",
    "--data.batch_size=32",
    "--checkpoint.monitor=val_snr_db",
    "--checkpoint.mode=max",
]
TOYS = {**FLAVOURS, "denoiser": DENOISER}


def toy_classes(flavour: str) -> list[str]:
    """The classes a flavour names (`--model=toy.X`, `--data=toy.Y`): what `export --trust` takes."""
    names = ("--model=", "--data=")
    return [arg.split("=", 1)[1] for arg in TOYS[flavour] if arg.startswith(names)]


def refusal_of_main(capsys: pytest.CaptureFixture[str], *words: str) -> str:
    """The paragraph `python -m <package> WORDS`, run in this process, ends with.

    As from the shell: exit status 1 and the paragraph, last on stderr. The SystemExit
    carries the refusal as its cause (refusal.py), so the test reads the paragraph whole.
    """
    with pytest.raises(SystemExit) as stopped:
        main(list(words))
    refusal = stopped.value.__cause__
    assert stopped.value.code == 1 and isinstance(refusal, Refusal), stopped.value
    err = capsys.readouterr().err
    assert err.endswith(f"{refusal}\n") and "Traceback" not in err, err
    let_go_of_loader_workers(stopped)  # a run refused in a loader worker has them
    return str(refusal)


def let_go_of_loader_workers(raised: pytest.ExceptionInfo[BaseException]) -> None:
    """Shut down, now, a DataLoader iterator whose worker raised `raised` (or its cause).

    The traceback holds the iterator (a frame's `self`) in a reference cycle with the
    test's frame, which the garbage collector frees at some later test. The collector
    calls weak-reference callbacks before finalizers: multiprocessing's own closes the
    iterator's index queues first, so the shutdown sentinel the iterator's `__del__` then
    puts on them is never sent, and it waits 5 s (torch's MP_STATUS_CHECK_INTERVAL) for
    each worker before terminating it (torch 2.13). Clearing the frames of the exception
    and of those it was raised from frees the iterator here, while its queues still send.
    """
    error: BaseException | None = raised.value
    while error is not None:
        traceback.clear_frames(error.__traceback__)
        error = error.__cause__ or error.__context__


@dataclass
class Run:
    """One run root and the arguments that aim a command at it."""

    flavour: str
    root: Path
    args: list[str]

    def cli(self, command: str, *extra: str) -> ProjectCLI:
        return ProjectCLI(args=[command, *self.args, *extra])

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"


class _Parsed(Exception):
    """Carries the config ProjectCLI's parser made out of the CLI, before any plan."""


class _ParseOnly(ProjectCLI):
    def parse_arguments(self, parser: Any, args: Any) -> None:
        raise _Parsed(parser.parse_args(args))


def planned(command: str, *args: str) -> tuple[RunPlan, Namespace]:
    """The run plan `plan_run` makes of `command` with these arguments, and the command's
    config it filled in; nothing is claimed or built."""
    try:
        _ParseOnly(args=[command, *args])
    except _Parsed as parsed:
        config: Namespace = parsed.args[0][command]
        return plan_run(command, config, list(args)), config
    raise AssertionError("ProjectCLI returned without parsing")


def killed_run(
    args: list[str], point: str, step: int, sig: str = "SIGKILL"
) -> subprocess.CompletedProcess[str]:
    """`python -m <project> ARGS` in the tests' folder (their modules import by name), with
    the library's KillAt sending `sig` to it at `point` of global step `step`."""
    killer = {
        "class_path": "copier_lightning_core.testing.interrupts.KillAt",
        "init_args": {"point": point, "step": step, "sig": sig},
    }
    return launch.run(
        [sys.executable, "-m", PROJECT, *args, f"--trainer.callbacks+={json.dumps(killer)}"],
        cwd=Path(__file__).parent,
    )
