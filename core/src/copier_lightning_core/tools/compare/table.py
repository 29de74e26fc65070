"""The comparison table: one row per run, or per config when runs differ only by seed.

Config keys are the resolved config's, flattened and shortened the way `fit` takes them
(`model.optimizer.lr`, not `model.init_args.optimizer.init_args.lr`); only keys whose
values differ between rows are shown. Values that name the run's own folder (its root,
its loggers' save_dir), `ckpt_path` and the sweep's own pruning callback are not
settings of the run and never count as a difference. Rows are sorted by the best value
of the monitored metric, in its direction (`checkpoint.mode`).
"""

import csv
import io
import json
import os
import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...run.run_record import RunRecord

NOT_SETTINGS = {"ckpt_path"}
# A logger's version (CSV, TensorBoard), id (wandb) or run_id (MLflow) names where a run
# logged, as its folder does: a resumed run records the version it continued, a fresh
# one none, and they ran the same settings.
LOGGER_IDENTITY = ("version", "id", "run_id")
CELL_WIDTH = 40  # characters a table or markdown cell shows; see _cell
SWEEP_CALLBACK = ".TrialPruning"  # the sweep's reporter: in a trial's config, not a setting


@dataclass
class Row:
    label: str
    runs: list[RunRecord]
    config: dict[str, str]
    best: list[float]
    final: list[float]

    @property
    def n(self) -> int:
        return len(self.runs)

    @property
    def steps(self) -> int | None:
        steps = [run.steps for run in self.runs if run.steps is not None]
        return round(statistics.fmean(steps)) if steps else None

    @property
    def train_seconds(self) -> float | None:
        times = [run.train_seconds for run in self.runs if run.train_seconds is not None]
        return statistics.fmean(times) if times else None

    @property
    def wall_seconds(self) -> float | None:
        walls = [run.wall_seconds for run in self.runs if run.wall_seconds is not None]
        return statistics.fmean(walls) if walls else None

    @property
    def commit(self) -> str:
        commits = sorted({run.commit for run in self.runs})
        return commits[0] if len(commits) == 1 else "mixed: " + ", ".join(commits)


def flat_config(record: RunRecord) -> dict[str, str]:
    """The run's settings as `fit` option names and their values as text."""
    flat: dict[str, str] = {}
    root = str(record.root.resolve())

    def visit(prefix: str, value: Any) -> None:
        if isinstance(value, dict) and "class_path" in value:
            flat[prefix] = str(value["class_path"])
            # An argument left at None is no setting; keeps a strategy's unset options out.
            arguments = value.get("init_args") or {}
            visit(prefix, {key: inner for key, inner in arguments.items() if inner is not None})
        elif isinstance(value, dict):
            for key, inner in value.items():
                visit(f"{prefix}.{key}" if prefix else str(key), inner)
        elif _is_class_list(value):
            # Callbacks, loggers, plugins: a key per class (`trainer.callbacks[TorchCompile]`),
            # so a run that adds one shows that one column, not the whole list as JSON.
            seen: dict[str, int] = {}
            for item in value:
                if str(item["class_path"]).endswith(SWEEP_CALLBACK):
                    continue
                name = str(item["class_path"]).rsplit(".", 1)[-1]
                seen[name] = seen.get(name, 0) + 1
                label = name if seen[name] == 1 else f"{name}#{seen[name]}"
                visit(f"{prefix}[{label}]", item)
        else:
            text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
            if prefix not in NOT_SETTINGS and root not in text and not _logger_identity(prefix):
                flat[prefix] = text

    visit("", record.config)
    return flat


def _logger_identity(key: str) -> bool:
    return key.startswith("trainer.logger") and key.rsplit(".", 1)[-1] in LOGGER_IDENTITY


def rows(records: list[RunRecord], base: Path) -> tuple[list[Row], str | None, str]:
    """(rows, monitored metric, mode): runs grouped by config except their seed."""
    monitors = {run.monitor for run in records if run.monitor[0]}
    monitor, mode = sorted(monitors)[0] if monitors else (None, "min")
    groups: dict[tuple[tuple[str, Any], ...], list[RunRecord]] = {}
    configs = {}
    for run in records:
        config = flat_config(run)
        configs[id(run)] = config
        key = tuple(sorted((k, v) for k, v in config.items() if k != "seed_everything"))
        groups.setdefault(key, []).append(run)
    grouped = any(len(runs) > 1 for runs in groups.values())
    table = []
    for runs in groups.values():
        scores = [run.scores(monitor) if monitor else (None, None) for run in runs]
        config = dict(configs[id(runs[0])])
        if grouped:
            config.pop("seed_everything", None)
        table.append(
            Row(
                label=_label([run.root for run in runs], base),
                runs=runs,
                config=config,
                best=[best for best, _ in scores if best is not None],
                final=[final for _, final in scores if final is not None],
            )
        )
    sign = 1 if mode == "min" else -1
    table.sort(
        key=lambda row: (
            not row.best,
            sign * statistics.fmean(row.best) if row.best else 0,
            row.label,
        )
    )
    return table, monitor, mode


