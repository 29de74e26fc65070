"""Pins what the library needs of each private torch or Lightning API
(platform/private_apis.py).

A torch upgrade that renames or changes one of them fails here, by its name, instead of
making TorchCompile wrongly report "compiled nothing" or miss a compilation error.
`backend="eager"` traces with dynamo without generating kernels: cheap and enough.
"""

import csv
import inspect
from argparse import Namespace

import lightning as L
import pytest
import torch
import yaml
from lightning.fabric.utilities.data import _replace_dunder_methods
from lightning.pytorch import loggers
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from torch import nn
from torch.utils.data import BatchSampler, DataLoader
from torchdata.stateful_dataloader import StatefulDataLoader

from copier_lightning_core import logs_this_step
from copier_lightning_core.platform.private_apis import (
    DynamoError,
    command_config_dump,
    compiled_graph_count,
    copy_each,
    ddp_wrapper_kwargs,
    dump_cuda_allocations,
    dynamo_supports_this_python,
    end_loader_recording,
    flat_hyperparameters,
    graph_breaks,
    has_compiled_code,
    kept_experiment,
    known_compile_modes,
    loggers_write_after_this_batch,
    nested_schedulers,
    record_cuda_allocations,
    restart_train_iterator,
    skips_on_found_inf,
    stop_recording_cuda_allocations,
    subcommand_parser,
)
from copier_lightning_core.run.lightning_cli import ProjectCLI
from copier_lightning_core.run.loggers import ContinuingWriter, CSVLogger
from harness import FAST, FLAVOURS
from toy import ToyRegressor


def test_compiled_graph_count_grows_when_dynamo_compiles_a_graph():
    def double(x):
        return x * 2

    before = compiled_graph_count()
    torch.compile(double, backend="eager")(torch.ones(3))
    assert compiled_graph_count() > before


def test_graph_breaks_counts_each_break_dynamo_meets_by_its_reason():
    def broken(x):
        x = x * 2
        torch._dynamo.graph_break()
        return x + 1

    before = graph_breaks()
    torch.compile(broken, backend="eager")(torch.ones(3))
    found = graph_breaks() - before
    assert sum(found.values()) == 1 and "graph_break()" in next(iter(found))


def test_has_compiled_code_sees_dynamos_cache_of_a_function():
    def triple(x):
        return x * 3

    assert not has_compiled_code(triple.__code__)
    torch.compile(triple, backend="eager")(torch.ones(3))
    assert has_compiled_code(triple.__code__)


def test_dynamo_error_is_what_a_fullgraph_graph_break_raises():
    def data_dependent(x):
        return x + 1 if x.sum() > 0 else x - 1  # a branch on a value: a graph break

    with pytest.raises(DynamoError):
        torch.compile(data_dependent, backend="eager", fullgraph=True)(torch.ones(3))
    assert not issubclass(DynamoError, (ValueError, TypeError))  # not the model's own errors


def test_nested_schedulers_are_the_children_of_sequential_and_chained_schedulers():
    optimizer = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    warmup = torch.optim.lr_scheduler.LinearLR(optimizer, start_factor=0.5, total_iters=2)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=4)
    sequential = torch.optim.lr_scheduler.SequentialLR(optimizer, [warmup, cosine], [2])
    assert nested_schedulers(sequential) == [warmup, cosine]
    assert nested_schedulers(torch.optim.lr_scheduler.ChainedScheduler([warmup])) == [warmup]
    assert nested_schedulers(warmup) == []


def test_copy_each_copies_every_source_into_its_target_in_place():
    targets = [torch.zeros(2, 3), torch.zeros(()), torch.zeros(4)]
    views = [t.view(-1) for t in targets]  # what the non-finite guard writes through
    copy_each(views, list(torch.arange(11.0).split([6, 1, 4])))
    assert torch.equal(targets[0], torch.arange(6.0).view(2, 3))
    assert targets[1].item() == 6.0
    assert torch.equal(targets[2], torch.arange(7.0, 11.0))


def test_flat_hyperparameters_are_the_names_lightnings_loggers_send():
    params = {"lr": 0.1, "provenance": {"seed": 1, "versions": {"torch": "2.0"}}}
    flat = {"lr": 0.1, "provenance/seed": 1, "provenance/versions/torch": "2.0"}
    assert flat_hyperparameters(params) == flat
    assert flat_hyperparameters(Namespace(**params)) == flat


