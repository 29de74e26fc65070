"""Lightning's default profiler replaced by one without a cost per hook call
(`callbacks/no_profiler.py`); a profiler of your own still works."""

from lightning.pytorch.profilers import SimpleProfiler

from copier_lightning_core.callbacks.no_profiler import NoProfiler
from copier_lightning_core.cli import ProjectCLI
from harness import FAST, FLAVOURS


def test_the_default_profiler_wraps_hook_calls_in_one_shared_no_op_context(tmp_path):
    cli = ProjectCLI(
        args=["validate", *FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={tmp_path}"]
    )
    profiler = cli.trainer.profiler
    assert type(profiler) is NoProfiler
    assert profiler.profile("[Callback]a.on_train_batch_end") is profiler.profile("b")


def test_a_profiler_of_your_own_is_used_and_times_the_callback_hooks(tmp_path):
    cli = ProjectCLI(
        args=[
            "fit",
            *FAST,
            *FLAVOURS["tabular"],
            "--trainer.max_epochs=1",
            "--trainer.profiler=simple",
            f"--trainer.default_root_dir={tmp_path}",
            "--test_after_fit=false",
        ]
    )
    profiler = cli.trainer.profiler
    assert type(profiler) is SimpleProfiler
    timed = [name for name in profiler.recorded_durations if name.startswith("[Callback]")]
    assert any(name.endswith("on_train_batch_end") for name in timed), timed
