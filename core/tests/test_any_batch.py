"""Batches that are not tensors, tuples or dicts: every default callback and tool runs on
them (toy.ToyGraphBatch, graphs batched as torch_geometric batches them)."""

import csv
import dataclasses
import logging

import onnxruntime
import pytest
import torch
from lightning import LightningModule, Trainer
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader

from copier_lightning_core.callbacks.batches import (
    default_count,
    named_tensors,
    sample_counter,
)
from copier_lightning_core.callbacks.health import FirstBatchCheck
from copier_lightning_core.callbacks.health.errors import HealthCheckFailed
from copier_lightning_core.callbacks.throughput import TrainingThroughput
from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.tools.export import (
    Parity,
    parity,
    report,
    sample_inputs,
)
from harness import FAST
from toy import ToyGraphData, ToyGraphRegressor, collate_graphs, ring_graphs

GRAPH = [
    "--model=toy.ToyGraphRegressor",
    "--model.num_features=4",
    "--model.hidden=16",
    "--model.lr=0.01",
    "--data=toy.ToyGraphData",
    "--data.num_features=4",
    "--data.train_size=96",  # 12 steps of 8 graphs
    "--data.val_size=16",
    "--data.batch_size=8",
    "--data.num_workers=0",
    "--checkpoint.monitor=val/loss",
    "--checkpoint.mode=min",
]
TRUST = ["--trust=toy.ToyGraphRegressor", "--trust=toy.ToyGraphData"]  # toy.py is no package


@pytest.fixture(scope="module")
def graph_run(tmp_path_factory):
    """One default fit (every default callback) of the graph toy, logging every 2 steps."""
    root = tmp_path_factory.mktemp("graph") / "run"
    args = [*FAST, f"--trainer.default_root_dir={root}", *GRAPH]
    csv_only = "--trainer.logger=copier_lightning_core.run.loggers.CSVLogger"
    extra = [csv_only, "--trainer.log_every_n_steps=2", "--test_after_fit=false"]  # any answers
    cli = ProjectCLI(args=["fit", *args, *extra])
    return root, args, cli


def test_a_default_fit_on_batch_objects_counts_their_graphs_and_logs_samples_per_sec(graph_run):
    root, args, cli = graph_run
    (meter,) = [c for c in cli.trainer.callbacks if isinstance(c, TrainingThroughput)]
    assert meter._samples == 96  # graphs (num_graphs), not nodes, nor 0
    (path,) = root.rglob("metrics.csv")
    with open(path, newline="") as handle:
        rates = [
            float(r["train/samples_per_sec"])
            for r in csv.DictReader(handle)
            if r.get("train/samples_per_sec")
        ]
    assert len(rates) >= 5 and all(rate > 0 for rate in rates)
    # predict writes what predict_step returns for such batches too
    ProjectCLI(args=["predict", *args, f"--ckpt_path={root / 'checkpoints' / 'last.ckpt'}"])
    (written,) = (root / "predictions").glob("predictions*.pt")
    assert torch.load(written, weights_only=True).dim() == 1  # one value per node


