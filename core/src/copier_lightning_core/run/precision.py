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

doctor predicts these verdicts without building anything (hardware.resolve); the
prediction is tested against this guard (the library's tests/test_resolver.py).
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
from .hardware import device_kind, unrunnable_after_lightning

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


@contextmanager
def lightning_refusals(settings: Mapping[str, Any]) -> Iterator[None]:
    """Building the Trainer: Lightning's refusal of its `settings` as one paragraph."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=CPU_FP16_NOTICE)
        try:
            yield
        # What Lightning's connector raises for settings it cannot build a Trainer for.
        except (MisconfigurationException, ValueError, TypeError) as error:
            raise Refusal(
                f"Lightning refuses these trainer settings ({_given(settings)}): {error} "
                "`doctor` with the same flags names the setting to change and the preset "
                "to use."
            ) from None


def check_built_trainer(trainer: Trainer, settings: Mapping[str, Any]) -> None:
    """Stop with one paragraph per setting the built Trainer cannot run; fp16 on CPU for real."""
    device = device_kind(trainer.accelerator)
    plugins = settings.get("plugins")
    listed = plugins if isinstance(plugins, list | tuple) else [plugins]
    plugin = next((p for p in listed if isinstance(p, Precision)), None)
    refusals = unrunnable_after_lightning(
        device,
        str(trainer.precision),
        plugin,
        bool(settings.get("sync_batchnorm")),
        cuda_bf16=device == "cuda" and torch.cuda.is_bf16_supported(),
    )
    if refusals:
        raise Refusal(*(refusal.message for refusal in refusals))
    # 16-mixed asked, and Lightning built bfloat16 on CPU in its place: undone.
    asked = str(settings.get("precision"))
    if asked in ("16", "16-mixed") and device == "cpu" and trainer.precision == "bf16-mixed":
        fp16 = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
        trainer.strategy.precision_plugin = fp16
        rank_zero_info("precision 16-mixed on CPU: float16 autocast with a CPU GradScaler")


def _given(settings: Mapping[str, Any]) -> str:
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
