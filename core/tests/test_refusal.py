"""One way to refuse: `Refusal`, raised where the problem is found, one paragraph, status 1."""

import ast
import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from torch.utils.data import DataLoader

import copier_lightning_core
from copier_lightning_core import Refusal
from copier_lightning_core.checkpoints.load import load_checkpoint
from copier_lightning_core.platform.paths import RunLayout
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing import launch
from faulty_data import DAMAGED, DamagedSamples, RefuseAtStep, RefusingSetupData
from harness import FAST, FLAVOURS, PROJECT, let_go_of_loader_workers, refusal_of_main

LIBRARY = Path(copier_lightning_core.__file__).parent
PRESETS = project_root() / "configs" / "presets"
TESTS = Path(__file__).parent


def _is_main_guard(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`, the block a module runs only as a process's entry."""
    return isinstance(node, ast.If) and ast.unparse(node.test) == "__name__ == '__main__'"


def _is_text(node: ast.AST | None) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    )


def exits_of(source: str) -> list[str]:
    """Each `sys.exit(...)` outside a main guard, and each `SystemExit` given a message."""
    tree = ast.parse(source)
    entry = {id(n) for g in ast.walk(tree) if _is_main_guard(g) for n in ast.walk(g)}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        function = ast.unparse(node.func)
        exits = function == "sys.exit" and id(node) not in entry
        refuses = function == "SystemExit" and _is_text(node.args[0] if node.args else None)
        if exits or refuses:
            found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


def test_the_library_refuses_only_with_refusal_and_exits_only_at_an_entry_point():
    # A status (the signals' 130/143, a rank that lets rank 0 speak) may still be a
    # SystemExit; a message is always a Refusal, so it reads "error: ..." everywhere.
    found = {
        str(path.relative_to(LIBRARY)): exits
        for path in sorted(LIBRARY.rglob("*.py"))
        if (exits := exits_of(path.read_text(encoding="utf-8")))
    }
    assert found == {}


def test_the_scan_finds_the_exits_it_forbids():
    source = (
        "import sys\n"
        "def f(why):\n"
        "    sys.exit(f'error: {why}')\n"
        "    raise SystemExit('error: no')\n"
        "    raise SystemExit(130)\n"
        "if __name__ == '__main__':\n"
        "    sys.exit(f(1))\n"
    )
    assert [found.split(":")[0] for found in exits_of(source)] == ["line 3", "line 4"]


def test_a_refusal_is_an_exception_whose_text_is_its_error_paragraphs():
    one = Refusal("--data.batch_size 0: a batch holds at least one sample.")
    assert isinstance(one, Exception) and not isinstance(one, SystemExit)
    assert str(one) == "error: --data.batch_size 0: a batch holds at least one sample."
    assert one.message == "--data.batch_size 0: a batch holds at least one sample."
    two = Refusal("first problem.", "second problem.")
    assert str(two) == "error: first problem.\n\nerror: second problem."
    assert two.message == "first problem.\n\nsecond problem."
    # As a spawned process or a sweep's SLURM job hands it back: pickled, the same paragraphs.
    assert str(pickle.loads(pickle.dumps(two))) == str(two)


def test_a_library_call_on_a_bad_checkpoint_raises_a_refusal_its_caller_catches(tmp_path):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not the zip archive torch.save writes")
    caught = []
    for path in (corrupt, tmp_path / "missing.ckpt"):
        try:
            load_checkpoint(path)
        except Exception as error:  # as a notebook's cell, or a script, catches a call's error
            caught.append(error)
    # The caller goes on: a SystemExit would have passed `except Exception` and ended it.
    assert [type(error) for error in caught] == [Refusal, Refusal]
    assert str(caught[0]).startswith(f"error: {corrupt} is not a checkpoint: "), caught[0]
    assert "missing.ckpt does not exist" in caught[1].message


def test_a_refusal_deep_in_a_command_ends_the_process_with_its_paragraph_and_status_1(
    tmp_path, capsys
):
    missing = str(tmp_path / "missing.ckpt")
    paragraph = refusal_of_main(capsys, "inspect-ckpt", missing)  # in this process
    done = launch.run([sys.executable, "-m", PROJECT, "inspect-ckpt", missing], timeout=300)
    assert (done.returncode, done.stderr, done.stdout) == (1, f"{paragraph}\n", "")
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1


def test_a_trainer_command_refused_in_its_own_process_prints_one_paragraph_and_exits_1(
    tmp_path,
):
    corrupt = tmp_path / "corrupt.ckpt"
    corrupt.write_bytes(b"not the zip archive torch.save writes")
    root = tmp_path / "run"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            PROJECT,
            "validate",
            f"--ckpt_path={corrupt}",
            f"--trainer.default_root_dir={root}",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {corrupt} is not a checkpoint: ")
    assert done.stderr.endswith(f"{errors[0]}\n")  # the paragraph is one line, and the last
    assert not root.exists()


def test_a_refusal_raised_in_a_loader_worker_reaches_the_main_process_as_raised():
    """torch raises a worker's exception in the main process as `type(text)`, the text
    holding the worker's traceback: the refusal there says what the worker's said, no more."""
    loader = DataLoader(DamagedSamples(), batch_size=4, num_workers=1)
    with pytest.raises(Refusal) as refused:
        next(iter(loader))
    assert str(refused.value) == f"error: {DAMAGED.format(0)}"
    assert refused.value.message == DAMAGED.format(0)
    let_go_of_loader_workers(refused)


TABULAR = [*FAST, *FLAVOURS["tabular"], "--test_after_fit=false"]


def test_a_refusal_in_a_loader_worker_ends_fit_with_its_one_paragraph(tmp_path, capsys):
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"
    paragraph = refusal_of_main(
        capsys, "fit", *TABULAR, "--data=faulty_data.DamagedSamplesData", root
    )
    assert paragraph == f"error: {DAMAGED.format(0)}"


def test_a_refusal_in_a_datamodules_setup_ends_fit_and_leaves_no_run_folder(tmp_path, capsys):
    root = tmp_path / "run"
    paragraph = refusal_of_main(
        capsys,
        "fit",
        *TABULAR,
        "--data=faulty_data.RefusingSetupData",
        f"--trainer.default_root_dir={root}",
    )
    assert paragraph == f"error: {RefusingSetupData.SAYS}"
    assert not root.exists()  # stopped before its first batch: as if never started


def test_a_refusal_mid_fit_ends_it_as_lightning_ends_a_failed_run_and_keeps_the_folder(
    tmp_path, capsys
):
    root = tmp_path / "run"
    refuse = json.dumps({"class_path": "faulty_data.RefuseAtStep", "init_args": {"step": 2}})
    paragraph = refusal_of_main(
        capsys,
        "fit",
        *TABULAR,
        f"--trainer.default_root_dir={root}",
        f"--trainer.callbacks+={refuse}",
    )
    assert paragraph == f"error: {RefuseAtStep.SAYS.format(2)}"
    # The run did work: its folder stays, its record says how it ended.
    command = RunLayout(root).command.read_text(encoding="utf-8")
    assert command.rstrip().endswith("(Refusal)"), command


def test_every_ddp_process_that_refuses_prints_the_paragraph_and_the_run_exits_1(tmp_path):
    root = tmp_path / "run"
    args = [sys.executable, "-m", PROJECT, "fit", f"--config={PRESETS / 'ddp.yaml'}", *TABULAR]
    args += ["--data=faulty_data.RefusingSetupData", "--trainer.devices=2"]
    args += ["--trainer.logger=false", f"--trainer.default_root_dir={root}"]
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}  # faulty_data, importable in both processes
    done = launch.run(args, env=env, timeout=300)
    assert done.returncode == 1, done.stderr[-4000:]
    assert "Traceback" not in done.stderr, done.stderr[-4000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    # The launching process and the one it started (its own `python -m`), each once.
    assert errors == [f"error: {RefusingSetupData.SAYS}"] * 2, done.stderr[-4000:]