def test_a_fused_optimizer_skips_its_update_on_a_found_inf_flag_and_says_so():
    weight = nn.Parameter(torch.ones(3))
    fused = torch.optim.Adam([weight], lr=0.1, fused=True)
    assert skips_on_found_inf(fused)
    assert not skips_on_found_inf(torch.optim.Adam([weight], lr=0.1))
    weight.grad = torch.ones(3)
    fused.found_inf = torch.ones(())  # as the non-finite guard hands it the flag
    fused.step()
    del fused.found_inf
    assert torch.equal(weight.detach(), torch.ones(3))
    fused.step()
    assert not torch.equal(weight.detach(), torch.ones(3))  # the same step, flag down


def test_lightnings_csv_writer_calls_the_check_that_continuing_writer_overrides(tmp_path):
    (tmp_path / "metrics.csv").write_text("step,loss\n0,1.0\n")
    calls = []

    class Spy(ExperimentWriter):
        def _check_log_dir_exists(self) -> None:
            calls.append(self.log_dir)

    Spy(log_dir=str(tmp_path))
    assert calls == [str(tmp_path)]


class _Parsed(Exception):
    """Stops a CLI once LightningCLI has applied the checkpoint's hyperparameters."""


def test_lightning_cli_reads_ckpt_path_where_project_cli_overrides_it_with_the_same_result(
    tmp_path,
):
    """ProjectCLI replaces LightningCLI._parse_ckpt_path (lightning_cli.py), which reads the
    whole file: Lightning still calls it after parsing, and its own reading of the file
    gives the config that the override gives from the run plan's checkpoint."""
    path = tmp_path / "regressor.ckpt"
    hyper_parameters = {"_class_path": "toy.ToyRegressor", "num_features": 8, "hidden": 32}
    state = {"state_dict": ToyRegressor(hidden=32).state_dict()}
    torch.save({**state, "hyper_parameters": hyper_parameters}, path)
    configs = {}

    class BothReads(ProjectCLI):
        def _parse_ckpt_path(self) -> None:
            parsed = self.config.clone()
            LightningCLI._parse_ckpt_path(self)
            configs["lightning"], self.config = self.config, parsed
            super()._parse_ckpt_path()
            configs["project"] = self.config
            raise _Parsed

    root = f"--trainer.default_root_dir={tmp_path}"
    with pytest.raises(_Parsed):
        BothReads(args=["validate", *FAST, *FLAVOURS["tabular"], root, f"--ckpt_path={path}"])
    assert configs["project"] == configs["lightning"]
    assert configs["project"].validate.model.init_args.hidden == 32  # the checkpoint's, not 16


def test_command_config_dump_is_the_commands_resolved_config_as_the_parser_dumps_it(tmp_path):
    """LightningCLI keeps the dump it made to build the model (`config_dump`): the command's
    section of the whole config, linked values included, as `--config` takes it back."""
    dumps = {}

    class Dumped(ProjectCLI):
        def before_fit(self) -> None:
            own = self.parser.dump(self.config, skip_none=False, skip_link_targets=False)
            dumps["parser"] = yaml.safe_load(own)["fit"]
            dumps["kept"] = command_config_dump(self)
            raise _Parsed

    root = f"--trainer.default_root_dir={tmp_path}"
    with pytest.raises(_Parsed):
        Dumped(args=["fit", *FAST, *FLAVOURS["sequence"], root])
    assert dumps["kept"] == dumps["parser"]
    assert dumps["kept"]["model"]["init_args"]["num_classes"] == 3  # linked from data


def test_subcommand_parser_is_the_parser_lightning_gives_its_save_config_callback(tmp_path):
    """ProjectCLI tells that parser the command's section was validated (parser_once.py)."""
    seen = {}

    class Seen(ProjectCLI):
        def before_fit(self) -> None:
            (saver,) = [cb for cb in self.trainer.callbacks if isinstance(cb, SaveConfigCallback)]
            seen["saver"], seen["ours"] = saver.parser, subcommand_parser(self, "fit")
            raise _Parsed

    root = f"--trainer.default_root_dir={tmp_path}"
    with pytest.raises(_Parsed):
        Seen(args=["fit", *FAST, *FLAVOURS["tabular"], root])
    assert seen["saver"] is seen["ours"]


