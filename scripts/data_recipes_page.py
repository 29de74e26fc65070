"""Write docs/data-recipes.md from a run of the library's data recipe tests.

    bash scripts/demo.sh                              # once: a rendered project, demo/
    .venv/bin/python scripts/data_recipes_page.py     # runs the tests there -> the page

The tests (core/tests/test_data_recipes.py) run in the demo project, as the template's
suite runs them in a render; their JUnit report gives each test's outcome and time, and
the memory test's figures (its recorded properties). This script only formats that
report: the page says what a run did, never more. `--junit FILE` formats an existing
report instead of running the tests; `--output FILE` writes elsewhere.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ElementTree
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "core" / "tests" / "test_data_recipes.py"
PAGE = REPO / "docs" / "data-recipes.md"

INTRO = """\
# Data recipes

Written by `python scripts/data_recipes_page.py` from a run of the library's tests
(`core/tests/test_data_recipes.py`); do not edit by hand: rerun it.

The library's building blocks for data as users have it, each behind a plain
`torch.utils.data.DataLoader` in a DataModule of a few lines (`core/tests/recipes.py`), as
the generated README's "Data as you have it" shows:

- **files on disk**: `FileSamples`, `.npy` arrays in class folders (`<root>/<class>/<file>`)
  decoded in the loader workers, split by a seed, 240 files;
- **table / shards**: `ParquetRows`, Parquet files read a row group at a time, block-shuffled
  each epoch, an equal disjoint part per DDP rank and loader worker; 3 shards of 4 row
  groups of 40 rows, from a folder and from a bucket of an S3-compatible server (moto's, on
  localhost); the memory rows use 64 KiB rows and 1 MiB files.

