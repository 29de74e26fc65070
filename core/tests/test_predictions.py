"""PredictionWriter's tables: one row per input with its index and id, in CSV and Parquet,
never over an earlier file, refused with one paragraph when the output is not a table,
and one file in dataset order from two processes."""

import csv
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from copier_lightning_core.callbacks import predictions
from copier_lightning_core.callbacks.prediction_table import (
    PredictionFormatError,
    table_of,
)

SAMPLES, FEATURES, CLASSES = 10, 4, 3
TESTS = Path(__file__).resolve().parent


class IdFeatures(Dataset):
    """Random features, each sample with a string id."""

    def __init__(self, num_samples: int = SAMPLES) -> None:
        self.features = torch.randn(
            num_samples, FEATURES, generator=torch.Generator().manual_seed(0)
        )

    def __len__(self) -> int:
        return len(self.features)

    def __getitem__(self, index: int) -> dict:
        return {"id": f"sample-{index:03d}", "x": self.features[index]}


class Regressor(L.LightningModule):
    """One value per sample, with the ids the batch carries."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, 1)

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        return {"value": self.net(batch["x"]).squeeze(-1), "id": batch["id"]}


class Classifier(Regressor):
    """The example classifier's output: a label and a probability per class."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(FEATURES, CLASSES)

    def predict_step(self, batch: dict, batch_idx: int) -> dict:
        probabilities = self.net(batch["x"]).softmax(dim=-1)
        return {"label": probabilities.argmax(dim=-1), "probabilities": probabilities}


class Images(Regressor):
    """A (3, 2, 2) output per sample: not a table."""

    def predict_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return batch["x"].reshape(-1, 1, 2, 2).expand(-1, 3, 2, 2)


def predict(module: L.LightningModule, folder: Path, file_format: str) -> None:
    writer = predictions.PredictionWriter(output_dir=str(folder), format=file_format)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        callbacks=[writer],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=folder.parent,
    )
    trainer.predict(module, DataLoader(IdFeatures(), batch_size=4), return_predictions=False)


def read(path: Path) -> dict[str, list]:
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pydict()
    with path.open(newline="") as file:
        rows = list(csv.DictReader(file))
    return {name: [row[name] for row in rows] for name in rows[0]}


FORMATS = [
    "csv",
    pytest.param(
        "parquet",
        marks=pytest.mark.skipif(
            __import__("importlib").util.find_spec("pyarrow") is None,
            reason="pyarrow is not installed (the parquet extra)",
        ),
    ),
]


@pytest.mark.parametrize("file_format", FORMATS)
def test_a_regression_writes_one_row_per_input_with_its_index_and_id(tmp_path, file_format):
    torch.manual_seed(0)
    module = Regressor()
    folder = tmp_path / "predictions"
    predict(module, folder, file_format)
    predict(module, folder, file_format)
    names = sorted(path.name for path in folder.iterdir())
    assert names == [f"predictions-1.{file_format}", f"predictions.{file_format}"]
    table = read(folder / f"predictions.{file_format}")
    assert list(table) == ["index", "id", "value"]
    assert [int(i) for i in table["index"]] == list(range(SAMPLES))
    assert table["id"] == [f"sample-{i:03d}" for i in range(SAMPLES)]
    with torch.no_grad():
        expected = module.net(IdFeatures().features).squeeze(-1)
    values = torch.tensor([float(value) for value in table["value"]])
    torch.testing.assert_close(values, expected)
    assert read(folder / f"predictions-1.{file_format}") == table


@pytest.mark.parametrize("file_format", FORMATS)
def test_class_probabilities_become_one_column_per_class(tmp_path, file_format):
    predict(Classifier(), tmp_path / "predictions", file_format)
    table = read(tmp_path / "predictions" / f"predictions.{file_format}")
    probabilities = [f"probabilities_{k}" for k in range(CLASSES)]
    assert list(table) == ["index", "label", *probabilities]
    rows = torch.tensor(
        [[float(table[name][row]) for name in probabilities] for row in range(SAMPLES)]
    )
    torch.testing.assert_close(rows.sum(dim=1), torch.ones(SAMPLES))
    assert [int(label) for label in table["label"]] == rows.argmax(dim=1).tolist()


def test_an_output_that_is_not_a_table_is_refused_before_anything_is_written(tmp_path):
    folder = tmp_path / "predictions"
    with pytest.raises(PredictionFormatError) as error:
        predict(Images(), folder, "csv")
    message = str(error.value)
    assert "(4, 3, 2, 2)" in message and "format: pt" in message and "\n" not in message
    assert not folder.exists() or not any(folder.iterdir())


def test_parquet_without_pyarrow_names_the_install_command_before_predicting(tmp_path, monkeypatch):
    monkeypatch.setattr(predictions, "find_spec", lambda name: None)
    with pytest.raises(PredictionFormatError, match=r'pip install -e "\.\[parquet\]"'):
        predict(Regressor(), tmp_path / "predictions", "parquet")
    assert not (tmp_path / "predictions").exists()


def test_several_dataloaders_share_one_table_with_a_dataloader_column():
    first = [{"y": torch.tensor([1.0, 2.0])}, {"y": torch.tensor([3.0])}]
    second = [{"y": torch.tensor([4.0])}]
    table = table_of([first, second], [[[0, 1], [2]], [[0]]])
    assert table == {"index": [0, 1, 2, 0], "dataloader": [0, 0, 0, 1], "y": [1.0, 2.0, 3.0, 4.0]}
    with pytest.raises(PredictionFormatError, match=r"batch 0 of dataloader 1 has the columns"):
        table_of([first, [{"z": torch.tensor([4.0])}]], [[[0, 1], [2]], [[0]]])
    with pytest.raises(PredictionFormatError, match=r"differ in length in batch 0"):
        table_of([[{"y": torch.zeros(2), "id": ["a"]}]], [[[0, 1]]])


@pytest.mark.slow
def test_two_processes_write_one_table_in_dataset_order(tmp_path):
    script = tmp_path / "predict_ddp.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import lightning as L
            import torch.distributed as dist
            from torch.utils.data import DataLoader
            from copier_lightning_core.callbacks.predictions import PredictionWriter
            from test_predictions import IdFeatures, Regressor

            if __name__ == "__main__":
                trainer = L.Trainer(
                    accelerator="cpu", devices=2, strategy="ddp", logger=False,
                    callbacks=[PredictionWriter(output_dir={str(tmp_path / "out")!r}, format="csv")],
                    enable_progress_bar=False, enable_model_summary=False,
                    default_root_dir={str(tmp_path)!r},
                )
                loader = DataLoader(IdFeatures(11), batch_size=2)
                trainer.predict(Regressor(), loader, return_predictions=False)
                # Lightning leaves the gloo group open; a process exiting with it can abort
                # ("terminate called without an active exception", once in a loaded suite
                # run). The library's commands close it so; a script of one's own does too.
                dist.barrier()
                dist.destroy_process_group()
            """
        )
    )
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert [path.name for path in (tmp_path / "out").iterdir()] == ["predictions.csv"]
    table = read(tmp_path / "out" / "predictions.csv")
    assert [int(i) for i in table["index"]] == list(range(11))
    assert table["id"] == [f"sample-{i:03d}" for i in range(11)]
