"""`--ckpt_path`: what each value names, turned into the one file a command loads.

`--ckpt_path` takes `last`, `best`, a checkpoint file or a folder of shards (an FSDP2
checkpoint). The words are defined here once, for every module that asks:

- `last` and `best` without a run root name the experiment's newest run
  (`names_newest_run`, run_folders.py); a fit with `last` or a checkpoint inside its root
  goes on with that run (`continues_run`, run_root.py); a checkpoint inside a run's
  `checkpoints/` belongs to that run (`run_of_checkpoint`);
- `best` is the best checkpoint recorded in the run's `last.ckpt` (fit leaves it to
  Lightning); `hpc` and `registry` are Lightning's own;
- `checkpoint_file` turns the value into the file the command loads (the config's
  `ckpt_path` becomes that file), which the run plan then reads once (run_plan.py).

A folder of shards read by the strategy (FSDP2 on every rank) is left to it; under any
other strategy it is gathered into a temporary file first (consolidate.py), and that file
is the one loaded.
"""

import os
from pathlib import Path
from typing import Any, TypeGuard

import torch
from jsonargparse import Namespace

from ..callbacks.finetune import read_weights
from ..checkpoints.consolidate import one_process_checkpoint
from ..checkpoints.load import check_weights_file, is_sharded, load_checkpoint
from ..platform.paths import RunLayout, project_path
from ..platform.refusal import Refusal

LAST, BEST = "last", "best"
LIGHTNING_NAMES = (BEST, "hpc", "registry")  # values Lightning resolves itself (best: in fit)


def names_newest_run(ckpt_path: str | None) -> TypeGuard[str]:
    """`last` and `best`, given without a run root, read the experiment's newest run."""
    return ckpt_path in (LAST, BEST)


def run_of_checkpoint(ckpt_path: str | None) -> Path | None:
    """The run a checkpoint lies in (`<run>/checkpoints/<name>`), None for anything else."""
    if not ckpt_path or "://" in ckpt_path or names_newest_run(ckpt_path):
        return None
    path = project_path(ckpt_path)
    run = path.parent.parent
    return run if RunLayout(run).checkpoints == path.parent and path.exists() else None


def continues_run(root: Path, ckpt_path: str | None) -> bool:
    """Whether a fit into `root` with this `--ckpt_path` goes on with the run there:
    `last`, or a checkpoint inside `root` (one from elsewhere starts a new run)."""
    return ckpt_path == LAST or (
        ckpt_path is not None and root.resolve() in Path(ckpt_path).resolve().parents
    )


def read_init_from(config: Namespace) -> dict[str, torch.Tensor] | None:
    """A fit's `--init_from` file, checked; its weights when it is a `.ckpt` (read once
    here, a damaged file stops here), None for none or a `.safetensors` file (whose
    header alone is read here; InitFromWeights loads it)."""
    init_from = config.get("init_from")
    if not init_from:
        return None
    path = project_path(init_from)
    check_weights_file(path, "--init_from")
    return None if path.suffix == ".safetensors" else read_weights(path)


def checkpoint_file(command: str, config: Namespace, layout: RunLayout) -> Path | None:
    """The file `config.ckpt_path` names in the run at `layout`, which the config's
    `ckpt_path` then names too; None when the command loads none, or one Lightning finds
    or reads itself (`hpc`, a remote path, a folder of shards the strategy reads, `last`
    before any exists). A missing file stops here, before any work."""
    ckpt_path = config.get("ckpt_path")
    if ckpt_path == BEST and command != "fit":
        ckpt_path = config.ckpt_path = str(best_checkpoint(layout))
    path = _named_file(command, ckpt_path, layout, config.trainer.get("strategy"))
    if path is not None:
        config.ckpt_path = str(path)
    elif ckpt_path and Path(ckpt_path).is_file():
        # A name Lightning resolves (`best`, `last`, `hpc`) that is also a file in the
        # working directory: LightningCLI would read that file's hyperparameters.
        path = Path(ckpt_path)
    return path


def _named_file(
    command: str, ckpt_path: str | None, layout: RunLayout, strategy: Any
) -> Path | None:
    """The file `ckpt_path` names, None for a name Lightning resolves, a remote path, or a
    folder Lightning reads.

    `last` is `<root>/checkpoints/last.ckpt` when it exists (else Lightning warns and
    starts from scratch); a relative path is relative to the project; a missing file
    stops here, before any work. A folder of shards (an FSDP2 checkpoint) is left to a
    strategy that reads shards, else gathered into a temporary file (consolidate.py).
    """
    if not ckpt_path or "://" in ckpt_path or ckpt_path.split(":")[0] in LIGHTNING_NAMES:
        return None
    if ckpt_path == LAST:
        check_last_stays_in_run(layout)
        if not layout.last.exists():
            return None
    path = layout.last if ckpt_path == LAST else project_path(ckpt_path)
    if not path.exists():
        raise Refusal(
            f"--ckpt_path {ckpt_path}: no such file ({path}). Give a checkpoint file, "
            "or `last` / `best` for the newest run of the experiment (or the run in "
            "--trainer.default_root_dir)."
        )
    if is_sharded(path):
        return one_process_checkpoint(command, path, strategy)
    return path if path.is_file() else None  # another kind of folder: Lightning's


def check_last_stays_in_run(layout: RunLayout) -> None:
    """`last.ckpt` may be a link (ModelCheckpoint's `save_last="link"`) to a checkpoint of
    this run; one that leads out of the run is refused, naming where it leads.

    `--ckpt_path last` means "go on with this run": followed out of it, a fit would load
    another run's state into this folder (and run_root.py would then refuse it as a new
    run into a folder that holds one, telling the user to add the `--ckpt_path last` they
    gave), and an evaluation would report another run's weights as this run's.
    """
    if not layout.last.is_symlink():
        return
    target = Path(os.path.realpath(layout.last))  # a link that loops: where it stops
    if layout.root.resolve() in target.parents:
        return
    raise Refusal(
        f"--ckpt_path last: {layout.last} is a link to {target}, outside this run "
        f"({layout.root}); `last` continues or evaluates the run's own checkpoint. To use "
        f"that file, name it: `--ckpt_path {target}` (without --trainer.default_root_dir, "
        f"a fit then goes on in that run's own folder), or `--init_from {target}` to start a "
        "new run from its weights. Or replace the link with a checkpoint of this run."
    )


def best_checkpoint(layout: RunLayout) -> Path:
    """The best checkpoint recorded by ModelCheckpoint in `last.ckpt` of a finished run."""
    if layout.last.is_file():
        states = load_checkpoint(layout.last).get("callbacks", {})
        for state in states.values():
            best = Path(state.get("best_model_path") or "")
            if best.name and best.is_file():
                return best
    raise Refusal(
        f"--ckpt_path best: no best checkpoint is recorded in {layout.last}. Train "
        "first with the same --trainer.default_root_dir, or pass a checkpoint file "
        "(`--ckpt_path path/to/file.ckpt`, or `--ckpt_path last`)."
    )
