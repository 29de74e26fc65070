# Managed by the template; local edits are merged on update.
"""`predict`'s output: a file per call under `<root>/predictions/`, never over an earlier one."""

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter

from .paths import RunLayout, unused_name


class PredictionWriter(BasePredictionWriter):
    """Writes what `predict_step` returns to `<output_dir>/predictions.pt`, then `-1`, `-2`, ...

    LightningCLI's `predict` otherwise computes predictions and throws them away. Batch
    outputs (tensors, or dicts / lists / tuples of tensors) are concatenated along the first
    dimension. Each call writes a new file (the first free `predictions[-N].pt`, printed),
    so predictions of another checkpoint or dataloader (`predict --dataloader
    val_dataloader`) sit next to the earlier ones. Under several processes each rank
    writes `<name>-rank<N>.pt` with the dataset indices it predicted, so the parts can be
    put back in order; rank 0 picks the name for all of them.

    Args:
        output_dir: folder of the files; defaults to `<trainer.default_root_dir>/predictions`.
    """

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir
        self._name = ""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage == "predict":
            # Chosen before any rank writes, so that no rank sees another's new file.
            self._name = trainer.strategy.broadcast(
                unused_name(self._folder(trainer), "predictions", ".pt")
            )

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        if trainer.predict_loop.num_dataloaders > 1:
            predictions = [_concat(per_loader) for per_loader in predictions]
        else:
            predictions = _concat(predictions)
        folder = self._folder(trainer)
        folder.mkdir(parents=True, exist_ok=True)
        if trainer.world_size > 1:
            path = folder / f"{self._name}-rank{trainer.global_rank}.pt"
            torch.save({"predictions": predictions, "batch_indices": batch_indices}, path)
        else:
            path = folder / f"{self._name}.pt"
            torch.save(predictions, path)
        print(f"Predictions written to {path}")

    def _folder(self, trainer: L.Trainer) -> Path:
        return Path(self.output_dir or RunLayout(trainer.default_root_dir).predictions)


def _concat(outputs: list) -> Any:
    """Concatenate per-batch outputs of the same structure along the batch dimension."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([out.reshape(-1) if out.dim() == 0 else out for out in outputs])
    if isinstance(first, dict):
        return {key: _concat([out[key] for out in outputs]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_concat(list(parts)) for parts in zip(*outputs, strict=True))
    return outputs
