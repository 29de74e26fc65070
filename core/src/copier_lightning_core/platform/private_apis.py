"""The private torch and Lightning APIs the library relies on, each with the reason.

Everything else in the library uses public APIs of torch, Lightning and jsonargparse.
What is here has no public equivalent; the library's tests/test_private_apis.py pins the
behaviour of each, so an upgrade that changes one fails that test by name rather than a
training run in some odd way.

- `compiled_graph_count`, `has_compiled_code` (compile.py): torch has no public query
  for "dynamo compiled a graph of this function". `torch.compiler.is_compiling()` says
  only that code runs while being traced; a frame dynamo skips (an unsupported module,
  a `disable`d function) runs uncompiled without any error, which is what TorchCompile
  must detect. Dynamo's statistics counter counts the graphs compiled in this process;
  its code cache holds the entries compiled by an earlier run in the same process (a
  second command of one test session), which the counter no longer shows.
- `graph_breaks` (compile.py): dynamo's counter of graph breaks by reason; torch's public
  `torch._dynamo.explain` reruns the function to count them, which a training step must
  not do (it would draw random numbers and change state twice).
- `DynamoError` (compile.py): the base class of dynamo's errors (graph breaks under
  `fullgraph=True`, unsupported operations, backend failures), so that a compilation
  failure can be told from an error of the model's own code; torch exports none.
- `copy_each` (health/nonfinite.py): `torch._foreach_copy_`, one call that copies each
  tensor of a list into its counterpart, as torch's own optimizers do; the public way is a
  `copy_` per tensor, which costs a call per tensor every step on a small model.
- `skips_on_found_inf` (health/nonfinite.py): whether an optimizer's step reads a
  `found_inf` tensor and skips its whole update on the device where it is nonzero
  (torch's fused Adam, AdamW, SGD, Adagrad): torch's GradScaler asks the same private
  attribute; no public API says which optimizers can skip a step without a host read.
- `nested_schedulers` (lr_scaling.py): SequentialLR and ChainedScheduler keep their
  children in `_schedulers` only; a child restarts from its own `base_lrs` at a
  milestone, so scaling the learning rate must reach the children.
- `loggers_write_after_this_batch` (loggers.py): Lightning decides in its logger
  connector whether the loggers write the values logged in this batch (every
  `log_every_n_steps` optimizer steps, counted its own way under gradient accumulation
  and manual optimization, and when the run stops); no public API says so, and a copy of
  the rule would drift from it.
- `flat_hyperparameters` (loggers.py): the parameter names Lightning's MLflow logger
  sends (nested keys joined by `/`, by Lightning's own `_flatten_dict`). A continued
  MLflow run must leave out exactly the names it already holds, and a copy of the
  flattening rule would drift from the names Lightning logs.
- `subcommand_parser` (lightning_cli.py): the parser of one command (`fit`, ...), which
  LightningCLI keeps in `_subcommand_parsers` and hands to SaveConfigCallback with the
  command's section of the config. ProjectCLI validates the whole config once and tells
  that parser its section was validated with it, so that writing `config.yaml` does not
  validate it again (parser_once.py); no public name reaches it before the callback is made.
- `kept_experiment` (loggers.py): Lightning's CSV logger makes its `ExperimentWriter` in
  its `experiment` property and keeps it in `_experiment`; no argument or hook chooses
  the writer's class. The project's CSVLogger writes with `ContinuingWriter` (which keeps
  the rows of the run it resumes), so it puts that writer where Lightning keeps its own,
  and every method of Lightning's logger (log_metrics, save, finalize) uses it.
- `restart_train_iterator` (resume.py): Lightning's fit loop makes the train loader's
  iterator before any callback's `on_train_start`, so one made before the loaders' saved
  states are loaded must be made again; the loop's `_data_fetcher` is the one handle on it
  (Lightning's own fix for #20550 does the same), and no hook runs between the two.
- `record_cuda_allocations`, `stop_recording_cuda_allocations`, `dump_cuda_allocations`
  (health/memory.py): torch's memory snapshot (`torch.cuda.memory._record_memory_history`
  and `_dump_snapshot`, which https://pytorch.org/memory_viz reads) is documented in
  "Understanding CUDA Memory Usage" but has no public name.
- `ddp_wrapper_kwargs` (callbacks/ddp.py): the keyword arguments Lightning's
  DDPStrategy passes to `DistributedDataParallel` when it wraps the module; it keeps them
  in `_ddp_kwargs`, set at construction, before the module is known. Deciding
  `find_unused_parameters` from the module (manual optimization) needs to set one after.
- `command_config_dump` (lightning_cli.py): LightningCLI dumps the command's resolved
  config once, when it builds the model (`_dump_config`, kept in `config_dump`), to
  store the model's hyperparameters. The provenance record of every checkpoint holds that
  same config as YAML; a dump of its own would cost a command another pass of jsonargparse
  over the whole config (about 0.05 s, a tenth of a small fit).
- `end_loader_recording` (loader_hooks.py): while Lightning calls a `*_dataloader`
  method, it patches `__init__`, `__setattr__` and `__delattr__` of DataLoader and
  BatchSampler and every subclass (`_replace_dunder_methods`), to record how a loader was
  built and rebuild it with a DistributedSampler. It restores them after the method
  returns, but not when the method raises (no `try`/`finally`): a refused loader, or any
  error in your loader method, leaves every DataLoader class of the process recording each
  attribute ever set. Each iterator (`_iterator`) is then kept in its loader's record, and
  with it the iterator's worker processes, long after Lightning let it go: a later fit in
  the same process (a notebook, the tests) accumulates idle workers, and a garbage
  collection later waits up to 5 s on each one. It puts back the methods Lightning saved,
  as its own exit does.
- `dynamo_supports_this_python`, `known_compile_modes` (doctor/context.py): whether dynamo runs
  on this Python and which `torch.compile(mode=...)` names this torch knows; torch.compile's
  own docstring points at `torch._inductor.list_mode_options()` for the list.

Two private Lightning methods are overridden rather than called, so they cannot live here:

- `ExperimentWriter._check_log_dir_exists` (loggers.py). Lightning's CSV writer calls it
  from `__init__` and deletes an existing `metrics.csv` there; `ContinuingWriter`
  overrides it to keep the rows of the run it resumes. The same test file pins that
  Lightning still calls it, and that the override then appends.
- `LightningCLI._parse_ckpt_path` (lightning_cli.py). LightningCLI calls it after parsing
  and loads the whole `--ckpt_path` file there (every tensor into memory) only to apply
  its hyperparameters to `model:`; ProjectCLI applies them, the same way, from the
  checkpoint its run plan read once (run_plan.py). The same test file pins that
  Lightning still calls it, and that its own reading gives the same config.
"""

