"""The conformance matrix: every preset and tool of a generated project, on real architectures.

A project is rendered once ("Conformance Probe") and given the models a user might bring,
each wrapped in a few lines of LightningModule with `example_input_array` set, each with a
DataModule of its own (shuffling on, a small dataset made in memory that the model learns;
torchdata's StatefulDataLoader unless said otherwise): tests/conformance/ holds these user
files and their configs.

- `resnet`: transformers' ResNetForImageClassification (BatchNorm buffers, in-place ops);
- `vit`: ViTForImageClassification with dropout (random numbers drawn at every step);
- `gpt2`: GPT2LMHeadModel (tied input/output embeddings, dict batches with an attention mask);
- `plain`: BertForSequenceClassification on a plain `torch.utils.data.DataLoader` (no
  generator, no LoaderOptions: the library rebuilds it for an exact resume);
- `gan`: manual optimization, two optimizers, two `manual_backward` per batch (two
  optimizer steps per batch: OPTIMIZER_STEPS_PER_BATCH scales the steps cells expect);
- `peft`: peft's LoRA adapters on LlamaForCausalLM, the base frozen;
- `graph`: torch_geometric's GIN on PyG `Batch` objects from PyG's own DataLoader;
- `monai3d`: MONAI's 3-D UNet on 16^3 volumes (per-voxel segmentation).

Models are built from config classes or in code: nothing is downloaded. Each cell of
ARCHS x CELLS is one test (`test_cell[gpt2-fit]`): it must work, or be refused before any
work in one paragraph naming cause and fix, and then only where EXPECTED_REFUSALS records
that reason. Failures are reported as failures, never hidden.

Which cells run:
- `bash scripts/test.sh` (the CI): the fast subset, FAST: every cell on GPT-2, fit and one
  resume on ResNet and ViT, and on each later architecture the one or two cells that prove
  its own risk; the other cells are skipped, naming the command below;
- `bash scripts/test.sh -m conformance`: the whole matrix (and nothing else);
- `bash scripts/test.sh tests/test_conformance.py -k gpt2-compile`: one cell.

Each run writes every cell's outcome and time to RESULTS (`.pytest_cache/`);
`python scripts/conformance_page.py` turns the latest run into docs/conformance.md, and
`test_the_conformance_page_lists_exactly_the_cells_the_suite_has` keeps that page honest.
"""

import datetime
import json
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml

from conftest import REPO, render
from scaffold import git, install_editable, package_name, uninstall

USER_FILES = Path(__file__).parent / "conformance"
RESULTS = REPO / ".pytest_cache" / "conformance-results.json"
PAGE = REPO / "docs" / "conformance.md"
FULL_MATRIX = "bash scripts/test.sh -m conformance"

