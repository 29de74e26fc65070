# Managed by the template; local edits are merged on update.
"""The Trainer guard: applies `hardware.resolve`'s plan before the CLI builds the Trainer.

Lightning resolves `trainer.precision` and `trainer.strategy` itself, with two gaps the plan
fills:

- On CPU, Lightning silently replaces `precision="16-mixed"` by `"bf16-mixed"` (a warning,
  no GradScaler). The fp16 preset then measures something else than it claims. Here
  `16-mixed` on CPU becomes Lightning's own MixedPrecision plugin with `device="cpu"` and a
  CPU GradScaler: real float16 autocast, with loss scaling, as on a GPU.
- A setting the hardware cannot run (bfloat16 on a GPU without it, FSDP1 or SyncBatchNorm on
  CPU, more devices than there are) fails deep inside the first step or with a message that
  names no preset. Here it stops before the Trainer is built, naming the fix.

doctor reads the same plan, so what it passes is what `fit` starts.
"""

from typing import Any

import torch
from lightning.pytorch.plugins import MixedPrecision

from ..platform.refusal import Refusal
from .hardware import probe, resolve


def trainer_kwargs_for_accelerator(trainer_config: dict[str, Any]) -> dict[str, Any]:
    """Trainer arguments that replace or complete `trainer_config` on this machine.

    Exits with one paragraph per setting that cannot run here.
    """
    plan = resolve(trainer_config, probe())
    if plan.refusals:
        raise Refusal(*(refusal.message for refusal in plan.refusals))
    if not plan.cpu_fp16:
        return {}
    plugins = trainer_config.get("plugins") or []
    plugins = list(plugins) if isinstance(plugins, list | tuple) else [plugins]
    # Lightning's own plugin, given the device and scaler it does not pick on CPU.
    fp16 = MixedPrecision("16-mixed", device="cpu", scaler=torch.amp.GradScaler("cpu"))
    return {"precision": None, "plugins": [*plugins, fp16]}
