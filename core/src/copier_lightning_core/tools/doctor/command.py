"""`doctor`: check a run's config, this machine and the code before spending compute.

    python -m <package> doctor                                   # the default run
    python -m <package> doctor --config configs/presets/ddp.yaml # same flags as fit
    python -m <package> doctor --try --config configs/presets/compile.yaml  # and run 2 steps
    python -m copier_lightning_core.tools.doctor --static [FILE ...]  # source checks only (pre-commit)

Prints one row per check (ID, pass / warn / fail, what was found, the fix) and exits 1 when
any check fails. Nothing is trained or generated: the config is parsed, and Lightning
resolves its trainer settings as for `fit` (a Trainer built without model, data, loggers,
processes or a process group: run/lightning_plan.py).

--try: what only a run can tell (does dynamo compile your forward, does your module run
at a preset's precision) is then tried, once no check fails: `fit` for 2 training and 2
validation batches (fast_dev_run: no loggers, no checkpoints) in a fresh process and a
temporary folder, once per preset (`--config` file) with every other flag, and with all of
them together when there are several; a `--config` that names your model or data is in
every trial. One row per trial: pass, or the first line of what
stopped it; exits 1 when a trial fails. Each costs a process start, the data's setup and,
with a compile preset, the compile (seconds to minutes).
"""

from __future__ import annotations  # LightningCLI's types, imported only for the checker

import dataclasses
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from ...platform.project import project_package, project_root
from ...platform.refusal import Refusal
from ...run.resolve import resolve_config
from . import config_checks, source_checks  # noqa: F401  (importing registers the checks)
from .context import Context, probe_machine
from .registry import CHECKS, FAIL, PASS, WARN, Check, Result
from .trial import STEPS, trials, try_fit


def usage() -> str:
    return (__doc__ or "").replace("<package>", project_package())


def provenance_class() -> str:
    from ...checkpoints.provenance import CheckpointProvenance

    return f"{CheckpointProvenance.__module__}.{CheckpointProvenance.__qualname__}"


def run_checks(context: Context, checks: Iterable[Check]) -> dict[str, Result]:
    return {check.id: check.run(context) for check in checks}


def format_table(results: dict[str, Result]) -> str:
    width = max(len(CHECKS[check_id].name) for check_id in results)
    lines = [f"{'ID':<6} {'check':<{width}} {'status':<6} detail / fix"]
    for check_id, result in results.items():
        lines.append(
            f"{check_id:<6} {CHECKS[check_id].name:<{width}} {result.status:<6} {result.detail}"
        )
        if result.fix:
            lines.append(f"{'':<6} {'':<{width}} {'':<6} fix: {result.fix}")
    counts = {
        status: sum(r.status == status for r in results.values()) for status in (PASS, WARN, FAIL)
    }
    lines.append(f"\n{counts[PASS]} pass, {counts[WARN]} warn, {counts[FAIL]} fail")
    return "\n".join(lines)


def run_trials(argv: Sequence[str]) -> bool:
    """`fit` a few steps per config (trial.py), printing each row as it ends; True: none failed."""
    runs = trials(argv)
    width = max(map(len, runs))
    print(f"\nTried: fit, {STEPS} steps per config, in a fresh process and a temporary folder")
    all_passed = True
    for name, flags in runs.items():
        result = try_fit(flags)
        print(f"{name:<{width}} {result.status:<6} {result.detail}", flush=True)
        if result.fix:
            print(f"{'':<{width}} {'':<6} fix: {result.fix}", flush=True)
        all_passed &= result.status != FAIL  # a warning trains: named, not failed
    return all_passed


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if "-h" in argv or "--help" in argv:
        print(usage())
        return 0
    if "--static" in argv:
        results = static_results([arg for arg in argv if arg != "--static"])
        print(format_table(results))
        return 1 if any(result.status == FAIL for result in results.values()) else 0
    fit_args = [arg for arg in argv if arg != "--try"]
    results = config_results(fit_args)
    print(format_table(results))
    failing = any(result.status == FAIL for result in results.values())
    if "--try" in argv and failing:
        print("\nNot tried (--try): fix the failing checks first.")
    elif "--try" in argv:
        return 0 if run_trials(fit_args) else 1
    return 1 if failing else 0


def static_results(files: Sequence[str]) -> dict[str, Result]:
    """The source checks, on these files (all of the project's when none is named)."""
    if any(arg.startswith("-") for arg in files):
        raise Refusal(
            f"`doctor --static` takes file names only, got {list(files)}. The static "
            "mode reads sources without the config; drop --static to check a run's flags."
        )
    context = Context(
        config={},
        machine=None,
        env=os.environ,
        root=project_root(),
        files=tuple(Path(name) for name in files) if files else None,
    )
    return run_checks(context, (c for c in CHECKS.values() if c.static))


def config_results(fit_args: Sequence[str]) -> dict[str, Result]:
    """Every check, on the config these flags of `fit` resolve to and on this machine."""
    context = Context(
        config=resolve_config(fit_args),
        machine=None,
        env=os.environ,
        root=project_root(),
        provenance_class=provenance_class(),
    )
    compiles = bool(context.callbacks_named("TorchCompile"))
    machine = probe_machine(with_compiler=compiles)
    context = dataclasses.replace(context, machine=machine, here=True)
    return run_checks(context, CHECKS.values())
