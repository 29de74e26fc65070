"""`loaders.LoaderOptions`: DataLoader settings resolved from the machine, bad values refused;
`loaders.as_stateful`: a plain DataLoader rebuilt as a StatefulDataLoader yields the same."""

import multiprocessing
import os
import sys

import pytest
import torch
from lightning.pytorch import Trainer
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.loader_rules import available_cpus
from copier_lightning_core.platform.loaders import (
    MAX_AUTO_WORKERS,
    LoaderOptions,
    as_stateful,
    rebuildable,
    resume_gaps,
)
from harness import FAST, FLAVOURS


@pytest.fixture
def cpus(monkeypatch):
    """Pretend this process may use `n` CPUs (its affinity), whatever the machine has."""

    def set_cpus(n: int) -> None:
        monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(n)), raising=False)

    return set_cpus


def test_auto_workers_follow_the_cpu_affinity_shared_among_local_processes(cpus):
    cpus(2)  # e.g. a SLURM job's 2 CPUs on a 64-core node
    assert LoaderOptions().kwargs()["num_workers"] == 1
    cpus(16)
    assert LoaderOptions().kwargs()["num_workers"] == MAX_AUTO_WORKERS
    four_processes = Trainer(accelerator="cpu", devices=4, strategy="ddp", logger=False)
    assert LoaderOptions().kwargs(four_processes)["num_workers"] == 16 // 4 - 1


def test_auto_means_no_workers_on_windows_unless_asked(cpus, monkeypatch):
    cpus(16)
    monkeypatch.setattr(sys, "platform", "win32")
    assert LoaderOptions().kwargs()["num_workers"] == 0
    assert LoaderOptions(num_workers=3).kwargs()["num_workers"] == 3


def test_workers_persist_and_prefetch_only_when_there_are_workers(cpus):
    cpus(8)
    kwargs = LoaderOptions(num_workers=2, prefetch_factor=4).kwargs()
    kwargs.pop("generator")
    assert kwargs == {
        "num_workers": 2,
        "pin_memory": False,  # no trainer and no CUDA here
        "persistent_workers": True,
        "prefetch_factor": 4,
    }
    assert LoaderOptions(num_workers=0).kwargs()["persistent_workers"] is False
    assert "prefetch_factor" not in LoaderOptions(num_workers=0).kwargs()


def test_each_loader_gets_its_own_generator_seeded_from_the_run_seed():
    torch.manual_seed(1234)  # what seed_everything does
    options = LoaderOptions(num_workers=0)
    first, second = options.kwargs()["generator"], options.kwargs()["generator"]
    assert first is not second and first.initial_seed() == second.initial_seed() == 1234
    state = torch.get_rng_state()
    loader = StatefulDataLoader(list(range(8)), shuffle=True, **options.kwargs())
    list(loader)
    assert torch.equal(torch.get_rng_state(), state)  # loading left the global RNG alone


def test_pin_memory_auto_is_off_without_cuda_and_explicit_values_win():
    cpu = Trainer(accelerator="cpu", devices=1, logger=False)
    assert LoaderOptions().kwargs(cpu)["pin_memory"] is False
    assert LoaderOptions(pin_memory=True).kwargs(cpu)["pin_memory"] is True


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"num_workers": -1}, "num_workers=-1 is not valid"),
        ({"num_workers": "many"}, "num_workers='many' is not valid"),
        ({"pin_memory": "yes"}, "pin_memory='yes' is not valid"),
        ({"prefetch_factor": 0, "num_workers": 2}, "prefetch_factor=0 is not valid"),
        ({"prefetch_factor": 2, "num_workers": 0}, "prefetch_factor=2 needs worker processes"),
    ],
)
def test_impossible_values_are_refused_with_the_fix(options, message):
    with pytest.raises(ValueError, match=message):
        LoaderOptions(**options)