A mark is a test that ran and passed in the run below; a cross, one that failed; a dash,
one that did not run.
"""

# test function -> (recipe, what it proves): the rows of the page, in order.
ROWS = {
    "test_a_run_killed_mid_epoch_resumes_bit_exactly": (
        "kill -9 mid-epoch, resumed: last checkpoint equal to an uninterrupted run's"
    ),
    "test_a_run_streaming_from_a_bucket_killed_mid_epoch_resumes_bit_exactly": (
        "the same, streaming from the bucket"
    ),
    "test_ddp_ranks_streaming_from_a_bucket_see_disjoint_rows_covering_the_epoch": (
        "DDP and FSDP2 on 2 CPU processes streaming from the bucket: disjoint rows covering the epoch"
    ),
    "test_a_loader_restored_mid_epoch_gives_exactly_the_rows_left": (
        "a StatefulDataLoader restored mid-epoch gives exactly the rows left, then the next epoch"
    ),
    "test_ddp_ranks_see_disjoint_samples_covering_the_epoch": (
        "DDP and FSDP2 on 2 CPU processes: disjoint samples per rank, covering the epoch"
    ),
    "test_ranks_and_workers_read_disjoint_equal_parts_covering_all_but_the_remainder": (
        "ranks x workers: disjoint equal parts, all rows but the remainder"
    ),
    "test_told_its_batch_size_a_loaders_length_is_the_batches_it_gives": (
        "told its batch size, len(loader) is the batches given (Lightning prefetches none)"
    ),
    "test_each_row_group_is_read_once_an_epoch_though_batches_cut_through_it": (
        "each row group read once an epoch"
    ),
    "test_one_table_file_is_a_source_as_a_folder_is": ("one table file is a source as a folder is"),
    "test_each_epoch_reads_a_new_block_shuffled_order_and_unshuffled_reads_in_file_order": (
        "a new block-shuffled order each epoch; unshuffled, file order"
    ),
    "test_shards_in_a_bucket_read_as_from_a_folder": (
        "shards in a bucket give the folder's rows, 2 workers in one process's order"
    ),
    "test_data_four_times_the_memory_limit_trains_in_the_memory_of_a_small_set": (
        "data 4 times a memory limit (a small run's peak + 25 %) trains under it"
    ),
    "test_a_truncated_shard_is_named_before_any_row_is_read": (
        "a truncated shard: one paragraph naming it, before any row is read"
    ),
    "test_a_row_group_damaged_inside_is_named_when_it_is_read": (
        "a damaged row group: one paragraph naming file and row group, when read"
    ),
    "test_a_missing_source_and_an_unreachable_endpoint_are_one_paragraph": (
        "a missing folder, an unreachable endpoint: one paragraph each"
    ),
    "test_a_ddp_run_streaming_rows_killed_mid_epoch_resumes_bit_exactly": (
        "DDP on 2 CPU processes, kill -9 mid-epoch, resumed: equal to an uninterrupted DDP run"
    ),
    "test_a_column_the_files_lack_is_refused_naming_the_columns_they_have": (
        "a column the files lack: one paragraph naming the columns they have"
    ),
    "test_rows_hold_writable_arrays_that_become_tensors_without_a_warning": (
        "rows hold writable arrays: a transform's torch.from_numpy warns nothing"
    ),
    "test_a_checkpoint_loaded_on_changed_files_names_what_changed": (
        "a checkpoint loaded on changed files: a fit refused, an evaluation warned, naming what changed"
    ),
    "test_a_position_saved_for_other_row_groups_is_refused": (
        "a position saved for other row groups: refused, not resumed wrongly"
    ),
    "test_a_stream_with_a_position_but_no_length_is_named_as_a_skipped_batch": (
        "a stream with a position but no length: named as the batch a resume would skip"
    ),
    "test_doctor_try_names_a_train_loader_whose_position_a_checkpoint_cannot_hold": (
        "`doctor --try` names a train loader a checkpoint cannot hold the position of"
    ),
    "test_files_are_listed_by_class_folder_and_split_the_same_way_for_the_same_seed": (
        "files listed by class folder; the same split for the same seed; fingerprinted"
    ),
    "test_an_unreadable_or_missing_file_is_named_in_one_paragraph": (
        "an unreadable or missing file: one paragraph naming it (0 and 2 workers)"
    ),
}


def run_tests(junit: Path) -> None:
    demo = REPO / "demo"
    if not (demo / "pyproject.toml").exists():
        sys.exit("error: no demo/ project: run `bash scripts/demo.sh` first, then this again.")
    settings = ["-c", str(REPO / "core" / "pyproject.toml"), "--rootdir", str(REPO / "core")]
    subprocess.run(
        [sys.executable, "-m", "pytest", *settings, "-p", "no:cacheprovider", "-q",
         f"--junitxml={junit}", str(TESTS)],
        cwd=demo,
        env={**os.environ, "WANDB_MODE": "offline"},
        check=False,
    )  # fmt: skip


def outcomes(junit: Path) -> dict[str, list[tuple[str, str, float, dict[str, str]]]]:
    """test function -> [(parameters, mark, seconds, recorded properties)]."""
    found: dict[str, list[tuple[str, str, float, dict[str, str]]]] = {}
    for case in ElementTree.parse(junit).iter("testcase"):
        name, _, parameters = case.get("name", "").partition("[")
        failed = case.find("failure") is not None or case.find("error") is not None
        mark = "-" if case.find("skipped") is not None else ("✗" if failed else "✓")
        recorded = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        found.setdefault(name, []).append(
            (parameters.rstrip("]"), mark, float(case.get("time", 0)), recorded)
        )
    return found


def page(found: dict[str, list[tuple[str, str, float, dict[str, str]]]]) -> str:
    unknown = sorted(set(found) - set(ROWS))
    if unknown:
        sys.exit(f"error: tests the page does not list (add them to ROWS): {unknown}")
    lines = [INTRO, "| what it proves | cases | seconds |", "|---|---|---|"]
    for name, proves in ROWS.items():
        cases = found.get(name, [])
        shown = " ".join(f"{mark} {params}".strip() for params, mark, _, _ in cases) or "-"
        seconds = sum(time for _, _, time, _ in cases)
        lines.append(f"| {proves} | {shown} | {seconds:.1f} |")
        for _, _, _, recorded in cases:
            if recorded:
                figures = ", ".join(f"{key} {value}" for key, value in recorded.items())
                lines.append(f"| ... measured | {figures} | |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--junit", type=Path, help="format this JUnit report instead")
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        junit = args.junit or Path(scratch) / "data-recipes.xml"
        if args.junit is None:
            run_tests(junit)
        if not junit.exists():
            sys.exit("error: the tests wrote no report (their output above says why).")
        args.output.write_text(page(outcomes(junit)))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
