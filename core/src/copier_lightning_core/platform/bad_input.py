"""Values a run cannot use, refused with one paragraph before the work they would spoil.

Lightning and torch accept some of these and then do nothing (`max_epochs 0`, a training
set with no batches: the run "finishes" at once, exit 0), fail deep inside with a
traceback (`batch_size 0`, a negative `num_workers`, a truncated `--init_from` file), or
start what the machine cannot hold (`num_workers 1000` starts 1000 processes). Each check
names the value, where it came from and the fix.

What a type can state is left to the type: the example DataModule's and `LoaderOptions`'
arguments are jsonargparse's `PositiveInt` / `NonNegativeInt`, so the parser refuses
`--data.batch_size 0` or a negative `num_workers` itself (one paragraph: parse_errors.py).
What stays here is what no signature the library owns can state:

- the arguments of a DataModule of yours that are typed plain `int` (or not at all): the
  parser lets any int through, so `check_data_arguments` applies the same rules to them,
  by name, before anything is built;
- more workers than CPUs, which depends on the machine: for the configured value here,
  and for every loader your code builds when it is built (loader_hooks.py), whatever
  its arguments are called;
- an optimizer's numbers (a negative learning rate): its signature says `float`, and
  torch's range checks run only when Lightning builds it, deep inside `fit`.

An unwritable run folder is refused by run_root.py.
"""

import inspect
import pydoc
from typing import Any, TypeGuard

import torch
from jsonargparse import Namespace
from lightning.pytorch.utilities import rank_zero_warn

from .loader_rules import available_cpus, worker_ceiling
from .loaders import LoaderOptions
from .project import program
from .refusal import Refusal

# The arguments LoaderOptions takes, checked by its rules where a DataModule names them too.
LOADER_ARGUMENTS = tuple(inspect.signature(LoaderOptions).parameters)


def refuse_bad_input(command: str, config: Any) -> None:
    """Every check of a Trainer command's parsed config, before anything is built or written.

    Checks of the run folder itself (writable, free) come later, in run_root.py: parsing
    alone (doctor, a sweep's check of its spec) must not claim a folder.
    """
    check_data_arguments(config.get("data"))
    if command == "fit":
        check_training_length(config.trainer)
        check_optimizer_arguments(config)


def check_data_arguments(data_config: Any) -> None:
    """The DataModule's `batch_size`, `num_workers`, `pin_memory` and `prefetch_factor`.

    Typed as the example's are, a bad value never gets here: the parser refused it. These
    checks are for a DataModule whose signature takes plain ints (the parser accepts -1),
    and for the worker count's bound, which depends on the machine: raised later, from the
    DataModule's `__init__` (a `LoaderOptions`), the error would reach the user inside
    jsonargparse's traceback, after the run folder is made.
    """
    init_args = data_config.get("init_args") if isinstance(data_config, Namespace) else None
    if init_args is None:
        return
    batch_size = init_args.get("batch_size")
    if _is_int(batch_size) and batch_size < 1:
        raise Refusal(
            f"--data.batch_size {batch_size}: a batch holds at least one sample. Set "
            "it to 1 or more."
        )
    given = {key: init_args[key] for key in LOADER_ARGUMENTS if key in init_args}
    try:
        LoaderOptions(**given)
    except ValueError as error:
        raise Refusal(f"in --data, {error}") from None
    workers = init_args.get("num_workers")
    if _is_int(workers):
        check_num_workers(workers, "--data.num_workers")


def check_num_workers(workers: int, where: str, processes: int = 1) -> None:
    """The machine's ceiling on workers (loader_rules.worker_ceiling); a count below 0 is
    refused by its type, or by torch's DataLoader.

    More workers than CPUs in one process is refused: nothing could make that fit. The
    workers of all `processes` training processes on this machine together above the CPUs
    are a warning with the same words: they compete and each holds its dataset, but a
    dataset small enough or workers idle enough (a full prefetch queue) still train.
    """
    found = worker_ceiling(workers, available_cpus())
    if found is not None:
        problem, fix = found
        raise Refusal(f"{where} {workers}: {problem}. {fix}")
    shared = worker_ceiling(workers, available_cpus(), processes)
    if shared is not None:
        problem, fix = shared
        rank_zero_warn(f"{where} {workers}: {problem}. {fix}")


