"""The conformance matrix: every preset and tool of a project, one cell each, on a model.

Each cell runs the project's own command line (matrix.py) on one architecture: a model and
data named by config files, or none, the model and data configs/default.yaml names. A cell
works, or is refused before any work in one paragraph naming cause and fix, and then only
where the caller expects that refusal. The template's suite runs the cells on the real
architectures it brings; a project's `pytest -m conformance` runs them on its own model
(contract.py).
"""

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml

from .matrix import (
    BATCHES_PER_EPOCH,
    CellFailed,
    Matrix,
    Refused,
    assert_identical,
    last_checkpoint,
    load,
)

# cell -> what it proves
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
# kill point -> (PauseAt point, batches done when it waits, batches in the last.ckpt left)
KILLS = {
    "mid-epoch": ("train_batch", 4, 3),
    "epoch-boundary": ("epoch_start", BATCHES_PER_EPOCH, BATCHES_PER_EPOCH),
}
# A best-checkpoint callback's state key: ModelCheckpoint{'monitor': 'val_loss', 'mode': 'min', ...
MONITORED = re.compile(r"'monitor': '([^']+)', 'mode': '(min|max)'")


def conformance_requested(config: pytest.Config) -> bool:
    """`pytest -m conformance` (or a marker expression naming it) asks for every cell."""
    return "conformance" in (config.option.markexpr or "")


def cell_fit(m: Matrix, arch: str, scratch: Path) -> None:
    root = m.reference(arch, 0)
    state = last_checkpoint(root)
    if state["global_step"] != m.steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {m.steps(arch)}")
    scores: dict[int, float] = {}  # epoch -> the monitored metric, from the callback's state
    monitored: tuple[str, ...] = ()  # (metric, mode) of the best-checkpoint callback
    for key, callback in state["callbacks"].items():
        found = MONITORED.search(key)
        if found:
            monitored = found.groups()
            for path, score in callback["best_k_models"].items():
                epoch = re.search(r"epoch(\d+)", Path(path).name)
                scores[int(epoch.group(1)) if epoch else -1] = float(score)
    if not monitored or sorted(scores) != [0, 1]:
        raise CellFailed(
            f"expected the monitored metric of epochs 0 and 1 in the checkpoint: {scores}"
        )
    name, mode = monitored
    if not (scores[1] < scores[0] if mode == "min" else scores[1] > scores[0]):
        raise CellFailed(f"{name} did not improve: {scores[0]:.4f} -> {scores[1]:.4f}")
    if "Test metric" not in m.outputs[root]:
        raise CellFailed("`fit` did not test the best checkpoint after training")


def resume_after_signal(
    m: Matrix, arch: str, scratch: Path, kill: str, sig: str, workers: int
) -> None:
    point, batches, saved_batches = KILLS[kill]
    step, saved_step = m.steps(arch, batches), m.steps(arch, saved_batches)
    root = scratch / "run"
    args = [*m.fit_args(arch, root, workers), "--test_after_fit=false"]
    m.signalled(args, point, step, sig, scratch / "marker")
    saved = last_checkpoint(root)["global_step"]
    if sig == "SIGKILL" and saved != saved_step:
        raise CellFailed(f"the last.ckpt a kill at step {step} leaves is of step {saved}")
    if sig == "SIGTERM" and not step <= saved < m.steps(arch):
        raise CellFailed(f"SIGTERM at step {step} left a last.ckpt of step {saved}")
    m.in_process(*args, "--ckpt_path=last")
    reference = last_checkpoint(m.reference(arch, workers))
    assert_identical(last_checkpoint(root), reference, f"resumed from step {saved}")


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
    if state["global_step"] != m.steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {m.steps(arch)}")


def cell_bf16(m: Matrix, arch: str, scratch: Path) -> None:
    root = scratch / "run"
    m.in_process(*m.fit_args(arch, root, 0, "bf16"), "--test_after_fit=false")
    state = last_checkpoint(root)
    if state["global_step"] != m.steps(arch):
        raise CellFailed(f"trained {state['global_step']} steps, not {m.steps(arch)}")
    for name, tensor in state["state_dict"].items():
        if tensor.is_floating_point() and not torch.isfinite(tensor).all():
            raise CellFailed(f"a non-finite weight after bf16 training: {name}")


def cell_ddp(m: Matrix, arch: str, scratch: Path) -> None:
    root = scratch / "run"
    m.command(*m.fit_args(arch, root, 0, "ddp"), *m.two_processes(), "--test_after_fit=false")
    trained, half = last_checkpoint(root)["global_step"], m.steps(arch) // 2
    if trained != half:  # each process sees half of each epoch
        raise CellFailed(f"trained {trained} steps on 2 processes, not {half}")


def full_state(folder: Path, scratch: Path) -> dict[str, Any]:
    """Every tensor of an FSDP2 checkpoint folder (weights and optimizer state), gathered."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    if not (folder / ".metadata").is_file():
        raise CellFailed(f"{folder} is not a sharded (DCP) checkpoint folder")
    scratch.mkdir(parents=True, exist_ok=True)
    target = scratch / f"{folder.parent.parent.name}-{folder.name}.pt"
    dcp_to_torch_save(folder, target)
    return load(target)


def cell_fsdp2(m: Matrix, arch: str, scratch: Path) -> None:
    root = m.fsdp2_run(arch)
    m.command("consolidate-ckpt", str(root / "checkpoints" / "last.ckpt"))
    consolidated = load(root / "checkpoints" / "consolidated" / "last.ckpt")
    if consolidated["global_step"] != m.steps(arch) // 2:
        raise CellFailed(f"trained {consolidated['global_step']} steps, not {m.steps(arch) // 2}")
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
    if m.archs[arch].adapters:
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
    expected = m.archs[arch].predict_samples
    if len(predictions) != (expected or len(predictions)) or not len(predictions):
        raise CellFailed(f"{len(predictions)} predictions for {expected or 'some'} samples")


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


def run_cell(m: Matrix, arch: str, cell: str, expected: str | None = None) -> dict[str, Any]:
    """Run one cell; record its outcome and time in `m.results`, and return that record.

    A failure raises. A refusal before any work passes as `{"outcome": "refused"}` only when
    its paragraph holds `expected`, a phrase of the refusal the caller accepts; a cell that
    runs when a refusal is expected fails.
    """
    name = f"{arch}-{cell}"
    scratch = m.scratch / name
    start = time.perf_counter()
    record: dict[str, Any] = {"outcome": "pass", "detail": ""}
    try:
        try:
            CELL_FUNCTIONS[cell](m, arch, scratch)
        except Refused as refusal:
            message = str(refusal)
            if expected is None or expected not in message:
                raise CellFailed(f"refused: {message}") from None
            if list(scratch.rglob("*.ckpt")):
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
        m.results[name] = {"arch": arch, "cell": cell, **record}
    return record
