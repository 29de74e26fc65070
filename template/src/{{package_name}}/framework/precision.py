# Managed by the template; local edits are merged on update.
"""Checks the chosen precision and strategy against the accelerator, before anything starts.

Lightning resolves `trainer.precision` and `trainer.strategy` itself, with two gaps this
module fills:

- On CPU, Lightning silently replaces `precision="16-mixed"` by `"bf16-mixed"` (a warning,
  no GradScaler). The fp16 preset then measures something else than it claims. Here
  `16-mixed` on CPU becomes Lightning's own MixedPrecision plugin with `device="cpu"` and a
  CPU GradScaler: real float16 autocast, with loss scaling, as on a GPU.
- A precision or strategy the hardware cannot run (bfloat16 on a GPU without it, FSDP or
  SyncBatchNorm on CPU) fails deep inside the first step or with a message that names no preset. Here it
  stops before the Trainer is built, naming the preset to use instead.
"""

import sys
from typing import Any

import torch
from lightning.pytorch.accelerators import Accelerator, CPUAccelerator, CUDAAccelerator
from lightning.pytorch.plugins import MixedPrecision
from lightning.pytorch.plugins.precision import Precision
from lightning.pytorch.strategies import FSDPStrategy


def resolve_accelerator(flag: str | Accelerator | None) -> str:
    """ "cpu", "cuda", "mps" or the flag itself: the device kind `trainer.accelerator` selects."""
    if isinstance(flag, CPUAccelerator):
        return "cpu"
    if isinstance(flag, CUDAAccelerator):
        return "cuda"
    if isinstance(flag, Accelerator):
        return type(flag).__name__
    flag = (flag or "auto").lower()
    if flag in ("auto", "gpu"):
        if torch.cuda.is_available():
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
        return "cpu" if flag == "auto" else "gpu"
    return flag


def trainer_kwargs_for_accelerator(trainer_config: dict[str, Any]) -> dict[str, Any]:
    """Trainer arguments that replace or complete `trainer_config` for its accelerator.

    Exits with a one-paragraph message when the precision or strategy cannot run here.
    """
    device = resolve_accelerator(trainer_config.get("accelerator"))
    if device == "gpu":
        sys.exit(
            "error: --trainer.accelerator gpu: no GPU is visible here (torch.cuda.is_available() "
            "is False, and no MPS). Use --trainer.accelerator cpu, or auto to take a GPU "
            "when there is one; check the CUDA build of torch and CUDA_VISIBLE_DEVICES."
        )
    _check_devices(trainer_config.get("devices", "auto"), device)
    if trainer_config.get("sync_batchnorm") and device == "cpu":
        sys.exit(
            "error: --trainer.sync_batchnorm true: torch's SyncBatchNorm runs on GPUs only, "
            "and this run is on 'cpu'. Set it to false here (configs/presets/ddp.yaml); on "
            "CPU each process keeps its own BatchNorm statistics."
        )
    precision = str(trainer_config.get("precision") or "32-true")
    strategy = trainer_config.get("strategy")
    if _is_fsdp(strategy) and device != "cuda":
        sys.exit(
            f"error: --trainer.strategy {_strategy_name(strategy)} (configs/presets/fsdp.yaml) "
            f"shards a model across CUDA GPUs, but this run is on {device!r}. FSDP cannot run "
            "here: drop the fsdp preset, and use configs/presets/ddp.yaml for several processes "
            "on one machine (on CPU: --trainer.accelerator cpu --trainer.devices 2)."
        )
    if precision.startswith("bf16") and device == "cuda" and not torch.cuda.is_bf16_supported():
        sys.exit(
            f"error: --trainer.precision {precision}: this GPU "
            f"({torch.cuda.get_device_name()}) has no bfloat16 support. Use "
            "configs/presets/fp16.yaml instead (--trainer.precision 16-mixed, float16 with a "
            "GradScaler), or 32-true."
        )
    plugins = trainer_config.get("plugins") or []
    plugins = list(plugins) if isinstance(plugins, list | tuple) else [plugins]
    has_precision_plugin = any(isinstance(plugin, Precision) for plugin in plugins)
    if precision == "16-mixed" and device == "cpu" and not has_precision_plugin:
        # Lightning's own plugin, given the device and scaler it does not pick on CPU.
        fp16 = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
        return {"precision": None, "plugins": [*plugins, fp16]}
    return {}


def _check_devices(devices: Any, device: str) -> None:
    count = (
        int(devices)
        if isinstance(devices, int | str) and str(devices).lstrip("-").isdigit()
        else None
    )
    if count is None or count > 0 or (count == -1 and device != "cpu"):
        return
    allowed = "a count > 0, a list of device ids, or auto" + (
        "" if device == "cpu" else " (-1: all)"
    )
    sys.exit(
        f"error: --trainer.devices {devices}: not a number of {device} devices. Give {allowed}; "
        "e.g. --trainer.devices 2 for two processes."
    )


def _is_fsdp(strategy: Any) -> bool:
    if isinstance(strategy, FSDPStrategy):
        return True
    return isinstance(strategy, str) and strategy.lower().startswith("fsdp")


def _strategy_name(strategy: Any) -> str:
    return strategy if isinstance(strategy, str) else type(strategy).__name__