def check_loader(loader: Any, hook: str, processes: int = 1) -> None:
    """What only the built loader tells: its worker count, and whether training has batches.

    The worker count is checked here for any loader, as built, against the `processes`
    training processes the Trainer runs on this machine: one your code builds with a count
    of its own (not a DataModule argument) is seen nowhere else. The loader does not tell
    where its count came from, so one checked at parse time passes again.
    """
    workers = getattr(loader, "num_workers", None)
    if _is_int(workers):
        check_num_workers(workers, f"{hook}(): num_workers", processes)
    if hook != "train_dataloader":
        return
    try:
        batches = len(loader)
    except TypeError:  # an iterable-style dataset: its length is unknown until it runs out
        return
    if batches == 0:
        samples = _length(getattr(loader, "dataset", None))
        refuse_empty_training_set(samples, loader.batch_size, getattr(loader, "drop_last", "?"))


def refuse_empty_training_set(samples: object, batch_size: object, drop_last: object) -> None:
    raise Refusal(
        f"the training set is empty: train_dataloader() yields 0 batches ({samples} "
        f"samples, batch_size {batch_size}, drop_last {drop_last}); a fit would stop at once "
        "and save nothing. Check the data's path and split sizes (e.g. --data.train_size), "
        "or lower batch_size / turn drop_last off."
    )


def check_training_length(trainer_config: Any) -> None:
    """`fit` with `max_epochs 0` or `max_steps 0` would end before the first step."""
    for key in ("max_epochs", "max_steps"):
        value = trainer_config.get(key)
        if _is_int(value) and (value == 0 or value < -1):
            raise Refusal(
                f"--trainer.{key} {value}: a fit with it trains no step and saves "
                f"nothing. Give a positive number, or -1 for no limit (then set the other "
                "of max_epochs / max_steps)."
            )


def check_optimizer_arguments(config: Any) -> None:
    """The arguments given to a torch optimizer (`--model.optimizer.lr -1`), judged by torch.

    torch checks an optimizer's arguments when it is built, which Lightning does inside
    `fit`, after the model and the run's logs are made: the error came as a traceback that
    named no option. Each torch optimizer in the config (the module's injected
    `OptimizerCallable`s, LightningCLI's own `--optimizer`) is built here on one scalar
    parameter: torch's own checks, before any work, naming the option to fix. The switches
    that pick an implementation for a device (`fused`, `foreach`, ...) are left out, as
    this is not the device the run trains on; other libraries' optimizers are judged when
    the fit builds them.
    """
    model = config.get("model")
    model_args = model.get("init_args") if isinstance(model, Namespace) else None
    given = vars(model_args) if isinstance(model_args, Namespace) else {}
    sections = {f"--model.{key}": value for key, value in given.items()}
    for flag, section in {**sections, "--optimizer": config.get("optimizer")}.items():
        optimizer = _torch_optimizer(section)
        if optimizer is not None:
            arguments = section.get("init_args")
            given = vars(arguments) if isinstance(arguments, Namespace) else {}
            _check_optimizer(flag, optimizer, {k: v for k, v in given.items() if k not in DEVICE})


DEVICE = ("fused", "foreach", "capturable", "differentiable")  # torch.optim's device switches


def _torch_optimizer(section: Any) -> type[torch.optim.Optimizer] | None:
    """The class a config section names, when it is one of torch.optim's optimizers."""
    path = section.get("class_path") if isinstance(section, Namespace) else None
    found = (
        pydoc.locate(path) if isinstance(path, str) and path.startswith("torch.optim.") else None
    )
    return found if isinstance(found, type) and issubclass(found, torch.optim.Optimizer) else None


def _check_optimizer(
    flag: str, optimizer: type[torch.optim.Optimizer], given: dict[str, Any]
) -> None:
    probe = [torch.nn.Parameter(torch.zeros(()))]
    try:
        optimizer(probe, **given)
    except ValueError as error:
        # The argument torch refuses on its own; a combination refused as a whole names none.
        culprits = [key for key in given if _refused(optimizer, probe, key, given[key])]
        name, fit = optimizer.__name__, f"{program()} fit"
        where = f"{flag}.{culprits[0]} {given[culprits[0]]}" if culprits else flag
        known = inspect.signature(optimizer).parameters
        default = known[culprits[0]].default if culprits and culprits[0] in known else None
        hint = f" (its default: {default})" if isinstance(default, int | float) else ""
        raise Refusal(
            f"{where} ({name}): torch refuses it ({error}), as it would when the fit builds "
            f"the optimizer. Give a value {name} accepts{hint}; `{fit} {flag}.help {name}` "
            "lists its arguments."
        ) from None


def _refused(
    optimizer: type[torch.optim.Optimizer], probe: list[Any], key: str, value: Any
) -> bool:
    try:
        optimizer(probe, **{key: value})
    except ValueError:
        return True
    return False


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _length(dataset: Any) -> str:
    try:
        return str(len(dataset))
    except TypeError:
        return "?"
