"""`compare --plot FILE.png`: the monitored metric against steps, and against each parameter.

The first panel draws every run's monitored metric (from its CSV logger's metrics.csv)
against the training step, each line labelled at its end with the run's name. For runs
that differ in their settings (a sweep), one more panel per differing key plots the best
value against that key's value (a log axis for a parameter the sweep's spec sampled on a
log scale, `log: true`, as its Optuna study records it; outside a sweep, for positive
numbers spanning a decade or more; categories as ticks), each point labelled with its row's name; rows over several
seeds show their mean with a bar of one standard deviation. matplotlib draws with its
Agg backend: no display needed.
"""

from __future__ import annotations  # matplotlib's types, imported only for the checker

import statistics
from pathlib import Path
from typing import TYPE_CHECKING

from .table import Row, differing_keys

if TYPE_CHECKING:  # matplotlib is optional (the sweep extra): imported when drawing
    from matplotlib.axes import Axes

COLUMNS = 3


def log_sampled(folders: list[Path]) -> dict[str, bool]:
    """Searched key -> whether it was sampled on a log scale, for each sweep among `folders`.

    Read from the study's own distributions (FloatDistribution.log, IntDistribution.log)
    in `optuna.journal`, the record of what every trial was sampled from.
    """
    journals = [folder / "optuna.journal" for folder in folders]
    journals = [journal for journal in journals if journal.is_file()]
    if not journals:
        return {}
    from optuna.storages import JournalStorage
    from optuna.storages.journal import JournalFileBackend

    scales: dict[str, bool] = {}
    for journal in journals:
        storage = JournalStorage(JournalFileBackend(str(journal)))
        for study in storage.get_all_studies():
            for trial in storage.get_all_trials(
                storage.get_study_id_from_name(study.study_name), deepcopy=False
            ):
                for key, distribution in trial.distributions.items():
                    log = bool(getattr(distribution, "log", False))
                    scales[key] = scales.get(key, False) or log
    return scales


def write_plot(
    table: list[Row], monitor: str | None, mode: str, path: Path, logs: dict[str, bool]
) -> list[str]:
    """Draw the PNG; the notes for runs that could not be drawn (no CSV metrics)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = differing_keys(table)
    panels = 1 + len(keys)
    columns = min(panels, COLUMNS)
    lines = -(-panels // columns)
    figure, axes = plt.subplots(lines, columns, figsize=(6 * columns, 4.2 * lines), squeeze=False)
    flat = list(axes.flat)
    notes = _curves(flat[0], table, monitor, mode)
    for axis, key in zip(flat[1:], keys, strict=False):
        _against(axis, table, key, monitor, mode, logs.get(key))
    for axis in flat[panels:]:
        axis.set_visible(False)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return notes


def _curves(axis: Axes, table: list[Row], monitor: str | None, mode: str) -> list[str]:
    notes = []
    colors = _colors(len(table))
    for row, color in zip(table, colors, strict=True):
        for run in row.runs:
            series = run.metrics.get(monitor or "", {})
            if not series:
                notes.append(f"{run.root}: no {monitor} in a metrics.csv: not drawn")
                continue
            steps = sorted(series)
            values = [series[step] for step in steps]
            axis.plot(steps, values, color=color, marker="o" if len(steps) < 20 else None, ms=3)
            name = row.label if row.n == 1 else f"{row.label} ({run.root.name})"
            axis.annotate(
                name,
                (steps[-1], values[-1]),
                xytext=(4, 0),
                textcoords="offset points",
                color=color,
                fontsize=8,
                va="center",
            )
    axis.set_xlabel("step")
    axis.set_ylabel(monitor or "metric")
    axis.set_title(f"{monitor} per run ({'lower' if mode == 'min' else 'higher'} is better)")
    axis.margins(x=0.15)
    axis.grid(alpha=0.3)
    return notes


def _against(
    axis: Axes, table: list[Row], key: str, monitor: str | None, mode: str, log: bool | None
) -> None:
    rows = [row for row in table if row.best and key in row.config]
    texts = [row.config[key] for row in rows]
    numbers = [_number(text) for text in texts]
    numeric = all(number is not None for number in numbers)
    if numeric:
        xs: list[float] = [n for n in numbers if n is not None]
    else:
        categories = sorted(set(texts))
        xs = [float(categories.index(text)) for text in texts]
        axis.set_xticks(range(len(categories)), categories, rotation=20, fontsize=8)
        axis.set_xlim(-0.5, len(categories) - 0.3)  # room for the last point's label
    colors = _colors(len(table))
    for row, x in zip(rows, xs, strict=True):
        color = colors[table.index(row)]
        mean = statistics.fmean(row.best)
        error = statistics.stdev(row.best) if len(row.best) > 1 else None
        axis.errorbar(
            [x], [mean], yerr=None if error is None else [error], fmt="o", color=color, capsize=3
        )
        axis.annotate(
            row.label, (x, mean), xytext=(4, 3), textcoords="offset points", color=color, fontsize=8
        )
    spans_decades = numeric and xs and min(xs) > 0 and max(xs) / min(xs) >= 10
    if numeric and xs and min(xs) > 0 and (log if log is not None else spans_decades):
        axis.set_xscale("log")
    axis.set_xlabel(key)
    axis.set_ylabel(f"best {monitor}")
    axis.set_title(f"best {monitor} against {key}")
    axis.margins(x=0.15)
    axis.grid(alpha=0.3)


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _colors(count: int) -> list[tuple[float, float, float, float]]:
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if count <= 10 else "viridis"]
    return [cmap(i if count <= 10 else i / max(1, count - 1)) for i in range(count)]
