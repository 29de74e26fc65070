"""Checks of the project's own code and repository (DR011-DR014).

The source checks read Python's syntax tree, not text, so a comment or docstring that
mentions `.cuda()` is not a finding. They scan the user's code (`src/`, `scripts/`), not the
tests, which may target a GPU on purpose. A line ending in `# doctor: ignore[DR011]` is
exempt from that check. These three are the static ones pre-commit runs on staged files.
"""

import ast
import subprocess
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path

from .context import Context
from .registry import Result, check, failed, passed, warned

SCANNED = ("src", "scripts")
HOST_SYNCS = ("item", "cpu", "numpy", "tolist")
HOT_PATHS = ("training_step",)

Finding = tuple[ast.expr, str]  # node (a call or an argument: it has a line), what it is


def _is_cuda(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("cuda")
    )


def _call_name(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def hard_coded_cuda(tree: ast.AST) -> Iterator[Finding]:
    """`x.cuda()`, `x.to("cuda")`, `torch.device("cuda")`, `device="cuda"`."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = _call_name(node)
        if name == "cuda" and isinstance(node.func, ast.Attribute):
            yield node, ".cuda()"
        elif name in ("to", "device") and node.args and _is_cuda(node.args[0]):
            yield node, f'{name}("cuda")'
        elif any(k.arg == "device" and _is_cuda(k.value) for k in node.keywords):
            yield node, 'device="cuda"'


def manual_process_group(tree: ast.AST) -> Iterator[Finding]:
    """Process-group set-up that Lightning's strategies already do, once, per rank."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name in ("init_process_group", "set_device", "DistributedDataParallel"):
                yield node, f"{name}()"


def host_sync_in_training_step(tree: ast.AST) -> Iterator[Finding]:
    """`.item()`, `.cpu()`... inside training_step: each waits for the device every step."""
    for function in ast.walk(tree):
        if (
            isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            and function.name in HOT_PATHS
        ):
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and not node.args
                    and node.func.attr in HOST_SYNCS
                ):
                    yield node, f".{node.func.attr}() in {function.name}"


@lru_cache(maxsize=512)
def _parse(path: Path, mtime_ns: int) -> tuple[ast.AST | None, tuple[str, ...]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        return ast.parse(text, filename=str(path)), tuple(text.splitlines())
    except SyntaxError:
        return None, ()


def _sources(context: Context) -> list[Path]:
    if context.files is not None:
        return [path for path in context.files if path.suffix == ".py" and path.is_file()]
    return sorted(p for folder in SCANNED for p in (context.root / folder).rglob("*.py"))


def _scan(
    context: Context, check_id: str, finder: Callable[[ast.AST], Iterator[Finding]]
) -> list[str]:
    found = []
    for path in _sources(context):
        tree, lines = _parse(path, path.stat().st_mtime_ns)
        if tree is None:
            continue  # ruff reports syntax errors better than doctor could
        shown = path.relative_to(context.root) if path.is_relative_to(context.root) else path
        for node, what in finder(tree):
            if f"doctor: ignore[{check_id}]" not in lines[node.lineno - 1]:
                found.append(f"{shown.as_posix()}:{node.lineno}: {what}")
    return found


def _source_result(found: list[str], detail: str, fix: str, clean: str) -> Result:
    if not found:
        return passed(clean)
    shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
    return failed(f"{detail}: {shown}", fix)


@check("DR011", "no-hardcoded-cuda", static=True)
def no_hardcoded_cuda(context: Context) -> Result:
    return _source_result(
        _scan(context, "DR011", hard_coded_cuda),
        "hard-coded CUDA device",
        "let Lightning place modules and batches (use `self.device` or `tensor.to(other)` for "
        "new tensors); the code then runs on CPU, MPS and every rank's own GPU",
        "no hard-coded CUDA device in src/ or scripts/",
    )


@check("DR012", "no-manual-process-group", static=True)
def no_manual_process_group(context: Context) -> Result:
    return _source_result(
        _scan(context, "DR012", manual_process_group),
        "manual distributed set-up",
        "remove it: the Trainer's strategy initialises the process group once, calls set_device "
        "right after, and wraps the model (`--trainer.strategy ddp`)",
        "distributed set-up is left to Lightning's strategy",
    )


@check("DR013", "no-host-sync-in-training-step", static=True)
def no_host_sync_in_training_step(context: Context) -> Result:
    return _source_result(
        _scan(context, "DR013", host_sync_in_training_step),
        "host sync in the hot path",
        "log tensors with `self.log(...)` (Lightning reads them at log_every_n_steps) and keep "
        "`.item()` / `.cpu()` for epoch ends",
        "no .item() / .cpu() in training_step",
    )


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`git -C root ARGS`; without git, exit status 127 (a shell's "command not found")."""
    command = ["git", "-C", str(root), *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        return subprocess.CompletedProcess(command, 127, "", "")


@check("DR014", "git-clean")
def git_clean(context: Context) -> Result:
    """Warn only: an uncommitted experiment is fine, but its checkpoints' commit is not its code."""
    inside = _git(context.root, "rev-parse", "--is-inside-work-tree")
    if inside.returncode != 0:
        return warned(
            f"{context.root} is not in a git repository: checkpoints will record no commit",
            "`git init && git add -A && git commit -m 'Start'`",
        )
    changes = _git(context.root, "status", "--porcelain").stdout.splitlines()
    if changes:
        return warned(
            f"{len(changes)} uncommitted change(s) (e.g. {changes[0].strip()}): the commit a "
            "checkpoint records would not be the code that made it",
            "commit (or stash) before a run you want to keep",
        )
    head = _git(context.root, "rev-parse", "--short", "HEAD").stdout.strip()
    return passed(f"clean at {head}")