class Words(LightningModule):
    """Batches of strings (default_collate's lists): nothing in them to count."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.zeros(1))

    def training_step(self, batch: list[str], batch_idx: int) -> torch.Tensor:
        return (self.w - len(batch)).pow(2).sum()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def test_uncountable_batches_log_batches_per_sec_and_say_so_once(tmp_path, caplog):
    trainer = Trainer(
        max_steps=8,
        log_every_n_steps=2,
        logger=CSVLogger(tmp_path),
        callbacks=[TrainingThroughput()],
        accelerator="cpu",
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    with caplog.at_level(logging.INFO):
        trainer.fit(Words(), DataLoader(["to", "be", "or", "not"] * 4, batch_size=2))
    assert caplog.text.count("cannot count the samples in a batch of type list") == 1
    (path,) = tmp_path.rglob("metrics.csv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert any(row.get("train/batches_per_sec") for row in rows)
    assert "train/samples_per_sec" not in rows[0]


def test_samples_are_counted_by_a_hook_of_the_module_or_the_data_else_by_the_batch():
    batch = collate_graphs(ring_graphs(3, 4, seed=0))
    assert default_count(batch) == 3 and len(batch.x) > 3  # num_graphs, not the nodes

    class Counted(ToyGraphRegressor):
        def count_samples(self, batch) -> int:
            return len(batch.x)

    assert sample_counter(Counted(), ToyGraphData())(batch) == len(batch.x)
    data = ToyGraphData()
    data.count_samples = lambda batch: 7
    assert sample_counter(ToyGraphRegressor(), data)(batch) == 7

    @dataclasses.dataclass
    class Pair:
        names: list
        images: torch.Tensor

    class Stored:  # torch_geometric's Data keeps its tensors behind to_dict()
        def to_dict(self):
            return {"pos": torch.zeros(5, 3)}

    assert default_count(Pair(["a"], torch.zeros(6, 2))) == 6
    assert default_count((Stored(), torch.zeros(2))) == 5
    assert [name for name, _ in named_tensors([Stored()])] == ["batch[0].pos"]
    assert default_count(["no", "tensors"]) == 0


def test_the_first_batch_check_finds_and_checks_the_tensors_of_a_batch_object(caplog):
    batch = collate_graphs(ring_graphs(2, 4, seed=0))
    with caplog.at_level(logging.INFO):
        FirstBatchCheck().on_train_batch_start(Trainer(logger=False), ToyGraphRegressor(), batch, 0)
    nodes, edges = len(batch.x), batch.edge_index.shape[1]
    assert (
        f"batch.x torch.float32 ({nodes}, 4), batch.edge_index torch.int64 (2, {edges})"
        in caplog.text
    )
    assert "no tensors" not in caplog.text

    class Labelled(ToyGraphRegressor):
        num_classes = 3

    batch.y = torch.arange(nodes)  # integer labels past num_classes, found as `batch.y`
    with pytest.raises(HealthCheckFailed, match=rf"labels range over \[0, {nodes - 1}\]"):
        FirstBatchCheck().on_train_batch_start(Trainer(logger=False), Labelled(), batch, 0)


def test_tune_measures_graph_batches_in_samples_per_second(tmp_path, capsys):
    output = tmp_path / "tuned.yaml"
    options = ["--min-batch-size=4", "--max-trials=1", "--workers=", "--steps=2", "--lr-steps=0"]
    args = [*FAST, f"--trainer.default_root_dir={tmp_path / 'run'}", *GRAPH]
    assert main(["tune", *options, f"--output={output}", *args]) == 0
    text = " ".join(output.read_text().replace("#", " ").split())
    assert "batch_size 4: 100% of the best throughput measured" in text
    rate = float(text.split("samples/s by size: 4: ")[1].split()[0])
    assert rate > 0


@pytest.mark.parametrize("declared", [True, False])
def test_export_keeps_each_inputs_shape_and_writes_both_files(
    declared, graph_run, tmp_path, capsys, monkeypatch
):
    """x (8, 4), edge_index (2, 16), batch (8,): no shared batch dimension to double."""
    root, _, _ = graph_run
    checkpoint = root / "checkpoints" / "last.ckpt"
    if not declared:
        monkeypatch.setattr(ToyGraphRegressor, "export_dynamic_dims", None)
    assert main(["export", str(checkpoint), "--output", str(tmp_path), *TRUST]) == 0
    out = capsys.readouterr().out
    assert out.count("max abs diff vs eager") == 2 and "OVER" not in out
    assert "no batch dimension" in out  # edge_index (2, E) was not doubled to (4, E)
    assert (tmp_path / "last.safetensors").stat().st_size > 0
    session = onnxruntime.InferenceSession(str(tmp_path / "last.onnx"))
    shapes = {i.name: i.shape for i in session.get_inputs()}
    if not declared:  # the sample's shapes, as they are
        assert shapes == {"x": [8, 4], "edge_index": [2, 16], "batch": [8]}
        return
    assert shapes == {"x": ["nodes", 4], "edge_index": [2, "edges"], "batch": ["nodes"]}
    # the declared dimensions are dynamic: other graphs than the sample's run the same
    model = ToyGraphRegressor.load_from_checkpoint(checkpoint).eval()
    other = collate_graphs(ring_graphs(5, 4, seed=9))
    feeds = {"x": other.x, "edge_index": other.edge_index, "batch": other.batch}
    (onnx,) = session.run(None, {name: t.numpy() for name, t in feeds.items()})
    torch.testing.assert_close(torch.from_numpy(onnx), model(**feeds).detach())


def test_onnx_that_cannot_be_made_leaves_the_weights_and_one_paragraph(
    graph_run, tmp_path, capsys, monkeypatch
):
    root, _, _ = graph_run
    checkpoint = str(root / "checkpoints" / "last.ckpt")

    def refuse(*args, **kwargs):
        raise RuntimeError("Could not guard on data-dependent expression u0 > 1\nmore lines")

    monkeypatch.setattr(torch.onnx, "export", refuse)
    assert main(["export", checkpoint, "--output", str(tmp_path), *TRUST]) == 1
    captured = capsys.readouterr()
    assert "last.safetensors  max abs diff vs eager 0  ok" in captured.out
    (paragraph,) = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert "ONNX: last.onnx was not made: RuntimeError: Could not guard" in paragraph
    assert "more lines" not in captured.err and "--no-onnx" in paragraph
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.safetensors"]
    assert main(["export", checkpoint, "--output", str(tmp_path), "--no-onnx", *TRUST]) == 0


def test_parity_allows_more_for_larger_outputs_and_a_constant_input_gets_a_hint(tmp_path):
    large = torch.full((4, 3), 1000.0)
    assert parity([large + 0.01], [large], atol=1e-4, rtol=1e-4).ok  # 1e-5 of the outputs
    assert not parity([large + 1.0], [large], atol=1e-4, rtol=1e-4).ok
    # The difference printed is the outputs' own, even where it is well inside the bound.
    found = parity([large + 0.01, large], [large, large], atol=1e-4, rtol=1e-4)
    assert found.diff == pytest.approx(0.01, rel=1e-3) and found.ok
    model = ToyGraphRegressor()
    model.example_input_array = {**model.example_input_array, "x": torch.zeros(8, 4)}
    lines = report({tmp_path / "m.onnx": Parity(4.8e-4, 1e-4)}, sample_inputs(model, None), 1e-4)
    assert "OVER tolerance" in lines[0]
    assert "the sample input is constant in x (every value 0)" in lines[1]
    assert "torch.randn" in lines[1]
    random = sample_inputs(ToyGraphRegressor(), None)
    assert len(report({tmp_path / "m.onnx": Parity(0.0, 1e-4)}, random, 1e-4)) == 1