from collections import Counter
from collections.abc import Callable
from types import CodeType
from typing import Any

import lightning as L
import torch
from lightning.fabric.utilities.logger import _convert_params, _flatten_dict
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.strategies import DDPStrategy
from lightning_utilities.core.inheritance import get_all_subclasses
from torch._dynamo.eval_frame import _debug_get_cache_entry_list
from torch._dynamo.exc import TorchDynamoException as DynamoError
from torch._dynamo.utils import counters
from torch.utils.data import BatchSampler, DataLoader

__all__ = [
    "DynamoError",
    "command_config_dump",
    "compiled_graph_count",
    "copy_each",
    "ddp_wrapper_kwargs",
    "dump_cuda_allocations",
    "dynamo_supports_this_python",
    "end_loader_recording",
    "flat_hyperparameters",
    "graph_breaks",
    "has_compiled_code",
    "kept_experiment",
    "known_compile_modes",
    "loggers_write_after_this_batch",
    "nested_schedulers",
    "record_cuda_allocations",
    "restart_train_iterator",
    "skips_on_found_inf",
    "stop_recording_cuda_allocations",
]


def compiled_graph_count() -> int:
    """How many graphs dynamo has compiled in this process so far."""
    return counters["stats"]["unique_graphs"]


def graph_breaks() -> Counter[str]:
    """The graph breaks dynamo has met in this process so far, by reason (a copy)."""
    return Counter(counters["graph_break"])