def differing_keys(table: list[Row]) -> list[str]:
    keys = sorted({key for row in table for key in row.config})
    return [key for key in keys if len({row.config.get(key) for row in table}) > 1]


def _label(roots: list[Path], base: Path) -> str:
    relative = [os.path.relpath(root, base) for root in roots]
    if len(relative) == 1:
        return relative[0] if relative[0] != "." else roots[0].name
    common = os.path.commonpath(relative)
    return common if common and common != "." else ", ".join(relative)


def _stat(values: list[float]) -> tuple[float | None, float | None]:
    if not values:
        return None, None
    mean = statistics.fmean(values)
    std = statistics.stdev(values) if len(values) > 1 else None
    return mean, std


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


TIME_COLUMNS = (
    "train: the fit loop, validation included, over every resume (Lightning's Timer); "
    "wall: the fit commands from start to exit, summed (command.txt): data setup, "
    "checkpoint writes and the test after fit too"
)


def render(table: list[Row], monitor: str | None, mode: str, style: str) -> str:
    """The table as aligned text (`table`), `csv` (full values) or `markdown`.

    Two times, because they answer different questions: `train` (what the model cost)
    and `wall` (what the run cost); TIME_COLUMNS says what each measures.
    """
    keys = differing_keys(table)
    grouped = any(row.n > 1 for row in table)
    metric = f"{monitor} ({mode})" if monitor else "metric"
    if style == "csv":
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        header = ["run", "n", *keys, "metric", "best", "best_std", "final", "final_std"]
        writer.writerow([*header, "steps", "train_seconds", "wall_seconds", "commit"])
        for row in table:
            best, best_std = _stat(row.best)
            final, final_std = _stat(row.final)
            values = [row.label, row.n, *(row.config.get(k, "") for k in keys), monitor or ""]
            numbers = [best, best_std, final, final_std, row.steps, row.train_seconds]
            numbers.append(row.wall_seconds)
            writer.writerow([*values, *("" if v is None else v for v in numbers), row.commit])
        return out.getvalue()
    header = [
        "run",
        *(["n"] if grouped else []),
        *keys,
        f"best {metric}",
        "final",
        "steps",
        "train",
        "wall",
        "commit",
    ]
    header = [_cell(name, keep="ends") for name in header]
    lines = [
        [
            _cell(row.label, keep="end"),  # a path: its last folders tell runs apart
            *([str(row.n)] if grouped else []),
            *(_cell(_short(row.config.get(k, ""))) for k in keys),
            _shown(row.best),
            _shown(row.final),
            "n/a" if row.steps is None else str(row.steps),
            _duration(row.train_seconds),
            _duration(row.wall_seconds),
            _cell(row.commit),
        ]
        for row in table
    ]
    if style == "markdown":
        rule = ["---"] * len(header)
        return (
            "\n".join(
                "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"
                for cells in [header, rule, *lines]
            )
            + "\n"
        )
    widths = [max(len(cells[i]) for cells in [header, *lines]) for i in range(len(header))]
    return (
        "\n".join(
            "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()
            for cells in [header, *lines]
        )
        + "\n"
    )


def _cell(text: str, keep: str = "start") -> str:
    """`text` on one line of at most CELL_WIDTH characters, cut with an ellipsis.

    A value can be any length (a list in the config, a path, a crashed run's message, the
    commits of a group): uncut, one cell made every line of the table thousands of
    characters wide. `keep` is the part that tells values apart: the `start` of a value,
    the `end` of a path, both `ends` of a dotted config key. The csv format keeps them whole.
    """
    text = " ".join(text.split())  # newlines and tabs would break the row
    if len(text) <= CELL_WIDTH:
        return text
    if keep == "end":
        return "…" + text[-(CELL_WIDTH - 1) :]
    if keep == "ends":
        head = (CELL_WIDTH - 1) // 2
        return text[:head] + "…" + text[-(CELL_WIDTH - 1 - head) :]
    return text[: CELL_WIDTH - 1] + "…"


def _shown(values: list[float]) -> str:
    mean, std = _stat(values)
    if mean is None:
        return "n/a"
    return f"{mean:.4g}" if std is None else f"{mean:.4g} ± {std:.2g}"


def _short(text: str) -> str:
    """A number as 4 significant digits (the csv format keeps every digit)."""
    try:
        number = float(text)
    except ValueError:
        return text
    return text if number.is_integer() and "e" not in text.lower() else f"{number:.4g}"


def _is_class_list(value: Any) -> bool:
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and "class_path" in item for item in value)
    )