# architecture (its user module and config in tests/conformance/) -> label in the docs
ARCHS = {
    "resnet": "ResNet (transformers)",
    "vit": "ViT with dropout (transformers)",
    "gpt2": "GPT-2 (transformers)",
    "plain": "BERT on a plain DataLoader",
    "gan": "GAN (manual optimization)",
    "peft": "LoRA (peft) on Llama",
    "graph": "GIN (torch_geometric)",
    "monai3d": "3-D UNet (MONAI)",
}
# cell -> what it proves (shown in the docs)
CELLS = {
    "fit": "`fit` for 2 epochs: the validation loss falls; `test` after fit runs",
    "kill9-mid-epoch-w0": "`kill -9` to the process group mid-epoch, `fit --ckpt_path last`: "
    "weights and optimizer state bit-identical to an uninterrupted run (num_workers 0)",
    "kill9-mid-epoch-w2": "the same with `--data.num_workers 2`",
    "kill9-epoch-boundary-w0": "`kill -9` to the process group at an epoch boundary, then "
    "resume: bit-identical (num_workers 0)",
    "kill9-epoch-boundary-w2": "the same with `--data.num_workers 2`",
    "sigterm-epoch-boundary": "SIGTERM to the process group at an epoch boundary: exit 143, "
    "then resume: bit-identical (num_workers 2)",
    "compile": "`fit --config configs/presets/compile.yaml` (inductor): trains, and its "
    "checkpoint has no `_orig_mod.` keys",
    "bf16": "`fit --config configs/presets/bf16.yaml`: trains, finite loss",
    "ddp": "`fit --config configs/presets/ddp.yaml --trainer.accelerator cpu "
    "--trainer.devices 2`: trains on 2 processes",
    "fsdp2": "`fit --config configs/presets/fsdp2.yaml --trainer.devices 2`: trains on 2 "
    "processes, its sharded checkpoint consolidates to every weight of the model",
    "fsdp2-resume": "resume the FSDP2 run from its first epoch's sharded checkpoint folder: "
    "weights and optimizer state bit-identical to the uninterrupted FSDP2 run",
    "export": "`export CKPT`: ONNX and safetensors (for a peft model also the merged model "
    "and the adapters peft loads), each within tolerance of the eager model",
    "tune": "`tune`: batch size, workers and precision measured; writes a config",
    "predict": "`predict --ckpt_path last`: one prediction per sample, written to the run",
    "doctor": "`doctor --try --config configs/presets/compile.yaml` on the model's config: "
    "every check passes and so does the trial (2 steps of fit), as the compile cell does",
}
FAST = {
    *(("gpt2", cell) for cell in CELLS),
    *((arch, cell) for arch in ("resnet", "vit") for cell in ("fit", "kill9-mid-epoch-w0")),
    # each later architecture: the cells that prove what it alone brings
    ("plain", "kill9-mid-epoch-w0"),  # the plain loader rebuilt: an exact resume
    ("plain", "kill9-mid-epoch-w2"),  # ... with workers
    ("gan", "fit"),  # manual optimization: two optimizer steps per batch
    ("gan", "ddp"),  # a backward pass that reaches half of the parameters
    ("peft", "fit"),  # a frozen base: only the adapters in the optimizer
    ("peft", "export"),  # ONNX, and the merged model and adapters peft loads
    ("graph", "fit"),  # PyG Batch objects through every callback
    ("graph", "tune"),  # batch size and workers measured on PyG's own loader
    ("graph", "kill9-mid-epoch-w0"),  # PyG's DataLoader (a subclass) rebuilt: exact resume
    ("monai3d", "fit"),  # 3-D convolutions, a per-voxel loss
}
# (arch, cell) -> a phrase of the one-paragraph refusal that cell is expected to end in,
# with the reason it is accepted. Empty: every cell must work.
EXPECTED_REFUSALS: dict[tuple[str, str], str] = {}

EPOCHS, BATCHES_PER_EPOCH = 2, 6  # 48 training samples, batches of 8
# kill point -> (PauseAt point, batches done when it waits, batches in the last.ckpt left)
KILLS = {"mid-epoch": ("train_batch", 4, 3), "epoch-boundary": ("epoch_start", 6, 6)}
# Lightning's global step counts optimizer steps: a manual-optimization module that steps
# two optimizers per batch advances it by 2 per batch (its checkpoints every 3 steps then
# fall on every third batch as well: 6, 12, ...).
OPTIMIZER_STEPS_PER_BATCH = {"gan": 2}
ADAPTERS = {"peft"}  # architectures training peft adapters: export writes more for them


def steps(arch: str, batches: int = EPOCHS * BATCHES_PER_EPOCH) -> int:
    """The global step `arch` reaches after `batches` training batches (all of them: a fit)."""
    return batches * OPTIMIZER_STEPS_PER_BATCH.get(arch, 1)


EXIT_CODES = {"SIGKILL": -signal.SIGKILL, "SIGTERM": 143}


def full_matrix_requested(config: pytest.Config) -> bool:
    return "conformance" in (config.option.markexpr or "")