def test_prefetch_without_workers_after_auto_is_refused(cpus, monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")  # auto resolves to 0 workers
    with pytest.raises(ValueError, match="num_workers resolved to 0"):
        LoaderOptions(prefetch_factor=2).kwargs()


def test_the_command_line_refuses_a_bad_value_before_any_work(tmp_path):
    args = [*FAST, f"--trainer.default_root_dir={tmp_path / 'run'}", *FLAVOURS["sequence"]]
    with pytest.raises(Refusal, match=r"in --data, num_workers=-1 is not valid"):
        ProjectCLI(args=["fit", *args, "--data.num_workers=-1"])
    assert not (tmp_path / "run").exists()  # nothing written


NUMBERS = TensorDataset(torch.arange(20.0))


def first_items(items: list) -> list:
    """A collate_fn of one's own: the items' first fields, as a list."""
    return [item[0] for item in items]


# How a DataLoader's batches are made -> its arguments (each call: a fresh generator).
ORDERS = {
    "shuffled": lambda: {
        "batch_size": 3,
        "shuffle": True,
        "generator": torch.Generator().manual_seed(1),
    },
    "batch_sampler-collate_fn": lambda: {
        "batch_sampler": [[4, 1], [0, 9, 7]],
        "collate_fn": first_items,
    },
    "random_sampler-with_replacement": lambda: {
        "batch_size": 2,
        "drop_last": True,
        "sampler": RandomSampler(
            NUMBERS, replacement=True, num_samples=7, generator=torch.Generator().manual_seed(2)
        ),
    },
    "sampler-unbatched": lambda: {"batch_size": None, "sampler": [5, 3, 1]},
}


@pytest.mark.parametrize("order", list(ORDERS))
def test_a_plain_dataloader_rebuilt_as_stateful_yields_the_same_batches(order):
    expected = list(DataLoader(NUMBERS, **ORDERS[order]()))
    rebuilt = as_stateful(DataLoader(NUMBERS, **ORDERS[order]()))
    assert isinstance(rebuilt, StatefulDataLoader)
    got = list(rebuilt)
    assert len(got) == len(expected)
    if order == "shuffled":  # one generator, drawn in another order (see as_stateful)
        got, expected = (
            [torch.cat([b for (b,) in batches]).sort().values] for batches in (got, expected)
        )
    for a, b in zip(got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_a_rebuilt_dataloader_keeps_its_workers_and_gets_a_generator_when_it_had_none():
    def start(worker_id: int) -> None:
        pass

    plain = DataLoader(
        NUMBERS,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        persistent_workers=True,
        prefetch_factor=3,
        worker_init_fn=start,
        timeout=5.0,
    )
    rebuilt = as_stateful(plain)
    kept = ("num_workers", "persistent_workers", "prefetch_factor", "worker_init_fn", "timeout")
    assert [getattr(rebuilt, key) for key in kept] == [getattr(plain, key) for key in kept]
    # Without one, each epoch's shuffle and worker seeds would come from torch's global RNG.
    assert plain.generator is None and isinstance(rebuilt.generator, torch.Generator)


def test_only_a_fit_rebuilds_plain_loaders_validate_keeps_them_and_says_nothing(tmp_path):
    """A resumed position is a fit's: `validate` gets the owner's loader as it was built."""
    args = [*FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={tmp_path / 'run'}"]
    fitted = ProjectCLI(args=["fit", *args, "--test_after_fit=false"])
    assert isinstance(fitted.trainer.train_dataloader, StatefulDataLoader)
    validated = ProjectCLI(args=["validate", *args, "--ckpt_path=last"])
    assert type(validated.trainer.val_dataloaders) is DataLoader  # one loader: not a list


class PairingLoader(DataLoader):
    """A subclass that only sets an argument, as torch_geometric's DataLoader sets the
    collate_fn that makes its graph batches."""

    def __init__(self, dataset, **kwargs) -> None:
        super().__init__(dataset, collate_fn=lambda items: torch.stack(items).view(-1, 2), **kwargs)


class CountingLoader(DataLoader):
    """A subclass that changes how it iterates: no rebuild can know what it does."""

    def __iter__(self):
        return iter(range(3))


def test_a_subclass_that_only_sets_arguments_is_rebuilt_one_that_iterates_otherwise_is_named():
    numbers = torch.arange(16.0)
    shuffled = PairingLoader(numbers, batch_size=4, shuffle=True)
    assert rebuildable(shuffled) and not rebuildable(CountingLoader(numbers))
    assert not rebuildable(StatefulDataLoader(numbers))
    rebuilt = as_stateful(shuffled)
    batches = list(rebuilt)
    assert [tuple(batch.shape) for batch in batches] == [(2, 2)] * 4  # its collate_fn, kept
    assert sorted(torch.cat([b.flatten() for b in batches]).tolist()) == numbers.tolist()
    (gap,) = resume_gaps(CountingLoader(numbers))
    assert f"{__name__}.CountingLoader" in gap and "changes how it iterates" in gap


def test_after_a_loader_refused_in_its_method_a_fit_still_ends_its_loader_workers(tmp_path):
    """Lightning patches every DataLoader class while it calls a loader method and puts them
    back only when the method returns (private_apis.end_loader_recording). Left patched by a
    refusal, every later loader of the process keeps its iterators, and their worker
    processes outlive the fit that started them until a garbage collection, which then
    waits up to 5 s on each."""
    refused = [
        "fit",
        *FAST,
        *FLAVOURS["tabular"],
        "--data=faulty_data.PlainLoadersData",
        f"--data.loader_processes={available_cpus() + 1}",
        f"--trainer.default_root_dir={tmp_path / 'refused'}",
    ]
    with pytest.raises(Refusal, match="more DataLoader worker processes than"):
        ProjectCLI(args=refused)
    before = set(multiprocessing.active_children())
    ProjectCLI(
        args=[
            "fit",
            *FAST,
            *FLAVOURS["sequence"],
            "--data.num_workers=2",  # persistent: they live as long as the loader's iterator
            "--test_after_fit=false",
            f"--trainer.default_root_dir={tmp_path / 'fit'}",
        ]
    )
    assert set(multiprocessing.active_children()) - before == set()
