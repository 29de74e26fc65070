"""The command line: `python -m <package> <command> [options]`, dispatched by name.

Trainer commands (fit, validate, test, predict) go to `ProjectCLI` (lightning_cli.py):
LightningCLI only knows Trainer methods as subcommands. The project's own tools go to
their own small parsers. `--help` (or no command) lists both kinds, one line each.
"""

import os
import sys
from collections.abc import Callable, Sequence

import torch

from .checkpoints.consolidate import consolidate_checkpoint
from .platform.project import program, serve
from .platform.refusal import Refusal, refusals_exit
from .platform.signals import interrupt_exit_codes
from .run.lightning_cli import TRAINER_COMMANDS, ProjectCLI
from .tools.compare import compare
from .tools.determinism import verify_determinism
from .tools.doctor import main as doctor
from .tools.export import export
from .tools.inspect_ckpt import inspect_checkpoint
from .tools.sweep import sweep
from .tools.tune import tune

TOOLS: dict[str, Callable[[Sequence[str]], int]] = {
    "doctor": doctor,
    "inspect-ckpt": inspect_checkpoint,
    "verify-determinism": verify_determinism,
    "export": export,
    "consolidate-ckpt": consolidate_checkpoint,
    "tune": tune,
    "sweep": sweep,
    "compare": compare,
}
SUMMARIES = {
    "fit": "train, validating every epoch (--ckpt_path last resumes the run)",
    "validate": "run the validation loop on a checkpoint (--ckpt_path best|last|FILE)",
    "test": "run the test loop on a checkpoint (--ckpt_path best|last|FILE)",
    "predict": "write predictions of a checkpoint to <root>/predictions/ (--dataloader)",
    "doctor": "check the config, this machine and the code before spending compute",
    "inspect-ckpt": "print what a checkpoint holds (--config: the run's resolved config)",
    "verify-determinism": "train twice in fresh processes and compare every tensor",
    "export": "write a checkpoint's weights to safetensors and its network to ONNX, verified",
    "consolidate-ckpt": "merge a sharded (FSDP2) checkpoint folder into one file for one process",
    "tune": "measure batch size, loader workers, precision and lr here; write a config",
    "sweep": "search hyperparameters with Optuna, each trial a fit; rerun to resume (local|slurm)",
    "compare": "table (and --plot) of runs or a sweep: differing config, best metric, commit",
}


def usage() -> str:
    """Every command with its one line, trainer commands first."""
    width = max(map(len, SUMMARIES)) + 2
    lines = [f"usage: {program()} <command> [options]", "", "Trainer commands (LightningCLI):"]
    lines += [f"  {name:<{width}}{SUMMARIES[name]}" for name in TRAINER_COMMANDS]
    lines += ["", "Tools:"]
    lines += [f"  {name:<{width}}{SUMMARIES[name]}" for name in TOOLS]
    lines += ["", f"`{program()} <command> --help` lists the options of one command."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None, project: str | None = None) -> int:
    """Dispatch to a project tool by name, else to LightningCLI.

    `project` is the package whose `__main__.py` calls this (`project=__package__`): the
    one whose configs, classes and version the commands use (platform/project.py). A
    Refusal from any command ends it here: its paragraph on stderr, exit status 1.
    """
    with refusals_exit():
        if project is not None:
            serve(project)
        words = list(sys.argv[1:] if argv is None else argv)
        if not words or words[0] in ("-h", "--help"):
            print(usage())
            return 0 if words else 2
        if words[0] in TOOLS:
            return _run_tool(TOOLS[words[0]], words[1:])
        if not words[0].startswith("-") and words[0] not in TRAINER_COMMANDS:
            commands = ", ".join([*TRAINER_COMMANDS, *TOOLS])
            raise Refusal(f"unknown command {words[0]!r}. Commands: {commands}.")
        # From the shell, LightningCLI reads sys.argv itself: passing it as `args=` too makes
        # Lightning warn on every command that both were given.
        with interrupt_exit_codes():  # 143 after SIGTERM, 130 after Ctrl-C (signals.py)
            ProjectCLI(args=None if argv is None else words)
        _close_process_group()
        return 0


def _run_tool(tool: Callable[[Sequence[str]], int], args: Sequence[str]) -> int:
    """A tool, whose output may go to a reader that stops early (`inspect-ckpt X | head`).

    Python ignores SIGPIPE, so writing to a closed pipe raises BrokenPipeError: a
    traceback, or at exit "Exception ignored ... BrokenPipeError", for output the reader
    did not want. As Python's documentation advises, stdout then goes to devnull, so the
    final flush does not fail again; the exit status is a shell's for SIGPIPE, 141.
    """
    try:
        status = tool(args)
        sys.stdout.flush()  # a closed pipe surfaces here at the latest, not at exit
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + 13  # 13: SIGPIPE's number (signal.SIGPIPE does not exist on Windows)
    return status


def _close_process_group() -> None:
    """Shut down DDP's process group before the process exits.

    Lightning leaves it open; a process that exits with a live gloo group can abort at
    interpreter shutdown ("terminate called without an active exception", seen under
    torchrun), turning a finished run into a failed one.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        # Every rank reaches this point before any tears the group down: a rank that
        # destroys it while another still talks to it aborts the other one.
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
