"""The benchmarks run from one command and print their figures in the promised format.

One quick run of `benchmarks/report.py` (one short repetition of each benchmark) feeds
every test here. Timings are never asserted: a shared CI machine makes them noise. What
is asserted could fail: a benchmark that crashes, prints no ratio, or whose vanilla loop
no longer reproduces the generated `fit` step for step.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NUMBER = r"[0-9]+\.[0-9]{2}"


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> str:
    output = tmp_path_factory.mktemp("benchmarks") / "RESULTS.md"
    subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "report.py"), "--quick", "--output", output],
        cwd=REPO,
        check=True,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    return output.read_text()


def section(results: str, benchmark: str) -> list[str]:
    """The lines `benchmarks/<benchmark>.py` printed, as RESULTS.md quotes them."""
    found = re.search(
        rf"^## `python benchmarks/{benchmark}\.py`\n\n```text\n(.*?)\n```$",
        results,
        re.MULTILINE | re.DOTALL,
    )
    assert found, f"no section for {benchmark}.py in RESULTS.md:\n{results}"
    return found.group(1).splitlines()


def test_overhead_ends_with_both_ratios_and_equal_losses(results):
    lines = section(results, "overhead")
    for variant in ("(a) vanilla PyTorch loop", "(b) plain Lightning Trainer",
                    "(c) generated project's fit"):  # fmt: skip
        assert any(line.strip().startswith(variant) for line in lines), variant
    assert re.fullmatch(rf"template ratio: {NUMBER} \(generated fit / plain Lightning\)", lines[-2])
    # Same seed, data order and optimizer: the plain loop reproduces the generated fit.
    assert re.fullmatch(
        rf"overhead ratio: {NUMBER} \(generated fit / vanilla loop\), losses equal: yes",
        lines[-1],
    )
    # Each ratio with its spread over the paired repeats, next to the machine's load.
    for against, target in (("b", "1.03"), ("a", "1.10")):
        assert any(
            re.fullmatch(rf"ratio c / {against} \(target <= {target}\): median {NUMBER}.*", line)
            for line in lines
        ), against
    assert any(line.startswith("load average (1 min) before ") for line in lines)
    # And the ratios of each variant's fastest run, which need no pairing.
    assert any(
        re.fullmatch(rf"ratio of the fastest runs: c / b {NUMBER}\d, c / a {NUMBER}\d .*", line)
        for line in lines
    ), lines
    # What (c) ran with is read from the default config at run time, not a fixed list.
    ran_with = next(line for line in lines if line.startswith("(c) ran with: "))
    assert "ModelCheckpoint" in ran_with
    assert "CSVLogger" in ran_with


def test_startup_ends_with_its_ratio(results):
    lines = section(results, "startup")
    assert re.fullmatch(rf"startup ratio: {NUMBER} \(fit to first step / import lightning\)",
                        lines[-1])  # fmt: skip


def test_render_ends_with_copy_and_update_times(results):
    lines = section(results, "render")
    assert re.fullmatch(rf"render: copy {NUMBER} s \(target <= 3 s\), update {NUMBER} s", lines[-1])


def test_memory_ends_with_its_ratio_and_bytes_per_parameter(results):
    lines = section(results, "memory")
    for variant in ("(b) plain Lightning Trainer", "(c) generated project's fit"):
        assert any(line.strip().startswith(variant) for line in lines), variant
    assert any(
        re.fullmatch(r"ratio c / b \(target <= 1\.05\): median [0-9]\.[0-9]{3}, min-max .*", line)
        for line in lines
    ), lines
    assert re.fullmatch(
        rf"memory ratio: {NUMBER} \(generated fit / plain Lightning\), "
        r"-?[0-9]+\.[0-9] bytes per parameter",
        lines[-1],
    )


def test_results_record_the_run_and_check_every_figure(results):
    assert "Quick run" in results  # a quick run never passes for a real one
    for field in ("- date: ", "- template commit: ", "- CPU: ", "- memory: ", "- OS: ",
                  "- load average ", "- versions: Python "):  # fmt: skip
        assert field in results, field
    for package in ("torch", "lightning", "copier"):
        assert re.search(rf"\b{package} [0-9]", results), package
    rows = re.findall(r"^\| (.+?) \| (.+?) \| (.+?) \| (yes|\*\*no\*\*|-) \|$", results, re.M)
    assert [row[0].split(" ")[0] for row in rows] == [
        "template", "overhead", "instruction", "instruction", "losses", "startup", "copier",
        "copier", "memory", "memory",
    ]  # fmt: skip
    # A quick run counts no instructions (minutes under valgrind), and says so.
    assert [row[1] for row in rows if row[0].startswith("instruction")] == [
        "not measured (no valgrind, or --quick)"
    ] * 2


def test_the_data_recipes_benchmark_prints_each_recipes_ratio_and_worker_choice():
    """`data_recipes.py` (not in report.py: a by-hand measurement) runs and prints, for each
    recipe, the plain loop's rate, a ratio with its spread per worker count, and the count
    tune's rule picks."""
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "data_recipes.py"), "--quick", "--workers", "0"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "WANDB_MODE": "offline"},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    for recipe in ("files", "table", "bucket"):
        block = result.stdout.split(f"\n{recipe}: plain loop ", 1)[1].split("\n\n", 1)[0]
        assert re.match(r"[0-9]+ samples/s\n", block), block
        assert re.search(
            rf"fit, 0 workers: [0-9]+ samples/s, data wait [0-9]+\.[0-9]%; ratio fit / "
            rf"plain loop: median {NUMBER}",
            block,
        ), block
        assert re.search(r"tune's rule \(data wait under 5%\).*: 0 workers, ", block), block
