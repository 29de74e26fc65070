"""`predict`'s output: a file per call under `<root>/predictions/`, never over an earlier one."""

from importlib.util import find_spec
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
import torch.distributed as dist
from lightning.pytorch.callbacks import BasePredictionWriter

from ..platform.paths import RunLayout, unused_name
from .prediction_table import PredictionFormatError, table_of, write_table


class PredictionWriter(BasePredictionWriter):
    """Writes what `predict_step` returns to `<output_dir>/predictions.<format>`, then `-1`, ...

    LightningCLI's `predict` otherwise computes predictions and throws them away. Each call
    writes a new file (the first free `predictions[-N].<format>`, printed), so predictions
    of another checkpoint or dataloader (`predict --dataloader val_dataloader`) sit next to
    the earlier ones.

    `format: pt` (default) saves the outputs with `torch.save`: batch outputs (tensors, or
    dicts / lists / tuples of tensors) concatenated along the first dimension. Under several
    processes each rank writes `<name>-rank<N>.pt` with the dataset indices it predicted,
    so the parts can be put back in order; rank 0 picks the name for all of them.

    `format: csv | parquet` writes one table, one row per input, in dataset order, also
    under several processes (rank 0 gathers the rows and writes the only file). Columns:
    `index` (the input's position in the dataset, when the loader has one), `dataloader`
    (with several), then what `predict_step` returns: a tensor with one value per sample
    is the column `prediction`; a dict gives a column per key, a list of ids (strings or
    numbers) included, with its `id` key first. A key whose tensor holds K values per
    sample (`(N, K)`, e.g. class probabilities) gives the columns `key_0` ... `key_{K-1}`;
    anything with more dimensions per sample is refused (keep `format: pt` for it).
    Parquet needs pyarrow (`pip install -e ".[parquet]"`).

    Args:
        output_dir: folder of the files; defaults to `<trainer.default_root_dir>/predictions`.
        format: `pt` (torch.save), `csv` or `parquet` (a table, one row per input).
    """

    def __init__(
        self, output_dir: str | None = None, format: Literal["pt", "csv", "parquet"] = "pt"
    ) -> None:
        super().__init__(write_interval="epoch")
        self.output_dir = output_dir
        self.format = format
        self._name = ""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "predict":
            return
        if self.format == "parquet" and find_spec("pyarrow") is None:
            raise PredictionFormatError(
                "PredictionWriter format 'parquet' needs pyarrow, which is not installed. "
                'Install it with `pip install -e ".[parquet]"` (or `pip install pyarrow`), '
                "or write CSV: `format: csv` under the PredictionWriter in configs/default.yaml."
            )
        # Chosen before any rank writes, so that no rank sees another's new file.
        self._name = trainer.strategy.broadcast(
            unused_name(self._folder(trainer), "predictions", f".{self.format}")
        )

    def write_on_epoch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, predictions: Any, batch_indices: Any
    ) -> None:
        if self.format != "pt":
            self._write_table(trainer, predictions, batch_indices)
            return
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

    def _write_table(self, trainer: L.Trainer, predictions: Any, batch_indices: Any) -> None:
        if trainer.predict_loop.num_dataloaders == 1:
            predictions = [predictions]  # batch_indices are per dataloader in any case
        try:
            part: dict[str, list[Any]] | str = table_of(predictions, batch_indices)
        except PredictionFormatError as error:
            part = error.message
        parts: list[Any] = [part]
        if trainer.world_size > 1 and dist.is_available() and dist.is_initialized():
            # Rows of every rank (or its refusal) to every rank: all stop on one refusal.
            parts = [None] * trainer.world_size
            dist.all_gather_object(parts, part)
        refusals = [part for part in parts if isinstance(part, str)]
        if refusals:
            raise PredictionFormatError(refusals[0])
        if trainer.is_global_zero:
            path = self._folder(trainer) / f"{self._name}.{self.format}"
            path.parent.mkdir(parents=True, exist_ok=True)
            write_table(parts, path)
            print(f"Predictions written to {path}")

    def _folder(self, trainer: L.Trainer) -> Path:
        return Path(self.output_dir or RunLayout(trainer.default_root_dir).predictions)


def _concat(outputs: list[Any]) -> Any:
    """Concatenate per-batch outputs of the same structure along the batch dimension."""
    first = outputs[0]
    if isinstance(first, torch.Tensor):
        return torch.cat([out.reshape(-1) if out.dim() == 0 else out for out in outputs])
    if isinstance(first, dict):
        return {key: _concat([out[key] for out in outputs]) for key in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_concat(list(parts)) for parts in zip(*outputs, strict=True))
    return outputs
