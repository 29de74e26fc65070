"""Gradient health: norms at an interval, exploding/vanishing warnings, unused parameters."""

from typing import Any

import lightning as L
import torch
from jsonargparse.typing import NonNegativeFloat, NonNegativeInt, PositiveFloat
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_warn
from torch.distributed.tensor import DTensor


class GradientHealth(Callback):
    """Logs gradient norms every `every_n_steps` optimizer steps and reports unused parameters.

    The norms (one per parameter and their total, after AMP unscaling) are read on the host only at the interval. A total above
    `explode_above` or below `vanish_below` warns, once each. After the first training
    batch, parameters that require a gradient but got none in any of its backward passes
    (the loss does not depend on them: a branch unused in `forward`, a detached tensor, a
    layer meant to be frozen) are listed once by name. The whole batch counts, not its first
    backward: under manual optimization a GAN's generator gets no gradient from the
    discriminator's loss (its output is detached there), only from its own, later in the
    same batch.

    Args:
        every_n_steps: interval in optimizer steps; 0 turns the norms off.
        norm_type: the p of the p-norm (2.0, or "inf").
        explode_above: total norm that counts as exploding.
        vanish_below: total norm that counts as vanishing.
    """

    def __init__(
        self,
        every_n_steps: NonNegativeInt = 50,
        norm_type: float | str = 2.0,
        explode_above: PositiveFloat = 1e3,
        vanish_below: NonNegativeFloat = 1e-7,
    ) -> None:
        self.every_n_steps = every_n_steps
        self.norm_type = norm_type
        self.explode_above = explode_above
        self.vanish_below = vanish_below
        # Names of the parameters that had a gradient after a backward pass of the first
        # training batch; None once that batch has been judged.
        self._with_grad: set[str] | None = None
        self._backwards = 0
        self._warned: set[str] = set()

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._with_grad, self._backwards = set(), 0

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Each backward pass of the batch: a parameter may get its gradient in any of them,
        # and an optimizer may clear it (`zero_grad`) before the next.
        if self._with_grad is None:
            return
        self._backwards += 1
        self._with_grad.update(
            name for name, p in pl_module.named_parameters() if p.grad is not None
        )

    def on_train_batch_end(
        self,
        trainer: L.Trainer,
        pl_module: L.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._with_grad is None or not self._backwards:  # judged, or no backward yet
            return
        with_grad, self._with_grad = self._with_grad, None
        unused = [
            name
            for name, p in pl_module.named_parameters()
            if p.requires_grad and name not in with_grad
        ]
        if unused:
            rank_zero_warn(
                f"{len(unused)} parameter(s) got no gradient in the first training batch (in "
                f"none of its {self._backwards} backward pass(es)): {', '.join(unused)}. The "
                "loss does not depend on them; if that is meant, freeze them "
                "(`requires_grad_(False)`), else check `forward` for an unused branch or a "
                "detached tensor. Under DDP this also needs "
                "`--trainer.strategy ddp_find_unused_parameters_true`."
            )

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self.every_n_steps <= 0 or trainer.global_step % self.every_n_steps:
            return
        norms = grad_norms(pl_module, self.norm_type)
        if not norms:
            return
        total_key = next(key for key in norms if key.endswith("_norm_total"))
        total = float(norms[total_key])
        values = {key: float(value) for key, value in norms.items()}
        for logger in trainer.loggers:
            logger.log_metrics(values, step=trainer.global_step)
        if total > self.explode_above:
            self._warn_once(
                "explode",
                f"gradient norm {total:.3g} at step {trainer.global_step} exceeds "
                f"{self.explode_above:g}: gradients are exploding. Lower the learning rate or "
                "clip them (`--trainer.gradient_clip_val 1.0`).",
            )
        elif total < self.vanish_below:
            self._warn_once(
                "vanish",
                f"gradient norm {total:.3g} at step {trainer.global_step} is below "
                f"{self.vanish_below:g}: gradients are vanishing. Check the initialisation, "
                "the activations (saturated sigmoid/tanh) and normalisation layers.",
            )

    def _warn_once(self, kind: str, message: str) -> None:
        if kind not in self._warned:
            self._warned.add(kind)
            rank_zero_warn(message)


def grad_norms(module: torch.nn.Module, norm_type: float | str) -> dict[str, torch.Tensor]:
    """Lightning's `grad_norm` (same keys), for sharded gradients too.

    Lightning's stacks the per-parameter norms with `torch.tensor(list)`, which fails on
    FSDP2's DTensor gradients; here each norm is first reduced over the shards (a
    collective: every rank runs this hook at the same step).
    """
    p = float(norm_type)
    norms = {}
    for name, parameter in module.named_parameters():
        if parameter.grad is not None:
            norm = parameter.grad.detach().norm(p)
            if isinstance(norm, DTensor):
                norm = norm.full_tensor()
            norms[f"grad_{p}_norm/{name}"] = norm
    if norms:
        norms[f"grad_{p}_norm_total"] = torch.stack(list(norms.values())).norm(p)
    return norms
