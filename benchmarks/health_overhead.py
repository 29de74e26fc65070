"""Time of the example's default fit with the health callbacks on vs. off, in one process.

    .venv/bin/python benchmarks/health_overhead.py [--repeats 5] [--project PATH]

Renders this checkout with the default answers (or uses `--project`, a rendered project
whose dependencies are installed), generates the example data once, runs one untimed
warm-up fit, then alternates fits with and without the library's health callbacks
(`copier_lightning_core.callbacks.health`) so that drifts of a shared machine hit both
alike. Prints each time (the whole command, and the training loop alone), the medians
and their ratio (on / off).
"""

import argparse
import logging
import shutil
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import serve
from lightning.pytorch import Callback

from scaffold import package_name, snapshot_template
from scaffold import render as scaffold_render

HEALTH = "copier_lightning_core.callbacks.health"  # the callbacks switched off: their modules


def render(dest: Path) -> Path:
    """Render the working tree with the default answers (see scaffold.py for why a snapshot)."""
    return scaffold_render(snapshot_template(dest / "template"), dest / "project", "Bench Health")


class LoopTimer(Callback):
    """The training loop's own time, without building the objects or the data: wall
    time, and this process's CPU time, which other jobs on a shared machine disturb less."""

    def on_train_start(self, trainer, pl_module) -> None:
        self.start = time.perf_counter(), time.process_time()

    def on_train_end(self, trainer, pl_module) -> None:
        self.seconds = time.perf_counter() - self.start[0]
        self.cpu_seconds = time.process_time() - self.start[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed fits per setting")
    parser.add_argument("--project", type=Path, help="a rendered project (default: render one)")
    parser.add_argument(
        "--max_epochs", type=int, default=6, help="epochs per fit (default config: 6)"
    )
    options = parser.parse_args()
    sys.argv = sys.argv[:1]  # the CLI below gets its arguments from `args=`
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore")

    workdir = Path(tempfile.mkdtemp(prefix="health-bench-"))
    project = options.project or render(workdir)
    sys.path.insert(0, str(project / "src"))
    serve(package_name(project))  # the library's CLI reads this project's configs

    loop = LoopTimer()

    def fit(with_health: bool, name: str) -> tuple[float, float, float]:
        class BenchCLI(ProjectCLI):
            def instantiate_trainer(self, **kwargs):
                trainer = super().instantiate_trainer(**kwargs)
                trainer.callbacks.append(loop)
                if not with_health:
                    trainer.callbacks = [
                        c for c in trainer.callbacks if not type(c).__module__.startswith(HEALTH)
                    ]
                return trainer

        args = [
            "fit",
            f"--trainer.default_root_dir={workdir / 'runs' / name}",
            f"--data.data_dir={workdir / 'data'}",
            f"--trainer.max_epochs={options.max_epochs}",
            "--trainer.accelerator=cpu",
            "--trainer.devices=1",
            "--trainer.enable_progress_bar=false",
            "--trainer.enable_model_summary=false",
            "--test_after_fit=false",
        ]
        start = time.perf_counter()
        BenchCLI(args=args)
        return time.perf_counter() - start, loop.seconds, loop.cpu_seconds

    fit(True, "warmup")
    times: dict[bool, list[tuple[float, float, float]]] = {True: [], False: []}
    for repeat in range(options.repeats):
        order = (True, False) if repeat % 2 == 0 else (False, True)
        for with_health in order:
            result = fit(with_health, f"{'on' if with_health else 'off'}-{repeat}")
            times[with_health].append(result)
            total, training, cpu = result
            setting = "on " if with_health else "off"
            print(
                f"repeat {repeat}  health {setting}  fit {total:7.2f} s  "
                f"loop {training:7.2f} s  loop CPU {cpu:7.2f} s",
                flush=True,
            )
    whats = ("fit (whole command)", "loop (train start to end)", "loop CPU time (this process)")
    for index, what in enumerate(whats):
        on = statistics.median(t[index] for t in times[True])
        off = statistics.median(t[index] for t in times[False])
        print(f"{what:<29} median on {on:7.2f} s, off {off:7.2f} s, ratio on/off {on / off:.4f}")
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
