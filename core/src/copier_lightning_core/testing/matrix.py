"""The commands a conformance cell runs on a project, and the runs several cells share.

A `Matrix` is a project folder, the Python that runs its command line (`python -m
<package>`, as a user runs it), and its architectures: each a model and data as config
files added to every command after configs/default.yaml (none: the project's own model and
data). Every fit is the configured one cut short: 2 epochs of 6 training batches, 2
validation, test and predict batches, a last.ckpt every 3 optimizer steps, on the CPU,
without loggers. The cells themselves are in conformance.py.
"""

import os
import re
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml

from .. import Refusal
from ..cli import main
from ..platform.project import project_settings
from ..tools.determinism import compare_checkpoints
from . import launch
from .interrupts import signal_at

EPOCHS, BATCHES_PER_EPOCH = 2, 6  # training batches per epoch, on one process
SAVE_EVERY = 3  # optimizer steps between last.ckpt saves
EXIT_CODES = {"SIGKILL": -signal.SIGKILL, "SIGTERM": 143}
Made = TypeVar("Made")


class CellFailed(AssertionError):
    """A cell did not do what it proves; the first line says what went wrong."""


class Refused(Exception):
    """A command stopped before any work with a one-paragraph message (no traceback)."""


@dataclass(frozen=True)
class Arch:
    """A model and its data under test, and what its cells expect of it.

    `configs` are added to every command after configs/default.yaml (none: the project's
    own model and data). `optimizer_steps_per_batch` is what Lightning's global step counts
    per training batch (2 for manual optimization stepping two optimizers). `adapters`: the
    model trains peft adapters, so export also writes the merged model and the adapters.
    `predict_samples`: how many predictions `predict` must write (None: at least one).
    """

    configs: tuple[Path, ...] = ()
    optimizer_steps_per_batch: int = 1
    adapters: bool = False
    predict_samples: int | None = None


def first_error_line(output: str) -> str:
    """The line that names the error: the last `XxxError: ...` (or `error: ...`) line, with
    its message when that starts on the next line; else the last line of the output."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    found = [
        i for i, line in enumerate(lines) if re.match(r"^([\w.]+(Error|Exception)|error):", line)
    ]
    if not found:
        return (lines or ["(no output)"])[-1][:300]
    i = found[-1]
    line = lines[i]
    if line.endswith(":") and i + 1 < len(lines):
        line = f"{line} {lines[i + 1]}"
    return line[:300]


def check_exit(command: str, returncode: int, output: str) -> None:
    """Exit 0 passes; a non-zero exit without a traceback is a refusal; else a failure."""
    if returncode == 0:
        return
    if "Traceback" not in output and returncode > 0:
        paragraph = output.strip().split("\n\n")[-1]
        raise Refused(paragraph)
    raise CellFailed(f"{command} exited {returncode}: {first_error_line(output)}\n{output[-4000:]}")


def load(path: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = torch.load(path, map_location="cpu", weights_only=True)
    return loaded


def last_checkpoint(root: Path) -> dict[str, Any]:
    return load(root / "checkpoints" / "last.ckpt")


def assert_identical(resumed: dict[str, Any], reference: dict[str, Any], what: str) -> None:
    """The resumed run's checkpoint equals the uninterrupted run's, tensor for tensor."""
    if resumed.get("global_step") != reference.get("global_step"):
        raise CellFailed(
            f"{what}: ended at global step {resumed.get('global_step')}, "
            f"the uninterrupted run at {reference.get('global_step')}"
        )
    difference = compare_checkpoints(resumed, reference)
    if difference is not None:
        tensors = count_differing(resumed, reference)
        raise CellFailed(
            f"{what}: not bit-identical to the uninterrupted run; first difference: "
            f"{difference} ({tensors} tensors differ)"
        )


def count_differing(a: dict[str, Any], b: dict[str, Any]) -> str:
    """How many tensors of two checkpoints' compared parts differ, as 'n of m'."""
    pairs: list[tuple[torch.Tensor, torch.Tensor]] = []

    def walk(x: object, y: object) -> None:
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
            pairs.append((x, y))
        elif isinstance(x, dict) and isinstance(y, dict):
            for key in x.keys() & y.keys():
                walk(x[key], y[key])
        elif isinstance(x, list | tuple) and isinstance(y, list | tuple):
            for u, v in zip(x, y, strict=False):
                walk(u, v)

    for key in ("state_dict", "optimizer_states", "lr_schedulers"):
        walk(a.get(key), b.get(key))
    differing = sum(
        not (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)) for x, y in pairs
    )
    return f"{differing} of {len(pairs)}"


