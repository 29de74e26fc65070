"""A callback that reports, from inside a run, what the run really did.

Tests append it with `--trainer.callbacks+=` (in-process or in subprocesses, with this
folder on PYTHONPATH); each rank writes `probe-rank<N>.json` into `out_dir`, which lies
outside the run root so that "only rank 0 wrote files" stays checkable.
"""

import json
import os
import signal
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.distributed.tensor import DTensor

MATMUL_LAYERS = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d)


class Probe(L.Callback):
    """Records ranks, steps, activation dtypes and global torch flags during training.

    Args:
        out_dir: where each rank writes its JSON report.
        signal_at_step: send SIGUSR1 to this process after this optimizer step (a
            simulated SLURM preemption warning).
    """

    def __init__(self, out_dir: str, signal_at_step: int | None = None) -> None:
        self.out_dir = out_dir
        self.signal_at_step = signal_at_step
        self.facts: dict = {"activation_dtypes": []}

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        dtypes = self.facts["activation_dtypes"]
        for module in pl_module.modules():
            if isinstance(module, MATMUL_LAYERS):
                module.register_forward_hook(
                    lambda _module, _inputs, output: dtypes.append(str(output.dtype))
                )

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.facts.update(
            start_step=trainer.global_step,
            world_size=trainer.world_size,
            global_rank=trainer.global_rank,
            root=str(trainer.default_root_dir),
            deterministic=torch.are_deterministic_algorithms_enabled(),
            anomaly_detection=torch.is_anomaly_enabled(),
            callbacks=[type(callback).__name__ for callback in trainer.callbacks],
            lr=trainer.optimizers[0].param_groups[0]["lr"],
            initial_lr=trainer.optimizers[0].param_groups[0].get("initial_lr"),
            parameter_types=sorted({type(p).__name__ for p in pl_module.parameters()}),
        )

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if batch_idx == 0 and "first_batch_sum" not in self.facts:
            self.facts["first_batch_sum"] = float(first_tensor(batch).double().sum())
            self.facts["first_loss"] = float(outputs["loss"])
        self.facts.setdefault("losses", []).append(float(outputs["loss"]))
        if self.signal_at_step is not None and trainer.global_step == self.signal_at_step:
            os.kill(os.getpid(), signal.SIGUSR1)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # FSDP2 shards are gathered first (a collective: every rank ends training here).
        full = [p.full_tensor() if isinstance(p, DTensor) else p for p in pl_module.parameters()]
        parameters = torch.cat([p.detach().double().flatten() for p in full])
        self.facts.update(
            global_step=trainer.global_step,
            parameter_checksum=float(parameters.sum()),
            parameter_norm=float(parameters.norm()),
            metrics={key: float(value) for key, value in trainer.callback_metrics.items()},
        )
        out = Path(self.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        (out / f"probe-rank{trainer.global_rank}.json").write_text(json.dumps(self.facts))


def first_tensor(batch: Any) -> torch.Tensor:
    """The batch's first tensor: `batch[0]` of a tuple batch, the first value of a dict."""
    while not isinstance(batch, torch.Tensor):
        batch = next(iter(batch.values() if isinstance(batch, Mapping) else batch))
    return batch


def probe_arg(out_dir: Path, **init_args) -> str:
    """The command-line option that appends a Probe writing into `out_dir`."""
    config = {"class_path": "probes.Probe", "init_args": {"out_dir": str(out_dir), **init_args}}
    return f"--trainer.callbacks+={json.dumps(config)}"


def read_probes(out_dir: Path) -> dict[int, dict]:
    """Every rank's report, by global rank."""
    reports = [json.loads(path.read_text()) for path in sorted(out_dir.glob("probe-rank*.json"))]
    return {report["global_rank"]: report for report in reports}
