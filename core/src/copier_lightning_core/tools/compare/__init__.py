"""`compare RUN_OR_SWEEP_DIR... [--plot FILE.png] [--format table|csv|markdown]`.

One row per run (or per config, with mean ± standard deviation and n, when runs differ
only by their seed): the config keys that differ between rows, the best and final value of
the monitored metric (`checkpoint.monitor`), steps, two times (`train`: the fit loop with
its validation, over every resume, from Lightning's Timer; `wall`: the fit commands from
start to exit, summed from command.txt) and the commit the run was trained from (`+dirty`
for uncommitted changes), sorted best first. An experiment folder (runs/<experiment>)
gives one row per run; a sweep folder (runs/sweeps/<name>) one per trial. `--plot` draws
the metric against steps for every run and, for a sweep, against each searched parameter
(on a log axis where the sweep's spec sampled it on a log scale). In the table and
markdown formats a long value (a list, a path, a crashed run's message) is cut to
`table.CELL_WIDTH` characters with an ellipsis, so a line stays as wide as its columns;
csv keeps every value whole.

It reads only what runs write anyway (run_record.py): the checkpoint's provenance and
callback states, the saved config, the CSV logger's metrics.csv; runs made by older
versions of the project compare too. A run whose config or metrics.csv cannot be read (a
damaged file) is skipped with a one-line warning naming the file; the others are shown.
"""

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ...platform.paths import RunLayout, project_path
from ...platform.project import program
from ...platform.refusal import Refusal
from ...run.run_record import RunRecord, UnreadableRun, is_run, read_run

MAX_DEPTH = 3  # sweep folder / trial / seed


def compare(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog=f"{program()} compare",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    parser.add_argument("folders", nargs="+", type=Path, help="run roots or sweep folders")
    parser.add_argument("--plot", type=Path, help="write a PNG of the metric per run")
    parser.add_argument("--format", choices=("table", "csv", "markdown"), default="table")
    args = parser.parse_args(list(argv))
    from .table import TIME_COLUMNS, render, rows

    roots = [root for folder in args.folders for root in _runs_in(_existing(folder))]
    runs = list(dict.fromkeys(roots))
    records: list[RunRecord] = []
    for root in runs:
        try:
            records.append(read_run(root))
        except UnreadableRun as error:  # one damaged run does not hide the others
            print(f"warning: skipped {root}: {error}", file=sys.stderr)
    if not records:
        raise Refusal(
            f"none of the {len(runs)} runs could be read (each is named above). "
            "Remove or repair the files named, or pass other runs."
        )
    base = Path(os.path.commonpath([record.root for record in records]))
    if len(records) == 1:
        base = base.parent
    table, monitor, mode = rows(records, base)
    monitors = sorted({str(run.monitor[0]) for run in records})
    if len(monitors) > 1:
        print(
            f"note: the runs monitor different metrics ({', '.join(monitors)}); "
            f"rows are compared by {monitor}",
            file=sys.stderr,
        )
    print(render(table, monitor, mode, args.format), end="")
    if args.format == "table":
        print(f"note: {TIME_COLUMNS}", file=sys.stderr)
    if args.plot:
        from .plot import log_sampled, write_plot

        logs = log_sampled([_existing(folder) for folder in args.folders])
        for note in write_plot(table, monitor, mode, args.plot, logs):
            print(f"note: {note}", file=sys.stderr)
        print(f"wrote {args.plot}", file=sys.stderr)
    return 0


def _existing(folder: Path) -> Path:
    """The folder as given, else under the project root (where `fit` puts relative roots)."""
    for candidate in (folder, project_path(folder)):
        if candidate.is_dir():
            return candidate.resolve()
    raise Refusal(
        f"{folder} is not a folder (looked in the working directory and the project "
        "root). Give a run folder (runs/<experiment>/<date>_<time>), an experiment "
        "folder (runs/<experiment>) or a sweep folder (runs/sweeps/<name>)."
    )


def _runs_in(folder: Path, depth: int = 0) -> list[Path]:
    """The runs in `folder`: itself, and the runs below it (a `runs/default` from before
    run folders is a run that later runs of its experiment are made in)."""
    run = is_run(folder)
    found = [folder] if run else []
    if depth < MAX_DEPTH:
        children = sorted(path for path in folder.iterdir() if path.is_dir())
        for child in children:
            if not (run and _is_output_of_a_run(child)):
                found += _runs_in(child, depth + 1)
    if depth == 0 and not found:
        raise Refusal(
            f"{folder} is not a run folder: neither it nor its subfolders hold "
            "checkpoints/, command.txt or <logger>/version_N/metrics.csv. Give a run folder "
            "(runs/<experiment>/<date>_<time>), an experiment folder (runs/<experiment>) or "
            "a sweep folder (runs/sweeps/<name>)."
        )
    return found


def _is_output_of_a_run(folder: Path) -> bool:
    """A run's own output folder (checkpoints, predictions, a logger's `<name>/version_N`):
    no run is below it, so it is not searched (2,000 runs hold some 8,000 of them)."""
    layout = RunLayout(folder.parent)
    if folder in (layout.checkpoints, layout.predictions):
        return True
    return any(child.name.startswith("version_") for child in folder.iterdir())