def step_checkpoint_config(default: Path, steps: int, folder: Path) -> Path:
    """The callbacks of the config `default`, with last.ckpt written every `steps` optimizer
    steps, as a config file in `folder` (a short run then has checkpoints to resume from)."""
    callbacks = yaml.safe_load(default.read_text())["trainer"]["callbacks"]
    for callback in callbacks:
        if "every_n_train_steps" in (callback.get("init_args") or {}):
            callback["init_args"]["every_n_train_steps"] = steps
    path = folder / f"every_{steps}_steps.yaml"
    path.write_text(yaml.safe_dump({"trainer": {"callbacks": callbacks}}))
    return path


class Matrix:
    """The project, the commands the cells run on it, and the runs cells share."""

    def __init__(
        self, project: Path, scratch: Path, archs: Mapping[str, Arch], python: str = sys.executable
    ) -> None:
        self.project, self.scratch, self.archs, self.python = project, scratch, archs, python
        package = project_settings(project).get("package")
        if not isinstance(package, str):
            raise Refused(
                f"{project / 'pyproject.toml'} names no [tool.copier-lightning-core] package"
            )
        self.package = package
        self.configs = project / "configs"
        self.every_3_steps = step_checkpoint_config(
            project / "configs" / "default.yaml", SAVE_EVERY, scratch
        )
        # A fresh process inherits no seed from this one (seed_everything reads PL_GLOBAL_SEED).
        self.env = {key: value for key, value in os.environ.items() if not key.startswith("PL_")}
        self.env["WANDB_MODE"] = "offline"
        # One inductor cache for the session: each compiled graph is built once.
        self.env["TORCHINDUCTOR_CACHE_DIR"] = str(scratch / "inductor")
        self.shared: dict[tuple[object, ...], object] = {}  # runs several cells use, made once
        self.outputs: dict[Path, str] = {}  # run root -> what its command printed
        self.results: dict[str, dict[str, Any]] = {}

    # -- commands -------------------------------------------------------------------------
    def steps(self, arch: str, batches: int = EPOCHS * BATCHES_PER_EPOCH) -> int:
        """The global step `arch` reaches after `batches` training batches (all of them: a fit)."""
        return batches * self.archs[arch].optimizer_steps_per_batch

    def fit_args(self, arch: str, root: Path, workers: int = 0, *presets: str) -> list[str]:
        """A cheap fit of `arch` into `root`: 2 epochs of 6 steps, a checkpoint every 3."""
        configs = [*self.archs[arch].configs, self.every_3_steps]
        configs += [self.configs / "presets" / f"{preset}.yaml" for preset in presets]
        return [
            "fit",
            *(f"--config={config}" for config in configs),
            f"--trainer.default_root_dir={root}",
            f"--trainer.max_epochs={EPOCHS}",
            f"--trainer.limit_train_batches={BATCHES_PER_EPOCH}",
            *(f"--trainer.limit_{stage}_batches=2" for stage in ("val", "test", "predict")),
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--data.num_workers={workers}",
        ]

    @staticmethod
    def two_processes() -> list[str]:
        """Flags of a fit on 2 processes: each sees half of each epoch's batches."""
        return ["--trainer.devices=2", f"--trainer.limit_train_batches={BATCHES_PER_EPOCH // 2}"]

    def command(self, *args: str, timeout: float = 600) -> str:
        """`python -m <package> ARGS` in the project, as a user runs it (forked from
        preloaded imports when `python` is this interpreter: testing/launch.py); its output."""
        command = [self.python, "-m", self.package, *args]
        result = launch.run(command, cwd=self.project, env=self.env, timeout=timeout)
        output = result.stdout + result.stderr
        check_exit(args[0], result.returncode, output)
        return output

    def in_process(self, *args: str) -> None:
        """The same command in this process (no interpreter start, no imports: faster)."""
        try:
            status = main(list(args), project=self.package)
        except SystemExit as stop:
            # main ends a refused command with status 1, the Refusal as the exit's cause.
            if isinstance(stop.__cause__, Refusal):
                raise Refused(str(stop.__cause__)) from None
            if isinstance(stop.code, str):  # sys.exit("error: ...") of a tool
                raise Refused(stop.code) from None
            status = stop.code or 0
        if status != 0:
            raise CellFailed(f"{args[0]} exited {status}")

    def signalled(self, args: list[str], point: str, step: int, sig: str, marker: Path) -> str:
        """Run `args` in its own process group; at `point`, send `sig` to the whole group."""
        pause = {"point": point, "step": step, "marker": str(marker)}
        command = [self.python, "-m", self.package, *args]
        returncode, output = signal_at(command, self.project, self.env, pause, sig)
        if not marker.exists():
            check_exit("fit", returncode, output)
            raise CellFailed(f"the run ended before global step {step} ({point}) was reached")
        if returncode != EXIT_CODES[sig]:
            raise CellFailed(
                f"after {sig} to the process group the run exited {returncode}, "
                f"not {EXIT_CODES[sig]}: {first_error_line(output)}\n{output[-3000:]}"
            )
        if "Traceback" in output:
            raise CellFailed(
                f"{sig} left a traceback: {first_error_line(output)}\n{output[-3000:]}"
            )
        return output

    # -- runs several cells share -------------------------------------------------------------
    def once(self, key: tuple[object, ...], make: Callable[[], Made]) -> Made:
        """`make()` the first time; its result, or its failure, every time after."""
        if key not in self.shared:
            try:
                self.shared[key] = make()
            except (CellFailed, Refused) as error:
                # (an error without a message is named by its class, not an IndexError)
                first = next(iter(str(error).strip().splitlines()), type(error).__name__)
                self.shared[key] = CellFailed(f"the {' '.join(map(str, key))} run failed: {first}")
        made = self.shared[key]
        if isinstance(made, CellFailed):
            raise made
        return made  # type: ignore[return-value]  # what make() returned for this key

    def reference(self, arch: str, workers: int) -> Path:
        """The root of one uninterrupted fit (the fit cell's run, for num_workers 0)."""

        def make() -> Path:
            root = self.scratch / f"{arch}-reference-w{workers}"
            if workers == 0:  # as a user runs it, testing the best checkpoint after fit
                self.outputs[root] = self.command(*self.fit_args(arch, root, 0))
            else:
                self.in_process(*self.fit_args(arch, root, workers), "--test_after_fit=false")
            return root

        return self.once(("reference", arch, workers), make)

    def fsdp2_run(self, arch: str) -> Path:
        def make() -> Path:
            root = self.scratch / f"{arch}-fsdp2"
            self.command(*self.fsdp2_args(arch, root))
            return root

        return self.once(("fsdp2", arch), make)

    def fsdp2_args(self, arch: str, root: Path) -> list[str]:
        return [
            *self.fit_args(arch, root, 0, "fsdp2"),
            *self.two_processes(),
            "--checkpoint.save_top_k=-1",  # keep each epoch's folder: one to resume from
            "--test_after_fit=false",
        ]
