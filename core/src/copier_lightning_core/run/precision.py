"""The Trainer guard: the Trainer Lightning built from the config, checked before any work.

Lightning's accelerator connector resolves `accelerator`, `devices`, `num_nodes`,
`strategy`, `precision` and `plugins` when the Trainer is built, and refuses what it knows
cannot work: no GPU, devices this machine lacks, FSDP1 off CUDA, a precision FSDP2 does not
take, a precision flag next to a precision plugin. `lightning_refusals` turns its error
into one paragraph that names the settings it was given. The guard resolves nothing
again: it reads what Lightning chose (`check_built_trainer`) and adds what Lightning
leaves out:

- Real float16 on CPU. There Lightning replaces `precision="16-mixed"` by `"bf16-mixed"`
  (a warning, no GradScaler), and the fp16 preset would measure something else than it
  claims. The guard gives the strategy Lightning's own MixedPrecision plugin with
  `device="cpu"` and a CPU GradScaler instead: float16 autocast with loss scaling, as on
  a GPU.
- What Lightning builds but the device cannot run (hardware.unrunnable_after_lightning):
  SyncBatchNorm off CUDA, a precision plugin made for another device, bfloat16 on a GPU
  without it, float64 on MPS. Each fails deep inside the first step, or names no preset.

doctor on this machine builds a Trainer from the same settings and applies the same rules
(lightning_plan.py): its answer is this guard's. For a machine described as data it
predicts them (hardware.resolve), held to this guard by the library's tests/test_resolver.py.
"""

import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.plugins import MixedPrecision, Precision
from lightning.pytorch.utilities import rank_zero_info

from ..platform.refusal import Refusal
from .hardware import Unrunnable, device_kind, unrunnable_after_lightning

# The Trainer arguments Lightning's accelerator connector resolves.
HARDWARE_SETTINGS = (
    "accelerator",
    "devices",
    "num_nodes",
    "strategy",
    "precision",
    "plugins",
    "sync_batchnorm",
)
# Lightning's notice that 16-mixed on CPU trains in bfloat16; the guard makes it float16.
CPU_FP16_NOTICE = r".*AMP with fp16 is not supported on CPU"


# What Lightning's connector raises for settings it cannot build a Trainer for.
REFUSED_BY_LIGHTNING = (MisconfigurationException, ValueError, TypeError)


@contextmanager
def lightning_refusals(settings: Mapping[str, Any]) -> Iterator[None]:
    """Building the Trainer: Lightning's refusal of its `settings` as one paragraph."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CPU_FP16_NOTICE)
        try:
            yield
        except REFUSED_BY_LIGHTNING as error:
            raise Refusal(
                f"Lightning refuses these trainer settings ({given_settings(settings)}): "
                f"{error} `doctor` with the same flags tells whether the device or the "
                "precision settings are at fault."
            ) from None


def check_built_trainer(trainer: Trainer, settings: Mapping[str, Any]) -> None:
    """Stop with one paragraph per setting the built Trainer cannot run; fp16 on CPU for real."""
    refusals = unrunnable(trainer, settings)
    if refusals:
        raise Refusal(*(refusal.message for refusal in refusals))
    if bf16_in_place_of_fp16(trainer, settings):  # undone
        fp16 = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
        trainer.strategy.precision_plugin = fp16
        rank_zero_info("precision 16-mixed on CPU: float16 autocast with a CPU GradScaler")


def unrunnable(trainer: Trainer, settings: Mapping[str, Any]) -> list[Unrunnable]:
    """What the Trainer Lightning built from `settings` cannot run on its device."""
    device = device_kind(trainer.accelerator)
    return unrunnable_after_lightning(
        device,
        str(trainer.precision),
        precision_plugin(settings.get("plugins")),
        bool(settings.get("sync_batchnorm")),
        cuda_bf16=device == "cuda" and torch.cuda.is_bf16_supported(),
    )


def bf16_in_place_of_fp16(trainer: Trainer, settings: Mapping[str, Any]) -> bool:
    """16-mixed asked, and Lightning built bfloat16 on CPU in its place (CPU_FP16_NOTICE)."""
    asked = str(settings.get("precision"))
    return (
        asked in ("16", "16-mixed")
        and device_kind(trainer.accelerator) == "cpu"
        and trainer.precision == "bf16-mixed"
    )


def precision_plugin(plugins: Any) -> Precision | None:
    """The precision plugin among the built `trainer.plugins`, if any."""
    listed = plugins if isinstance(plugins, list | tuple) else [plugins]
    return next((p for p in listed if isinstance(p, Precision)), None)


def given_settings(settings: Mapping[str, Any]) -> str:
    """The hardware settings as flags: `--trainer.devices -3 --trainer.strategy DDPStrategy`."""
    shown = []
    for key in HARDWARE_SETTINGS:
        value = settings.get(key)
        if value is None:
            continue
        values = value if isinstance(value, list | tuple) else [value]
        names = ", ".join(_name(item) for item in values)
        shown.append(f"--trainer.{key} {names if len(values) == 1 else f'[{names}]'}")
    return " ".join(shown)


def _name(value: Any) -> str:
    if isinstance(value, str | int | float | bool):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, Mapping) and "class_path" in value:
        return str(value["class_path"]).rsplit(".", 1)[-1]
    return type(value).__name__
