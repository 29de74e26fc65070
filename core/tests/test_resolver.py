"""doctor and `fit` agree: what doctor passes, `fit` starts, and the reverse.

`fit` builds its Trainer with Lightning, which resolves accelerator, devices, strategy and
precision and refuses what it cannot build; the guard (run/precision.py) checks what
it built. doctor cannot build anything: it predicts the same verdicts from the settings
(run/hardware.py). For every shipped preset and every pair of them (stacked as
`fit --config a.yaml --config b.yaml` on the default config), doctor's device and precision
checks must pass exactly when Lightning builds the Trainer for those settings and the
guard lets it start, on this machine. Only the settings Lightning resolves are built, not
the model or the data; two real runs then show that both verdicts hold in `fit` itself.
"""

import functools
import itertools
from pathlib import Path

import pytest
import torch
from lightning.pytorch import Trainer
from lightning.pytorch.cli import LightningArgumentParser
from lightning.pytorch.plugins import MixedPrecision

from copier_lightning_core import Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.run.precision import (
    HARDWARE_SETTINGS,
    check_built_trainer,
    lightning_refusals,
)
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.tools.doctor import CHECKS
from copier_lightning_core.tools.doctor.context import Context, probe_machine
from copier_lightning_core.tools.doctor.registry import FAIL
from harness import FLAVOURS

PRESETS = sorted((project_root() / "configs" / "presets").glob("*.yaml"))
STACKS = [(path,) for path in PRESETS] + list(itertools.combinations(PRESETS, 2))
RESOLVER_CHECKS = ("DR005", "DR008")  # precision; accelerator, devices and strategy
MACHINE = probe_machine(with_compiler=False)
TOY = FLAVOURS["tabular"]


def name(stack: tuple[Path, ...]) -> str:
    return "+".join(path.stem for path in stack)


def doctor_passes(config: dict) -> bool:
    context = Context(config=config, machine=MACHINE, env={}, root=project_root())
    return all(CHECKS[check_id].run(context).status != FAIL for check_id in RESOLVER_CHECKS)


@functools.cache
def trainer_parser() -> LightningArgumentParser:
    """The Trainer's arguments as LightningCLI adds them (strategy, plugins: class_path)."""
    parser = LightningArgumentParser()
    parser.add_lightning_class_args(Trainer, "trainer")
    return parser


def guard_starts(config: dict) -> bool:
    """Lightning builds a Trainer from the config's hardware settings and the guard passes it."""
    settings = {key: config["trainer"][key] for key in HARDWARE_SETTINGS}
    quiet = {"logger": False, "enable_checkpointing": False, "enable_progress_bar": False}
    parser = trainer_parser()
    # instantiate_classes, as LightningCLI calls it (jsonargparse's `instantiate` is 4.49+).
    built = parser.instantiate_classes(parser.parse_object({"trainer": {**settings, **quiet}}))
    try:
        with lightning_refusals(built.trainer):
            trainer = Trainer(**built.trainer)
        check_built_trainer(trainer, built.trainer)
    except Refusal:
        return False
    return True


# One task of a SLURM job: Lightning's SLURMEnvironment (slurm.yaml) reads these when a
# strategy ranks its processes, and the preset is meant to run under SLURM.
SLURM_TASK = {
    "SLURM_JOB_ID": "1",
    "SLURM_JOB_NAME": "train",
    "SLURM_NODELIST": "node1",
    "SLURM_NTASKS": "1",
    "SLURM_NODEID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
}


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[bool, bool]]:
    """(doctor passes, the guard starts `fit`) for every preset and pair, on this machine."""
    found = {}
    for stack in STACKS:
        config = resolve_config([f"--config={path}" for path in stack])
        with pytest.MonkeyPatch.context() as patch:
            for key, value in SLURM_TASK.items() if "slurm" in name(stack) else ():
                patch.setenv(key, value)
            found[name(stack)] = (doctor_passes(config), guard_starts(config))
    return found


def test_doctor_passes_exactly_the_presets_and_pairs_fit_starts(verdicts):
    disagree = {case: v for case, v in verdicts.items() if v[0] != v[1]}
    assert disagree == {}, "(doctor passes, fit starts) differ"


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU verdicts")
def test_on_cpu_only_fp16_with_fsdp2_is_refused(verdicts):
    refused = {case for case, (passes, _) in verdicts.items() if not passes}
    assert refused == {"fp16+fsdp2"}  # FSDP2 itself runs on CPU (gloo): test_sharding.py


def test_fp16_on_cpu_that_doctor_passes_trains_in_real_float16(tmp_path):
    presets = project_root() / "configs" / "presets"
    cli = ProjectCLI(
        args=[
            "fit",
            f"--config={presets / 'slurm.yaml'}",  # plugins: the guard replaces none of them
            f"--config={presets / 'fp16.yaml'}",
            *TOY,
            "--trainer.accelerator=cpu",
            "--trainer.max_steps=2",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--test_after_fit=false",
            f"--trainer.default_root_dir={tmp_path}",
        ]
    )
    plugin = cli.trainer.precision_plugin
    assert cli.trainer.global_step == 2
    assert isinstance(plugin, MixedPrecision) and plugin.device == "cpu" and plugin.scaler


@pytest.mark.skipif(torch.cuda.is_available(), reason="FSDP1 runs on CUDA")
def test_fsdp1_that_doctor_fails_stops_fit_as_the_trainer_is_built(tmp_path):
    args = ["fit", "--trainer.strategy=fsdp", "--trainer.accelerator=cpu", *TOY]
    args.append(f"--trainer.default_root_dir={tmp_path}")
    refused = r"Lightning refuses these trainer settings \(--trainer\.accelerator cpu .*"
    refused += r"--trainer\.strategy fsdp.*\): The strategy `fsdp` requires a GPU.* `doctor`"
    with pytest.raises(Refusal, match=refused):
        ProjectCLI(args=args)
    assert not (tmp_path / "checkpoints").exists()
