"""A small JSON record of the newest checkpoint in a folder, so `compare` need not unpickle it.

`compare` shows a checkpoint's counters, callback states (best scores, Lightning's Timer)
and provenance, never its weights; reading those from the checkpoint itself costs a
weights-only unpickling of the whole file, about 6 ms a run, most of `compare`'s time over
thousands of runs, with the parsing of each recorded config (YAML, about 3 ms a run) most
of the rest. Every save through AtomicCheckpointIO therefore also writes
`<folder>/.summary.json`: those parts as plain JSON, the recorded config parsed (by the same
bounded reader, yaml_guard.py), with the name, size and modification time of the
checkpoint they were taken from. A reader takes the summary only while that
checkpoint is unchanged (same name, size and time to the nanosecond); otherwise, and for
checkpoints saved another way (older runs, sharded FSDP2 folders), it reads the file.

The name is hidden and is no `*.ckpt` or `last*` name, so nothing that looks for
checkpoints in the folder takes it for one. The summary is data like the checkpoint:
JSON, read without running anything.
"""

import json
from pathlib import Path
from typing import Any

import torch
import yaml

from ..platform.yaml_guard import UnsafeYaml, load_yaml

SUMMARY = ".summary.json"
SUMMARIZED = ("epoch", "global_step", "callbacks", "provenance")  # what `compare` reads
CONFIG = "config"  # the provenance's recorded config, parsed
# Named tuples of errors: ruff writes a bare `except (A, B):` apart for Python 3.14 targets.
NO_SUMMARY = (OSError, ValueError)  # missing, unreadable, or not JSON
UNREADABLE_CONFIG = (UnsafeYaml, yaml.YAMLError)


def summary_of(checkpoint: dict[str, Any], path: Path) -> bytes:
    """The summary of `checkpoint`, just saved at `path`, as the JSON bytes to write beside
    it (AtomicCheckpointIO writes them as it writes checkpoints, without the fsync: a
    summary lost to a power cut only makes the next read take the checkpoint)."""
    stat = path.stat()
    record = {
        "checkpoint": path.name,
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        **{key: _plain(checkpoint[key]) for key in SUMMARIZED if key in checkpoint},
    }
    config = _parsed_config(record.get("provenance"))
    if config is not None:
        record[CONFIG] = config
    return json.dumps(record).encode()


def read_summary(path: Path) -> dict[str, Any] | None:
    """The summarized parts of the checkpoint at `path` (a link is followed), with its
    recorded config parsed under `config` where it was, or None when its folder holds no
    summary of it as it is now."""
    try:
        target = path.resolve()
        stat = target.stat()
        record = json.loads((target.parent / SUMMARY).read_text(encoding="utf-8"))
    except NO_SUMMARY:  # no summary, or one damaged: read the checkpoint
        return None
    unchanged = isinstance(record, dict) and (
        record.get("checkpoint"),
        record.get("size"),
        record.get("mtime_ns"),
    ) == (target.name, stat.st_size, stat.st_mtime_ns)
    if not unchanged:
        return None
    return {key: record[key] for key in (*SUMMARIZED, CONFIG) if key in record}


def _parsed_config(provenance: Any) -> dict[str, Any] | None:
    """The provenance's recorded config as a mapping; None where there is none, or where it
    does not read as one: the reader of the checkpoint then says why."""
    text = provenance.get("config") if isinstance(provenance, dict) else None
    if not isinstance(text, str):
        return None
    try:
        config = load_yaml(text, "the recorded config")
    except UNREADABLE_CONFIG:
        return None
    return _plain(config) if isinstance(config, dict) else None


def _plain(value: Any) -> Any:
    """`value` as JSON holds it: a one-element tensor becomes its number, a larger one is
    left out (no state `compare` shows is one), anything else not JSON becomes its text."""
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else None
    if isinstance(value, dict):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(item) for item in value]
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)
