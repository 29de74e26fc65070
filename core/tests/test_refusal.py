"""One way to refuse: `Refusal`, raised where the problem is found, one paragraph, status 1."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import copier_lightning_core
from copier_lightning_core import Refusal, cli
from harness import PROJECT

LIBRARY = Path(copier_lightning_core.__file__).parent


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


def test_a_refusal_is_a_system_exit_whose_code_is_its_error_paragraphs():
    one = Refusal("--data.batch_size 0: a batch holds at least one sample.")
    assert isinstance(one, SystemExit)
    assert one.code == "error: --data.batch_size 0: a batch holds at least one sample."
    assert one.message == "--data.batch_size 0: a batch holds at least one sample."
    two = Refusal("first problem.", "second problem.")
    assert two.code == "error: first problem.\n\nerror: second problem."


def test_a_refusal_deep_in_a_command_ends_the_process_with_its_paragraph_and_status_1(tmp_path):
    missing = str(tmp_path / "missing.ckpt")
    with pytest.raises(Refusal) as refused:  # in this process: raised through main
        cli.main(["inspect-ckpt", missing])
    done = subprocess.run(
        [sys.executable, "-m", PROJECT, "inspect-ckpt", missing],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stderr, done.stdout) == (1, f"{refused.value.code}\n", "")
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
