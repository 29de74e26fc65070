"""Predictions as a table, one row per input: the columns, and the CSV / Parquet file.

Written by hand because the project depends on no dataframe library: a column is a plain
list, and pyarrow (Parquet) is imported only when asked for.
"""

import csv
from pathlib import Path
from typing import Any, NoReturn

import torch

from ..platform.refusal import Refusal

SCALARS = (str, int, float, bool)


class PredictionFormatError(Refusal):
    """Predictions that cannot be written in the chosen format: one paragraph, exit status 1."""


def table_of(outputs: list[list[Any]], indices: list[list[Any]]) -> dict[str, list[Any]]:
    """The columns of every dataloader's batch outputs (`outputs[loader][batch]`).

    `indices[loader][batch]` are the dataset indices of the batch's samples (empty when
    the loader has none, as an IterableDataset): they become the `index` column.
    """
    table: dict[str, list[Any]] = {}
    for loader, (batches, batch_indices) in enumerate(zip(outputs, indices, strict=True)):
        for number, output in enumerate(batches):
            columns = _columns(output)
            rows = len(next(iter(columns.values())))
            where = f"batch {number}" + (f" of dataloader {loader}" if len(outputs) > 1 else "")
            if any(len(values) != rows for values in columns.values()):
                lengths = {name: len(values) for name, values in columns.items()}
                _refuse(f"its values differ in length in {where} ({lengths})")
            ids = list(batch_indices[number]) if number < len(batch_indices) else []
            front = {"index": ids} if len(ids) == rows else {}
            if len(outputs) > 1:
                front["dataloader"] = [loader] * rows
            columns = {**front, **columns}
            if table and list(columns) != list(table):
                _refuse(f"{where} has the columns {list(columns)}, earlier ones {list(table)}")
            for name, values in columns.items():
                table.setdefault(name, []).extend(values)
    if not table:
        _refuse("predict_step returned nothing (no batch was predicted)")
    return table


def write_table(parts: list[dict[str, list[Any]]], path: Path) -> None:
    """Write the tables of every process as one, rows in dataset order when indexed."""
    table = {name: [value for part in parts for value in part[name]] for name in parts[0]}
    if "index" in table:
        keys = list(
            zip(table.get("dataloader", [0] * len(table["index"])), table["index"], strict=True)
        )
        order = sorted(range(len(keys)), key=keys.__getitem__)
        table = {name: [values[row] for row in order] for name, values in table.items()}
    if path.suffix == ".parquet":
        import pyarrow as pa  # optional: the `parquet` extra; checked before predicting
        import pyarrow.parquet as pq

        with path.open("xb") as file:  # "x": never over an existing file
            pq.write_table(pa.table(table), file)
        return
    with path.open("x", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(table)
        writer.writerows(zip(*table.values(), strict=True))


def _columns(output: Any) -> dict[str, list[Any]]:
    """One batch's output as named columns of plain values, one per sample."""
    if isinstance(output, torch.Tensor):
        return _tensor_columns("prediction", output)
    if not isinstance(output, dict) or not output:
        _refuse(f"predict_step returned a {type(output).__name__}")
    columns: dict[str, list[Any]] = {}
    for key in sorted(output, key=lambda name: name != "id"):  # `id` first
        value = output[key]
        if isinstance(value, torch.Tensor):
            columns.update(_tensor_columns(str(key), value))
        elif isinstance(value, (list, tuple)) and all(isinstance(v, SCALARS) for v in value):
            columns[str(key)] = list(value)
        else:
            _refuse(f"its key {key!r} holds a {type(value).__name__}")
    return columns


def _tensor_columns(name: str, values: torch.Tensor) -> dict[str, list[Any]]:
    """`(N,)` -> the column `name`; `(N, K)` -> the columns `name_0` ... `name_{K-1}`."""
    if values.dim() == 1:
        return {name: values.tolist()}
    if values.dim() == 2:
        return {f"{name}_{k}": column.tolist() for k, column in enumerate(values.T)}
    _refuse(f"{name!r} has the shape {tuple(values.shape)} per batch")


def _refuse(reason: str) -> NoReturn:
    raise PredictionFormatError(
        f"PredictionWriter cannot write these predictions as a table: {reason}. A table "
        "needs one row per input: predict_step must return a tensor of shape (N,) or "
        "(N, K), or a dict of them (lists of N ids or strings too), with N the batch size. "
        "Return such a dict from predict_step, or keep `format: pt` for the PredictionWriter "
        "in configs/default.yaml, which saves any tensors. Nothing was written."
    )
