"""Throughput and MFU: logged by default at the loggers' cadence, for any batch shape."""

import csv

import pytest
import torch

from copier_lightning_core.callbacks.throughput import (
    batch_size,
    compute_dtype,
    flops_per_sample,
)
from harness import Run
from toy import ToyRegressor, ToySequenceClassifier


def test_throughput_columns_appear_in_the_csv_metrics(run: Run):
    run.cli("fit", "--trainer.log_every_n_steps=2", "--test_after_fit=false")
    (path,) = run.root.rglob("metrics.csv")
    with open(path, newline="") as handle:
        rows = list(csv.DictReader(handle))
    rates = [float(row["train/samples_per_sec"]) for row in rows if row["train/samples_per_sec"]]
    assert rates and all(rate > 0 for rate in rates)
    assert any(row["train/batches_per_sec"] for row in rows)
    # No MFU on CPU (its peak FLOP/s is unknown); the sequence toy still reports FLOP/s.
    assert "train/device/mfu" not in rows[0]
    assert ("train/flops_per_sec" in rows[0]) == (run.flavour == "sequence")


@pytest.mark.parametrize(
    ("batch", "size"),
    [
        (torch.zeros(5, 3), 5),
        ((torch.zeros(4, 2), torch.zeros(4)), 4),
        ([{"meta": "x", "tokens": torch.zeros(3, 7)}], 3),
        ({"ids": [1, 2], "mask": torch.zeros(6, 2)}, 6),
        ({"nothing": "here"}, 0),
    ],
)
def test_the_batch_size_is_the_first_dimension_of_the_first_tensor(batch, size):
    assert batch_size(batch) == size


def test_flops_are_measured_once_from_the_example_input_without_touching_the_module():
    module = ToySequenceClassifier()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    # embedding lookups count no FLOPs: the head's matmul, 2*16*3 per sample, times 3
    assert flops_per_sample(module) == 3 * 2 * 16 * 3
    assert module.training and all(p.grad is None for p in module.parameters())
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
    assert flops_per_sample(ToyRegressor()) is None  # no example_input_array


def test_the_compute_dtype_follows_the_precision_setting():
    assert compute_dtype("bf16-mixed") is torch.bfloat16
    assert compute_dtype("16-mixed") is torch.float16
    assert compute_dtype("32-true") is torch.float32
