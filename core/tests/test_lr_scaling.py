"""LinearLRScaling scales every lr the schedule will use, across SequentialLR's milestones."""

from types import SimpleNamespace

import pytest
import torch

from copier_lightning_core.callbacks.lr_scaling import LinearLRScaling


def warmup_then_cosine(lr: float):
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.25, total_iters=3)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=6)
    return optimizer, torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], [3])


def lrs(optimizer, scheduler, steps: int) -> list[float]:
    seen = []
    for _ in range(steps):
        seen.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return seen


def test_four_processes_get_four_times_the_lr_before_and_after_the_warmup_milestone():
    optimizer, scheduler = warmup_then_cosine(0.1)
    trainer = SimpleNamespace(
        world_size=4,
        optimizers=[optimizer],
        lr_scheduler_configs=[SimpleNamespace(scheduler=scheduler)],
    )
    LinearLRScaling(reference_world_size=1).on_train_start(trainer, None)
    reference = lrs(*warmup_then_cosine(0.4), steps=9)
    assert lrs(optimizer, scheduler, steps=9) == pytest.approx(reference)