class CellFailed(AssertionError):
    """A cell did not do what it proves; the first line says what went wrong."""


class Refused(Exception):
    """A command stopped before any work with a one-paragraph message (no traceback)."""


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


class Matrix:
    """The rendered project, the commands the cells run on it, and the runs cells share."""

    def __init__(self, project: Path, scratch: Path) -> None:
        self.project, self.scratch = project, scratch
        self.package = package_name(project)
        self.configs = project / "configs"
        self.env = {
            **os.environ,
            "WANDB_MODE": "offline",
            # One inductor cache for the session: each compiled graph is built once.
            "TORCHINDUCTOR_CACHE_DIR": str(scratch / "inductor"),
        }
        self.shared: dict[tuple, object] = {}  # runs several cells use, made once
        self.outputs: dict[Path, str] = {}  # run root -> what its command printed
        self.results: dict[str, dict] = {}

    # -- commands -------------------------------------------------------------------------
    def fit_args(self, arch: str, root: Path, workers: int = 0, *presets: str) -> list[str]:
        """A cheap fit of `arch` into `root`: 2 epochs of 6 steps, a checkpoint every 3."""
        configs = [self.configs / "conformance" / f"{arch}.yaml"]
        configs += [self.configs / "conformance" / "every_3_steps.yaml"]
        configs += [self.configs / "presets" / f"{preset}.yaml" for preset in presets]
        return [
            "fit",
            *(f"--config={config}" for config in configs),
            f"--trainer.default_root_dir={root}",
            f"--trainer.max_epochs={EPOCHS}",
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            f"--data.num_workers={workers}",
        ]

    def command(self, *args: str, timeout: float = 600) -> str:
        """`python -m <package> ARGS` in the project, as a user runs it; its output."""
        result = subprocess.run(
            [sys.executable, "-m", self.package, *args],
            cwd=self.project,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        output = result.stdout + result.stderr
        check_exit(args[0], result.returncode, output)
        return output

    def in_process(self, *args: str) -> None:
        """The same command in this process (no interpreter start, no imports: faster)."""
        from importlib import import_module

        main = import_module("copier_lightning_core.cli").main
        refusal = import_module("copier_lightning_core").Refusal
        try:
            status = main(list(args), project=self.package)
        except SystemExit as stop:
            # main ends a refused command with status 1, the Refusal as the exit's cause.
            if isinstance(stop.__cause__, refusal):
                raise Refused(str(stop.__cause__)) from None
            status = stop.code or 0
        if status != 0:
            raise CellFailed(f"{args[0]} exited {status}")

    def signalled(self, args: list[str], point: str, step: int, sig: str, marker: Path) -> str:
        """Run `args` in its own process group; at `point`, send `sig` to the whole group."""
        pauser = {
            "class_path": f"{self.package}.kill_points.PauseAt",
            "init_args": {"point": point, "step": step, "marker": str(marker)},
        }
        command = [sys.executable, "-m", self.package, *args]
        process = subprocess.Popen(
            [*command, f"--trainer.callbacks+={json.dumps(pauser)}"],
            cwd=self.project,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,  # its own process group, as a scheduler's job has
        )
        try:
            while not marker.exists() and process.poll() is None:
                time.sleep(0.05)
            if marker.exists():
                os.killpg(process.pid, getattr(signal, sig))
            output, _ = process.communicate(timeout=300)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        if not marker.exists():
            check_exit("fit", process.returncode, output)
            raise CellFailed(f"the run ended before global step {step} ({point}) was reached")
        if process.returncode != EXIT_CODES[sig]:
            raise CellFailed(
                f"after {sig} to the process group the run exited {process.returncode}, "
                f"not {EXIT_CODES[sig]}: {first_error_line(output)}\n{output[-3000:]}"
            )
        if "Traceback" in output:
            raise CellFailed(
                f"{sig} left a traceback: {first_error_line(output)}\n{output[-3000:]}"
            )
        return output

    # -- runs several cells share -------------------------------------------------------------
    def once(self, key: tuple, make: Callable[[], object]) -> object:
        """`make()` the first time; its result, or its failure, every time after."""
        if key not in self.shared:
            try:
                self.shared[key] = make()
            except (CellFailed, Refused) as error:
                first = str(error).strip().splitlines()[0]
                self.shared[key] = CellFailed(f"the {' '.join(map(str, key))} run failed: {first}")
        if isinstance(self.shared[key], CellFailed):
            raise self.shared[key]  # type: ignore[misc]
        return self.shared[key]

    def reference(self, arch: str, workers: int) -> Path:
        """The root of one uninterrupted fit (the fit cell's run, for num_workers 0)."""

        def make() -> Path:
            root = self.scratch / f"{arch}-reference-w{workers}"
            if workers == 0:  # as a user runs it, testing the best checkpoint after fit
                self.outputs[root] = self.command(*self.fit_args(arch, root, 0))
            else:
                self.in_process(*self.fit_args(arch, root, workers), "--test_after_fit=false")
            return root

        return self.once(("reference", arch, workers), make)  # type: ignore[return-value]

    def fsdp2_run(self, arch: str) -> Path:
        def make() -> Path:
            root = self.scratch / f"{arch}-fsdp2"
            self.command(*self.fsdp2_args(arch, root))
            return root

        return self.once(("fsdp2", arch), make)  # type: ignore[return-value]

    def fsdp2_args(self, arch: str, root: Path) -> list[str]:
        return [
            *self.fit_args(arch, root, 0, "fsdp2"),
            "--trainer.devices=2",
            "--checkpoint.save_top_k=-1",  # keep each epoch's folder: one to resume from
            "--test_after_fit=false",
        ]

    # -- one cell -----------------------------------------------------------------------------
    def run(self, arch: str, cell: str) -> None:
        """Run one cell, record its outcome and time, and fail the test if it failed."""
        name = f"{arch}-{cell}"
        expected = EXPECTED_REFUSALS.get((arch, cell))
        start = time.perf_counter()
        record: dict = {"outcome": "pass", "detail": ""}
        try:
            try:
                CELL_FUNCTIONS[cell](self, arch, self.scratch / name)
            except Refused as refusal:
                message = str(refusal)
                if expected is None or expected not in message:
                    raise CellFailed(f"refused: {message}") from None
                if list((self.scratch / name).rglob("*.ckpt")):
                    raise CellFailed(f"refused after work began: {message}") from None
                record = {"outcome": "refused", "detail": " ".join(message.split())}
            else:
                if expected is not None:
                    raise CellFailed(f"expected a refusal ({expected!r}), but it ran")
        except Exception as error:
            first = (str(error).strip().splitlines() or [type(error).__name__])[0]
            record = {"outcome": "fail", "detail": f"{type(error).__name__}: {first}"[:300]}
            raise
        finally:
            record["seconds"] = round(time.perf_counter() - start, 1)
            self.results[name] = {"arch": arch, "cell": cell, **record}


def check_exit(command: str, returncode: int, output: str) -> None:
    """Exit 0 passes; a non-zero exit without a traceback is a refusal; else a failure."""
    if returncode == 0:
        return
    if "Traceback" not in output and returncode > 0:
        paragraph = output.strip().split("\n\n")[-1]
        raise Refused(paragraph)
    raise CellFailed(f"{command} exited {returncode}: {first_error_line(output)}\n{output[-4000:]}")


def last_checkpoint(root: Path) -> dict:
    return torch.load(root / "checkpoints" / "last.ckpt", map_location="cpu", weights_only=True)


def assert_identical(m: "Matrix", resumed: dict, reference: dict, what: str) -> None:
    from importlib import import_module

    compare = import_module("copier_lightning_core.tools.determinism").compare_checkpoints
    if resumed.get("global_step") != reference.get("global_step"):
        raise CellFailed(
            f"{what}: ended at global step {resumed.get('global_step')}, "
            f"the uninterrupted run at {reference.get('global_step')}"
        )
    difference = compare(resumed, reference)
    if difference is not None:
        tensors = count_differing(resumed, reference)
        raise CellFailed(
            f"{what}: not bit-identical to the uninterrupted run; first difference: "
            f"{difference} ({tensors} tensors differ)"
        )


def count_differing(a: object, b: object) -> str:
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
        walk(a.get(key), b.get(key))  # type: ignore[union-attr]
    differing = sum(
        not (x.shape == y.shape and x.dtype == y.dtype and torch.equal(x, y)) for x, y in pairs
    )
    return f"{differing} of {len(pairs)}"


# -- the cells ----------------------------------------------------------------------------------
def cell_fit(m: Matrix, arch: str, scratch: Path) -> None:
    root = m.reference(arch, 0)
    state = last_checkpoint(root)
    if state["global_step"] != steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {steps(arch)}")
    scores = {}  # epoch -> val_loss, from the best-checkpoint callback's state
    for key, callback in state["callbacks"].items():
        if "'monitor': 'val_loss'" in key:
            for path, score in callback["best_k_models"].items():
                scores[int(re.search(r"epoch(\d+)", Path(path).name).group(1))] = float(score)
    if sorted(scores) != [0, 1]:
        raise CellFailed(f"expected val_loss of epochs 0 and 1 in the checkpoint, got {scores}")
    if not scores[1] < scores[0]:
        raise CellFailed(f"the validation loss did not fall: {scores[0]:.4f} -> {scores[1]:.4f}")
    if "test_loss" not in m.outputs[root]:
        raise CellFailed("`fit` did not test the best checkpoint after training")


def resume_after_signal(
    m: Matrix, arch: str, scratch: Path, kill: str, sig: str, workers: int
) -> None:
    point, batches, saved_batches = KILLS[kill]
    step, saved_step = steps(arch, batches), steps(arch, saved_batches)
    root = scratch / "run"
    args = [*m.fit_args(arch, root, workers), "--test_after_fit=false"]
    m.signalled(args, point, step, sig, scratch / "marker")
    saved = last_checkpoint(root)["global_step"]
    if sig == "SIGKILL" and saved != saved_step:
        raise CellFailed(f"the last.ckpt a kill at step {step} leaves is of step {saved}")
    if sig == "SIGTERM" and not step <= saved < steps(arch):
        raise CellFailed(f"SIGTERM at step {step} left a last.ckpt of step {saved}")
    m.in_process(*args, "--ckpt_path=last")
    reference = last_checkpoint(m.reference(arch, workers))
    assert_identical(m, last_checkpoint(root), reference, f"resumed from step {saved}")


def kill_cell(kill: str, workers: int) -> Callable[[Matrix, str, Path], None]:
    def cell(m: Matrix, arch: str, scratch: Path) -> None:
        resume_after_signal(m, arch, scratch, kill, "SIGKILL", workers)

    return cell


def cell_sigterm(m: Matrix, arch: str, scratch: Path) -> None:
    resume_after_signal(m, arch, scratch, "epoch-boundary", "SIGTERM", 2)


def cell_compile(m: Matrix, arch: str, scratch: Path) -> None:
    root = scratch / "run"
    m.command(*m.fit_args(arch, root, 0, "compile"), "--test_after_fit=false")
    state = last_checkpoint(root)
    compiled_keys = [key for key in state["state_dict"] if "_orig_mod." in key]
    if compiled_keys:
        raise CellFailed(f"the checkpoint holds compiled keys, e.g. {compiled_keys[0]}")
    if state["global_step"] != steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {steps(arch)}")


def cell_bf16(m: Matrix, arch: str, scratch: Path) -> None:
    root = scratch / "run"
    m.in_process(*m.fit_args(arch, root, 0, "bf16"), "--test_after_fit=false")
    state = last_checkpoint(root)
    if state["global_step"] != steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {steps(arch)}")
    for name, tensor in state["state_dict"].items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CellFailed(f"a non-finite weight after bf16 training: {name}")


def cell_ddp(m: Matrix, arch: str, scratch: Path) -> None:
    root = scratch / "run"
    m.command(*m.fit_args(arch, root, 0, "ddp"), "--trainer.devices=2", "--test_after_fit=false")
    trained, half = last_checkpoint(root)["global_step"], steps(arch) // 2
    if trained != half:  # each process sees half of each epoch
        raise CellFailed(f"trained {trained} steps on 2 processes, not {half}")


def full_state(folder: Path, scratch: Path) -> dict:
    """Every tensor of an FSDP2 checkpoint folder (weights and optimizer state), gathered."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not (folder / ".metadata").is_file():
        raise CellFailed(f"{folder} is not a sharded (DCP) checkpoint folder")
    scratch.mkdir(parents=True, exist_ok=True)
    target = scratch / f"{folder.parent.parent.name}-{folder.name}.pt"
    dcp_to_torch_save(folder, target)
    return torch.load(target, map_location="cpu", weights_only=True)


def cell_fsdp2(m: Matrix, arch: str, scratch: Path) -> None:
    root = m.fsdp2_run(arch)
    m.command("consolidate-ckpt", str(root / "checkpoints" / "last.ckpt"))
    consolidated = torch.load(
        root / "checkpoints" / "consolidated" / "last.ckpt", map_location="cpu", weights_only=True
    )
    if consolidated["global_step"] != steps(arch) // 2:
        raise CellFailed(f"trained {consolidated['global_step']} steps, not {steps(arch) // 2}")
    single = last_checkpoint(m.reference(arch, 0))["state_dict"]
    missing = sorted(single.keys() - consolidated["state_dict"].keys())
    if missing:
        raise CellFailed(f"the consolidated checkpoint lacks {len(missing)} weights: {missing[:3]}")
    for name, tensor in single.items():
        if consolidated["state_dict"][name].shape != tensor.shape:
            raise CellFailed(f"{name}: shape {consolidated['state_dict'][name].shape}")


def cell_fsdp2_resume(m: Matrix, arch: str, scratch: Path) -> None:
    uninterrupted = m.fsdp2_run(arch)
    (first_epoch,) = (uninterrupted / "checkpoints").glob("epoch00-*.ckpt")
    root = scratch / "run"
    m.command(*m.fsdp2_args(arch, root), f"--ckpt_path={first_epoch}")
    resumed = full_state(root / "checkpoints" / "last.ckpt", scratch)
    reference = full_state(uninterrupted / "checkpoints" / "last.ckpt", scratch)
    if resumed.keys() != reference.keys():
        raise CellFailed(
            f"the resumed checkpoint's keys differ: {resumed.keys() ^ reference.keys()}"
        )
    for key in sorted(reference):
        if isinstance(reference[key], torch.Tensor) and not torch.equal(
            resumed[key], reference[key]
        ):
            raise CellFailed(f"resumed from {first_epoch.name}: {key} differs (not bit-identical)")


def cell_export(m: Matrix, arch: str, scratch: Path) -> None:
    checkpoint = m.reference(arch, 0) / "checkpoints" / "last.ckpt"
    output = m.command("export", str(checkpoint), f"--output={scratch}")
    written = {path.suffix for path in scratch.iterdir()}
    if not {".onnx", ".safetensors"} <= written:
        raise CellFailed(f"export wrote {sorted(written)}, not .onnx and .safetensors")
    # A peft module also gets its merged model and its adapters alone, each checked too.
    expected = ["last.safetensors", "last.onnx"]
    if arch in ADAPTERS:
        expected += ["last-merged", "last-adapters"]
        if not (scratch / "last-adapters" / "adapter_model.safetensors").is_file():
            raise CellFailed(f"export wrote no adapters peft loads: {sorted(os.listdir(scratch))}")
    unchecked = [name for name in expected if f"{scratch / name}  max abs diff" not in output]
    if unchecked or output.count(" ok") < len(expected):
        raise CellFailed(f"the parity check did not pass for {unchecked}: {output[-500:]}")


def cell_tune(m: Matrix, arch: str, scratch: Path) -> None:
    tuned = scratch / "tuned.yaml"
    fit = m.fit_args(arch, scratch / "unused", 0)[1:]  # tune takes fit's options
    options = ["--workers=0,2", "--steps=2", "--max-trials=2", "--precision=32-true,bf16-mixed"]
    options += ["--lr-steps=20"]  # the lr finder on the architecture, not its 100 steps
    m.in_process("tune", *options, f"--output={tuned}", *fit)
    config = yaml.safe_load(tuned.read_text())
    if "batch_size" not in config.get("data", {}).get("init_args", {}):
        raise CellFailed(f"the tuned config names no batch size: {config}")


def cell_predict(m: Matrix, arch: str, scratch: Path) -> None:
    root = m.reference(arch, 0)
    before = set((root / "predictions").glob("*.pt"))
    m.in_process("predict", *m.fit_args(arch, root, 0)[1:], "--ckpt_path=last")
    (written,) = set((root / "predictions").glob("*.pt")) - before
    predictions = torch.load(written, weights_only=True)
    if len(predictions) != 16:  # the validation set
        raise CellFailed(f"{len(predictions)} predictions for 16 samples")


def cell_doctor(m: Matrix, arch: str, scratch: Path) -> None:
    """The preset doctor once passed statically while fit then stopped (compile)."""
    own = [word for word in m.fit_args(arch, scratch, 0)[1:] if "every_3_steps" not in word]
    preset = f"--config={m.configs / 'presets' / 'compile.yaml'}"
    output = m.command("doctor", "--try", *own, preset)  # a refusal fails the cell
    tried = output.split("\nTried: ", 1)[-1].splitlines()[1:]
    verdicts = [row.split()[:2] for row in tried if row.strip()]
    if verdicts != [[preset.split("=", 1)[1], "pass"]]:  # the one preset, on the model
        raise CellFailed(f"doctor --try did not try the preset on the model: {output[-800:]}")


CELL_FUNCTIONS: dict[str, Callable[[Matrix, str, Path], None]] = {
    "fit": cell_fit,
    "kill9-mid-epoch-w0": kill_cell("mid-epoch", 0),
    "kill9-mid-epoch-w2": kill_cell("mid-epoch", 2),
    "kill9-epoch-boundary-w0": kill_cell("epoch-boundary", 0),
    "kill9-epoch-boundary-w2": kill_cell("epoch-boundary", 2),
    "sigterm-epoch-boundary": cell_sigterm,
    "compile": cell_compile,
    "bf16": cell_bf16,
    "ddp": cell_ddp,
    "fsdp2": cell_fsdp2,
    "fsdp2-resume": cell_fsdp2_resume,
    "export": cell_export,
    "tune": cell_tune,
    "predict": cell_predict,
    "doctor": cell_doctor,
}


# -- fixtures and tests -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def matrix(template, tmp_path_factory, request):
    """Render "Conformance Probe", add the user files and configs, install it; record results."""
    commit = rendered_commit()  # before the render: what the working tree was made of
    project = render(
        template,
        tmp_path_factory.mktemp("conformance") / "project",
        {"project_name": "Conformance Probe"},
    )
    package = package_name(project)
    for name in (*ARCHS, "kill_points"):
        text = (USER_FILES / f"{name}.py").read_text().replace("PACKAGE", package)
        (project / "src" / package / f"{name}.py").write_text(text)
    configs = project / "configs" / "conformance"
    configs.mkdir()
    for arch in ARCHS:
        text = (USER_FILES / f"{arch}.yaml").read_text().replace("PACKAGE", package)
        (configs / f"{arch}.yaml").write_text(text)
    # The default callbacks, with the step checkpoint every 3 steps instead of 100.
    callbacks = yaml.safe_load((project / "configs" / "default.yaml").read_text())["trainer"][
        "callbacks"
    ]
    for callback in callbacks:
        if "every_n_train_steps" in callback.get("init_args", {}):
            callback["init_args"]["every_n_train_steps"] = 3
    (configs / "every_3_steps.yaml").write_text(
        yaml.safe_dump({"trainer": {"callbacks": callbacks}})
    )
    git(project, "add", "-A")
    git(project, "commit", "-q", "--no-verify", "-m", "real architectures of my own")
    install_editable(project)
    sys.path.insert(0, str(project / "src"))
    matrix = Matrix(project, tmp_path_factory.mktemp("cells"))
    started = time.perf_counter()
    yield matrix
    sys.path.remove(str(project / "src"))
    uninstall(package)
    write_results(matrix.results, request.config, time.perf_counter() - started, commit)


def rendered_commit() -> str:
    """The commit the render is made from, marked when the working tree differs from it."""
    commit = git(REPO, "rev-parse", "--short", "HEAD").strip()
    if git(REPO, "status", "--porcelain", "--untracked-files=no").strip():
        commit += " + uncommitted changes"  # the render is of the working tree
    return commit


def write_results(
    results: dict[str, dict], config: pytest.Config, seconds: float, commit: str
) -> None:
    """This run's outcome of every cell it ran (and the matrix it belongs to) to RESULTS."""
    if not results:
        return
    import lightning
    import monai
    import peft
    import torch_geometric
    import transformers

    run = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": FULL_MATRIX if full_matrix_requested(config) else "bash scripts/test.sh",
        "cpus": os.cpu_count(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical cores",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "torch_geometric": torch_geometric.__version__,
            "monai": monai.__version__,
        },
        "seconds": round(seconds, 1),
    }
    cells = [
        {
            "arch": arch,
            "cell": cell,
            "fast": (arch, cell) in FAST,
            **results.get(f"{arch}-{cell}", {"outcome": "not run", "detail": "", "seconds": None}),
        }
        for arch in ARCHS
        for cell in CELLS
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"run": run, "archs": ARCHS, "cells_what": CELLS, "cells": cells}, indent=1)
    )


