"""Share of the example's training loop spent inside the health callbacks, in one fit.

    .venv/bin/python benchmarks/health_hook_share.py --project PATH [--max_epochs 1]

A ratio of two times measured in the same run, so a busy shared machine slows both
alike: unlike on/off wall times (health_overhead.py), it resolves a 1 % overhead there.
Every hook of the library's health callbacks (`copier_lightning_core.callbacks.health`),
and the guard's optimizer step hooks, is wrapped with a clock; printed per callback and in
total, over the loop's wall time.
It misses only indirect costs (e.g. memory traffic slowing the step that follows).
"""

import argparse
import functools
import logging
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import serve
from lightning.pytorch import Callback

from scaffold import package_name

HOOK_PREFIXES = ("on_", "setup", "teardown", "_before_step", "_after_step")
HEALTH = "copier_lightning_core.callbacks.health"  # the callbacks clocked: their modules


class LoopTimer(Callback):
    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter()

    def on_train_end(self, trainer, pl_module) -> None:
        self.seconds = time.perf_counter() - self.start


def clock(callback: Callback, spent: Counter) -> None:
    """Wrap the callback's own hook methods (before Lightning or torch binds them)."""
    name = type(callback).__name__
    for attr in dir(type(callback)):
        if attr.startswith(HOOK_PREFIXES) and attr in vars(type(callback)):
            method = getattr(callback, attr)

            @functools.wraps(method)
            def timed(*args, _method=method, **kwargs):
                start = time.perf_counter()
                try:
                    return _method(*args, **kwargs)
                finally:
                    spent[name] += time.perf_counter() - start

            setattr(callback, attr, timed)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True, help="a rendered project")
    parser.add_argument("--max_epochs", type=int, default=1)
    options = parser.parse_args()
    sys.argv = sys.argv[:1]
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")
    package = package_name(options.project)
    sys.path.insert(0, str(options.project / "src"))
    serve(package)  # the library's CLI reads this project's configs
    workdir = Path(tempfile.mkdtemp(prefix="health-share-"))
    spent: Counter = Counter()
    loop = LoopTimer()

    class ClockedCLI(ProjectCLI):
        def instantiate_trainer(self, **kwargs):
            trainer = super().instantiate_trainer(**kwargs)
            for callback in trainer.callbacks:
                if type(callback).__module__.startswith(HEALTH):
                    clock(callback, spent)
            trainer.callbacks.append(loop)
            return trainer

    ClockedCLI(
        args=[
            "fit",
            f"--trainer.default_root_dir={workdir / 'run'}",
            f"--data.data_dir={workdir / 'data'}",
            f"--trainer.max_epochs={options.max_epochs}",
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--test_after_fit=false",
        ]
    )
    for name, seconds in spent.most_common():
        print(f"{name:<18} {seconds:8.3f} s  {seconds / loop.seconds:7.2%} of the loop")
    total = sum(spent.values())
    print(f"{'all health':<18} {total:8.3f} s  {total / loop.seconds:7.2%} of {loop.seconds:.1f} s")


if __name__ == "__main__":
    main()
