"""The one loader every command reads checkpoints through, and the checks of what it read.

A checkpoint is read weights-only (it never runs code from a file), with one paragraph for
a file that is missing, truncated or not a Lightning checkpoint. A folder of shards (what
an FSDP2 run saves, configs/presets/fsdp2.yaml) is read too, gathered into full tensors in
this process (through a temporary file in $TMPDIR): weights and run state, without the
optimizer states, which torch's distributed checkpoint keys by parameter name, so no
single-process optimizer loads them.
"""

import tempfile
import zipfile
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

from ..platform.refusal import Refusal
from .left_out import left_out_names

SHARD_INDEX = ".metadata"  # torch distributed checkpoint's index in a folder of shards
RUN_STATE = "meta.pt"  # Lightning's file for the rest (counters, callbacks, hyperparameters)


def load_checkpoint(path: Path) -> dict[str, Any]:
    """`torch.load(weights_only=True)` with a one-paragraph error for a bad file; a folder of
    shards gathered (see above)."""
    if is_sharded(path):
        return _gathered(path)
    if not path.is_file():
        problem = "is a folder, not a checkpoint" if path.is_dir() else "does not exist"
        raise Refusal(
            f"checkpoint {path} {problem}. Check the path (runs keep them in "
            "<root>/checkpoints/: files, or folders of shards that FSDP2 runs save)."
        )
    fix = "use another file, e.g. last.ckpt or an earlier epoch's, from <root>/checkpoints/."
    if not zipfile.is_zipfile(path):  # what torch.save writes; torch's own error is misleading
        raise Refusal(
            f"{path} is not a checkpoint: it is not the zip archive torch.save writes. "
            "It may be truncated (an interrupted copy or a full disk) or another format "
            f"(safetensors, ONNX, a pickle); {fix}"
        )
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except Exception as error:  # torch raises several types for damaged or unsafe files
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise Refusal(
            f"{path} is not a readable checkpoint ({type(error).__name__}: {first_line}). "
            "It may be damaged, or hold objects a weights-only load refuses (it never runs "
            f"code from a file); {fix}"
        ) from None
    return _lightning_checkpoint(checkpoint, path)


def is_sharded(path: Path) -> bool:
    """A folder of shards (torch distributed checkpoint), as FSDP2 runs save, not a file."""
    return path.is_dir() and (path / SHARD_INDEX).is_file()


def _gathered(folder: Path) -> dict[str, Any]:
    """The shards of `folder` as full tensors, with the run state, minus optimizer states."""
    with tempfile.TemporaryDirectory() as tmp:
        gathered = Path(tmp) / "gathered.pt"
        try:
            dcp_to_torch_save(folder, gathered)
        except Exception as error:  # torch raises several types for damaged shards
            first_line = str(error).strip().splitlines()[0] if str(error).strip() else ""
            raise Refusal(
                f"{folder} is a folder of shards that cannot be read "
                f"({type(error).__name__}: {first_line}). A shard may be missing or damaged "
                "(an interrupted save or copy); use another checkpoint from <root>/checkpoints/."
            ) from None
        checkpoint = torch.load(gathered, map_location="cpu", weights_only=True)
    if (folder / RUN_STATE).is_file():
        checkpoint.update(torch.load(folder / RUN_STATE, map_location="cpu", weights_only=True))
    weights = {key: value for key, value in checkpoint.items() if not key.startswith("optimizer_")}
    return _lightning_checkpoint(weights, folder)


def _lightning_checkpoint(checkpoint: object, path: Path) -> dict[str, Any]:
    """`checkpoint` when it is a Lightning checkpoint (it has a `state_dict`), else stop."""
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise Refusal(
            f"{path} holds no `state_dict`: it is not a Lightning checkpoint (a file "
            "that `fit` writes to <root>/checkpoints/). For weights saved another way, "
            "convert them to safetensors and use `fit --init_from FILE.safetensors`."
        )
    return checkpoint


def check_weights_fit(model: torch.nn.Module, checkpoint: dict[str, Any], path: Path) -> None:
    """Stop with one paragraph when the checkpoint's weights do not load into `model`.

    Compares the names and shapes of the two state_dicts before Lightning loads the file,
    instead of parsing torch's error, which lists every key on one line. Missing and
    unexpected names count only when the module loads strictly (`strict_loading`, as
    Lightning does); a shape that differs never loads.
    """
    expected, saved = model.state_dict(), checkpoint["state_dict"]
    strict = getattr(model, "strict_loading", True)
    rebuilt = left_out_names(checkpoint)  # put back from `model` when loaded (left_out.py)
    missing = [key for key in expected if key not in saved and key not in rebuilt] if strict else []
    unexpected = [key for key in saved if key not in expected] if strict else []
    reshaped = [
        f"{key} {tuple(saved[key].shape)} in the checkpoint, {tuple(tensor.shape)} here"
        for key, tensor in expected.items()
        if isinstance(saved.get(key), torch.Tensor) and saved[key].shape != tensor.shape
    ]
    if not (missing or unexpected or reshaped):
        return
    hints = []
    if any("_orig_mod." in key for key in unexpected):
        hints.append(
            "the checkpoint was saved from a torch.compile'd module (`_orig_mod.` keys): save "
            "the uncompiled module, or strip the prefix"
        )
    if missing and unexpected:
        hints.append("a renamed or moved submodule shows up as the same names on both lists")
    if reshaped:
        hints.append("a changed layer size (e.g. num_classes)")
    raise Refusal(
        f"the weights in {path} do not fit the model. "
        f"Missing in the checkpoint ({len(missing)}): {', '.join(missing) or '-'}. "
        f"Unexpected in the checkpoint ({len(unexpected)}): {', '.join(unexpected) or '-'}. "
        f"Other shapes ({len(reshaped)}): {'; '.join(reshaped) or '-'}. "
        f"Hint: {'; '.join(hints) or 'check that the model config matches the run that saved it'}. "
        "To start from partly matching weights instead, use `fit --init_from PATH`."
    )


def check_weights_file(path: Path, flag: str) -> None:
    """A `.ckpt` or `.safetensors` file that can be read, before the run starts.

    A `.ckpt` file is read (and a damaged one refused) by the run plan, which keeps its
    weights for the fit (run/run_plan.py); a safetensors file's header is read here.
    """
    if not path.is_file():
        raise Refusal(f"{flag} {path}: no such file. Check the path.")
    if path.suffix != ".safetensors":
        return
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as weights:
            weights.keys()
    except (SafetensorError, OSError) as error:
        raise Refusal(
            f"{flag} {path} is not a readable safetensors file ({error}). It may be "
            "truncated (an interrupted copy) or another format; `export` writes valid ones."
        ) from None