@pytest.mark.slow
@pytest.mark.conformance
@pytest.mark.parametrize(
    ("arch", "cell"),
    [pytest.param(arch, cell, id=f"{arch}-{cell}") for arch in ARCHS for cell in CELLS],
)
def test_cell(arch: str, cell: str, request: pytest.FixtureRequest) -> None:
    if (arch, cell) not in FAST and not full_matrix_requested(request.config):
        pytest.skip(f"outside the conformance matrix's fast subset: `{FULL_MATRIX}` runs it")
    request.getfixturevalue("matrix").run(arch, cell)


def test_the_conformance_page_lists_exactly_the_cells_the_suite_has():
    """docs/conformance.md (scripts/conformance_page.py) shows this suite's cells, no others."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from conformance_page import parse_page
    finally:
        sys.path.remove(str(REPO / "scripts"))
    archs, rows = parse_page(PAGE.read_text())
    assert archs == list(ARCHS.values())
    assert [cell for cell, _, _ in rows] == list(CELLS)
    for cell, what, entries in rows:
        assert what == CELLS[cell], f"{cell}: the page says what an older suite proved"
        fast = [arch for arch, entry in zip(ARCHS, entries, strict=True) if "(CI)" in entry]
        assert set(fast) == {arch for arch in ARCHS if (arch, cell) in FAST}, cell