def test_continuing_writer_appends_to_the_metrics_it_finds(tmp_path):
    (tmp_path / "metrics.csv").write_text("loss,step\n1.0,0\n")  # sorted, as Lightning writes
    writer = ContinuingWriter(log_dir=str(tmp_path))
    writer.log_metrics({"loss": 0.5}, step=1)
    writer.save()
    with open(tmp_path / "metrics.csv", newline="") as file:
        rows = list(csv.DictReader(file))
    assert [(row["step"], float(row["loss"])) for row in rows] == [("0", 1.0), ("1", 0.5)]


def test_lightnings_csv_logger_keeps_its_writer_where_kept_experiment_sets_ours(tmp_path):
    """Lightning's CSVLogger makes its writer once and keeps it in `_experiment`; the
    project's CSVLogger sets its ContinuingWriter there, and Lightning's methods use it."""
    lightning_logger = loggers.CSVLogger(tmp_path / "lightning")
    writer = lightning_logger.experiment
    assert type(writer) is ExperimentWriter and vars(lightning_logger)["_experiment"] is writer
    assert kept_experiment(lightning_logger, ExperimentWriter, list) is writer  # kept, not made

    version = tmp_path / "ours" / "csv" / "version_0"
    version.mkdir(parents=True)
    (version / "metrics.csv").write_text("loss,step\n1.0,0\n")  # a run being resumed
    ours = CSVLogger(save_dir=str(tmp_path / "ours"), version=0)
    ours.log_metrics({"loss": 0.5}, step=1)  # Lightning's method, through `experiment`
    ours.save()
    assert isinstance(vars(ours)["_experiment"], ContinuingWriter)
    with open(version / "metrics.csv", newline="") as file:
        assert [row["step"] for row in csv.DictReader(file)] == ["0", "1"]


class RecordingLogger(Logger):
    """Keeps the (step, value) pairs Lightning writes for the key `value`."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[int, float]] = []

    @property
    def name(self) -> str:
        return "recording"

    @property
    def version(self) -> int:
        return 0

    def log_hyperparams(self, params, *args, **kwargs) -> None:
        pass

    def log_metrics(self, metrics: dict[str, float], step: int) -> None:
        if "value" in metrics:
            self.rows.append((step, metrics["value"]))


class LogsBatchNumbers(L.LightningModule):
    """Logs each batch's running number: every step, or only when `logs_this_step` says."""

    def __init__(self, every_step: bool) -> None:
        super().__init__()
        self.layer = nn.Linear(2, 1)
        self.every_step = every_step
        self.answers: list[tuple[bool, bool]] = []  # (logs_this_step, the private rule)

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        self.answers.append(
            (logs_this_step(self.trainer), loggers_write_after_this_batch(self.trainer))
        )
        if self.every_step or logs_this_step(self.trainer):
            self.log("value", float(self.current_epoch * 100 + batch_idx))
        return self.layer(batch).sum()

    def train_dataloader(self) -> torch.utils.data.DataLoader:
        return torch.utils.data.DataLoader(torch.randn(40, 2), batch_size=2)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


def written_rows(tmp_path, every_step: bool, **trainer_args) -> tuple[list, LogsBatchNumbers]:
    module, logger = LogsBatchNumbers(every_step), RecordingLogger()
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=2, log_every_n_steps=3, logger=logger,
        default_root_dir=tmp_path, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, **trainer_args,
    )  # fmt: skip
    trainer.fit(module)
    return logger.rows, module


@pytest.mark.parametrize("accumulate_grad_batches", [1, 3])
def test_values_logged_only_when_logs_this_step_reach_the_loggers_as_if_logged_every_step(
    tmp_path, accumulate_grad_batches
):
    """Lightning's rule (loggers_write_after_this_batch) is what logs_this_step follows."""
    every, _ = written_rows(tmp_path, True, accumulate_grad_batches=accumulate_grad_batches)
    only, module = written_rows(tmp_path, False, accumulate_grad_batches=accumulate_grad_batches)
    assert len(every) >= 4  # 20 batches an epoch, two epochs, a write every third step
    assert only == every
    assert sum(answer for answer, _ in module.answers) < len(module.answers) / 2  # fewer calls
    assert all(answer == rule for answer, rule in module.answers)