def has_compiled_code(code: CodeType) -> bool:
    """Whether dynamo's cache holds compiled code for this code object."""
    return bool(_debug_get_cache_entry_list(code))


def copy_each(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    """`target.copy_(source)` for each pair, in one call."""
    torch._foreach_copy_(targets, sources)


def ddp_wrapper_kwargs(strategy: DDPStrategy) -> dict[str, Any]:
    """The (mutable) keyword arguments `strategy` gives DistributedDataParallel."""
    return strategy._ddp_kwargs


def skips_on_found_inf(optimizer: torch.optim.Optimizer) -> bool:
    """Whether `optimizer.found_inf`, set before its step, skips the update on the device."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False))


def flat_hyperparameters(params: Any) -> dict[str, Any]:
    """Hyperparameters (a dict or Namespace, nested) as the flat names MLflow receives."""
    return _flatten_dict(_convert_params(params))


def command_config_dump(cli: LightningCLI) -> dict[str, Any]:
    """The resolved config of `cli`'s command as plain data, dumped once per command."""
    cli._dump_config()
    dump: dict[str, Any] = cli.config_dump
    return dump


def subcommand_parser(cli: LightningCLI, subcommand: str) -> LightningArgumentParser:
    """The parser of `cli`'s command `subcommand`, which its SaveConfigCallback is given."""
    return cli._parser(subcommand)


def kept_experiment(
    logger: Any, kind: type[ExperimentWriter], make: Callable[[], ExperimentWriter]
) -> ExperimentWriter:
    """The experiment object `logger` keeps, made by `make` unless it already is a `kind`."""
    if not isinstance(logger._experiment, kind):  # None until the logger is first used
        logger._experiment = make()
    experiment: ExperimentWriter = logger._experiment
    return experiment


def nested_schedulers(scheduler: object) -> list[torch.optim.lr_scheduler.LRScheduler]:
    """The child schedulers of a SequentialLR or ChainedScheduler; [] for any other."""
    return list(getattr(scheduler, "_schedulers", []))


def loggers_write_after_this_batch(trainer: L.Trainer) -> bool:
    """Whether Lightning writes this batch's logged step values to the loggers."""
    return trainer._logger_connector.should_update_logs


def restart_train_iterator(trainer: L.Trainer) -> None:
    """Make the fit loop's train iterator again, from the loaders' current state."""
    fetcher = trainer.fit_loop._data_fetcher
    if fetcher is not None:
        iter(fetcher)


def end_loader_recording() -> None:
    """Undo what Lightning's loader-recording context patched, when an exception left it.

    The names and the restoring loop are those of its own exit
    (`lightning.fabric.utilities.data._replace_dunder_methods`); a class it did not patch
    keeps its methods, so this is a no-op once Lightning restores them itself.
    """
    for base in (DataLoader, BatchSampler):
        for cls in get_all_subclasses(base) | {base}:
            for name in ("__setattr__", "__delattr__", "__init__"):
                saved = f"__old{name}"
                if saved in cls.__dict__:  # patched on this class, not inherited
                    setattr(cls, name, cls.__dict__[saved])
                    delattr(cls, saved)


def record_cuda_allocations(max_entries: int) -> None:
    """Start recording every CUDA allocation with its stack (the last `max_entries`)."""
    torch.cuda.memory._record_memory_history(max_entries=max_entries)


def stop_recording_cuda_allocations() -> None:
    torch.cuda.memory._record_memory_history(enabled=None)


def dump_cuda_allocations(path: str) -> None:
    """Write the recorded allocations where https://pytorch.org/memory_viz opens them."""
    # torch leaves `_dump_snapshot` unannotated.
    torch.cuda.memory._dump_snapshot(path)  # type: ignore[no-untyped-call]


def dynamo_supports_this_python() -> bool:
    # Seconds to import: only when a compile callback is configured.
    from torch._dynamo.eval_frame import is_dynamo_supported

    return is_dynamo_supported()


def known_compile_modes() -> frozenset[str]:
    """The `mode=` names `torch.compile` accepts with this torch."""
    import torch._inductor

    return frozenset(torch._inductor.list_mode_options())
