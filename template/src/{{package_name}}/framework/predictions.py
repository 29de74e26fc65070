# Managed by the template; local edits are merged on update.
"""Callbacks the default config wires in (see configs/default.yaml)."""

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.callbacks import BasePredictionWriter


class PredictionWriter(BasePredictionWriter):
    """Writes what `predict_step` returns to `<output_dir>/predictions.pt`.

    LightningCLI's `predict` otherwise computes predictions and throws them away. Batch
    outputs (tensors, or dicts / lists / tuples of tensors) are concatenated along the first
    dimension; under several processes each rank writes `predictions-rank<N>.pt` with the
    dataset indices it predicted, so the parts can be put back in order.

    Args:
        output_dir: folder of the file; defaults to `<trainer.default_root_dir>/predictions`.
    """

    def __init__(self, output_dir: str | None = None) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        if trainer.predict_loop.num_dataloaders > 1:
            predictions = [_concat(per_loader) for per_loader in predictions]
        else:
            predictions = _concat(predictions)
        output_dir = Path(self.output_dir or Path(trainer.default_root_dir) / "predictions")
        output_dir.mkdir(parents=True, exist_ok=True)
        if trainer.world_size > 1:
            path = output_dir / f"predictions-rank{trainer.global_rank}.pt"
            torch.save({"predictions": predictions, "batch_indices": batch_indices}, path)
        else:
            path = output_dir / "predictions.pt"
            torch.save(predictions, path)
        print(f"Predictions written to {path}")


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