class CountsIterators(torch.utils.data.DataLoader):
    """A DataLoader that counts the iterators made of it."""

    made = 0

    def __iter__(self):
        CountsIterators.made += 1
        return super().__iter__()


class RestartsAtTrainStart(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.before = CountsIterators.made
        restart_train_iterator(trainer)
        self.after = CountsIterators.made


def test_the_train_iterator_exists_before_on_train_start_and_restart_makes_it_again(tmp_path):
    """Why resume.py restarts it: Lightning made it before a callback could load a state."""

    class Module(LogsBatchNumbers):
        def train_dataloader(self) -> torch.utils.data.DataLoader:
            return CountsIterators(torch.randn(8, 2), batch_size=2)

    probe = RestartsAtTrainStart()
    CountsIterators.made = 0
    trainer = L.Trainer(
        accelerator="cpu", max_steps=2, logger=False, callbacks=[probe],
        default_root_dir=tmp_path, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False,
    )  # fmt: skip
    trainer.fit(Module(every_step=True))
    assert (probe.before, probe.after) == (1, 2)


def test_the_cuda_memory_snapshot_functions_take_what_memory_stats_passes():
    record = inspect.signature(torch.cuda.memory._record_memory_history).parameters
    assert {"enabled", "max_entries"} <= record.keys()
    assert "filename" in inspect.signature(torch.cuda.memory._dump_snapshot).parameters


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_cuda_memory_snapshot_records_and_dumps(tmp_path):
    record_cuda_allocations(max_entries=1000)
    torch.ones(1024, device="cuda")
    dump_cuda_allocations(str(tmp_path / "snapshot.pickle"))
    stop_recording_cuda_allocations()
    assert (tmp_path / "snapshot.pickle").stat().st_size > 0


def test_dynamo_support_is_what_torch_compile_does_and_the_modes_are_listed():
    def double(x):
        return x * 2

    before = compiled_graph_count()
    try:
        torch.compile(double, backend="eager")(torch.ones(3))
        compiled = compiled_graph_count() > before
    except RuntimeError:  # torch.compile refuses a Python dynamo does not support
        compiled = False
    assert dynamo_supports_this_python() is compiled
    assert {"default", "reduce-overhead", "max-autotune"} <= known_compile_modes()


def test_ddp_wrapper_kwargs_are_what_lightning_gives_distributed_data_parallel(monkeypatch):
    """callbacks/ddp.py sets `find_unused_parameters` there once the module is known."""
    from lightning.pytorch.strategies import DDPStrategy
    from lightning.pytorch.strategies import ddp as lightning_ddp

    strategy = DDPStrategy(parallel_devices=[torch.device("cpu")], find_unused_parameters=False)
    assert ddp_wrapper_kwargs(strategy) == {"find_unused_parameters": False}
    ddp_wrapper_kwargs(strategy)["find_unused_parameters"] = True
    received = {}
    monkeypatch.setattr(
        lightning_ddp, "DistributedDataParallel", lambda module, **kwargs: received.update(kwargs)
    )
    strategy._setup_model(nn.Linear(1, 1))
    assert received["find_unused_parameters"] is True


def test_lightnings_loader_recording_stays_on_after_an_error_and_end_loader_recording_ends_it():
    """The context the data connector calls each `*_dataloader` method in; the day Lightning
    restores the classes on an error itself, the first assertion fails by name."""
    classes = (DataLoader, StatefulDataLoader, BatchSampler)
    originals = {cls: (cls.__init__, cls.__setattr__, cls.__delattr__) for cls in classes}
    with (
        pytest.raises(RuntimeError),
        _replace_dunder_methods(DataLoader, "dataset"),  # as the data connector does
        _replace_dunder_methods(BatchSampler),
    ):
        raise RuntimeError("a loader method that raises")
    try:
        assert all(cls.__setattr__ is not originals[cls][1] for cls in classes)
        loader = StatefulDataLoader(list(range(4)))
        loader.kept = 1  # recorded (`((name, value), tag)`), outside any loader method
        assert [entry for entry, _ in loader.__pl_attrs_record] == [("kept", 1)]
    finally:
        end_loader_recording()  # (also when an assertion above fails: the other tests)
    for cls in classes:
        assert (cls.__init__, cls.__setattr__, cls.__delattr__) == originals[cls], cls
    assert not hasattr(DataLoader(list(range(4))), "__pl_attrs_record")
