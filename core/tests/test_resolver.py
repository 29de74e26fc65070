"""doctor and `fit` agree: what doctor passes, `fit` starts, and the reverse.

`fit` builds its Trainer with Lightning, which resolves accelerator, devices, strategy and
precision and refuses what it cannot build; the guard (run/precision.py) checks what
it built. doctor on this machine builds the same (run/lightning_plan.py): its plan is what
the built Trainer reports, and Lightning's refusal is its failure, in Lightning's words.
For a machine described as data doctor predicts the same verdicts from the settings
(run/hardware.py). For every shipped preset and every pair of them (stacked as
`fit --config a.yaml --config b.yaml` on the default config), the prediction must pass
exactly when Lightning builds the Trainer for those settings and the guard lets it start,
on this machine. Only the settings Lightning resolves are built, not the model or the
data; two real runs then show that both verdicts hold in `fit` itself.
"""

import itertools
import os
from pathlib import Path

import pytest
import torch
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch import Trainer
from lightning.pytorch.plugins import MixedPrecision

from copier_lightning_core import Refusal
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.run.hardware import device_kind
from copier_lightning_core.run.lightning_plan import built_plan, trainer_parser
from copier_lightning_core.run.precision import (
    HARDWARE_SETTINGS,
    check_built_trainer,
    lightning_refusals,
)
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.tools.doctor import CHECKS
from copier_lightning_core.tools.doctor.command import main as doctor
from copier_lightning_core.tools.doctor.context import Context, probe_machine
from copier_lightning_core.tools.doctor.registry import FAIL
from harness import FLAVOURS

PRESETS = sorted((project_root() / "configs" / "presets").glob("*.yaml"))
STACKS = [(path,) for path in PRESETS] + list(itertools.combinations(PRESETS, 2))
RESOLVER_CHECKS = ("DR005", "DR008")  # precision; accelerator, devices and strategy
MACHINE = probe_machine(with_compiler=False)
TOY = FLAVOURS["tabular"]
FP16_FSDP2 = ("fp16.yaml", "fsdp2.yaml")


def name(stack: tuple[Path, ...]) -> str:
    return "+".join(path.stem for path in stack)


def doctor_passes(config: dict) -> bool:
    context = Context(config=config, machine=MACHINE, env={}, root=project_root())
    return all(CHECKS[check_id].run(context).status != FAIL for check_id in RESOLVER_CHECKS)


def guarded_trainer(config: dict) -> Trainer | None:
    """The Trainer Lightning builds from the config's hardware settings, checked by fit's
    guard (fp16 on CPU made real); None when Lightning or the guard refuses it."""
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
        return None
    return trainer


def guard_starts(config: dict) -> bool:
    """Lightning builds a Trainer from the config's hardware settings and the guard passes it."""
    return guarded_trainer(config) is not None


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


def slurm_task(stack: tuple[Path, ...]) -> pytest.MonkeyPatch:
    """The environment a preset meant for SLURM runs in, as a context."""
    patch = pytest.MonkeyPatch()
    for key, value in SLURM_TASK.items() if "slurm" in name(stack) else ():
        patch.setenv(key, value)
    return patch


@pytest.fixture(scope="module")
def verdicts() -> dict[str, tuple[bool, bool]]:
    """(doctor passes, the guard starts `fit`) for every preset and pair, on this machine."""
    found = {}
    for stack in STACKS:
        config = resolve_config([f"--config={path}" for path in stack])
        patch = slurm_task(stack)
        try:
            found[name(stack)] = (doctor_passes(config), guard_starts(config))
        finally:
            patch.undo()
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


@pytest.mark.parametrize("preset", PRESETS, ids=lambda path: path.stem)
def test_on_this_machine_doctor_reports_what_the_built_trainer_reports(preset):
    """doctor itself (not a described machine) asks Lightning: its plan is the Trainer that
    fit's guard passes, or a refusal exactly when the guard or Lightning refuses."""
    config = resolve_config([f"--config={preset}"])
    patch = slurm_task((preset,))
    try:
        context = Context(config=config, machine=MACHINE, env={}, root=project_root(), here=True)
        plan, trainer = context.plan, guarded_trainer(config)
    finally:
        patch.undo()
    if trainer is None:
        assert plan.refusals
        return
    assert plan.refusals == ()
    reported = (plan.device, plan.devices_per_node, plan.num_nodes, plan.precision)
    built = (device_kind(trainer.accelerator), trainer.num_devices, trainer.num_nodes)
    assert reported == (*built, str(trainer.precision))


def _child_processes() -> list[str]:
    """The processes this one started and that still run (Linux: /proc)."""
    parent = str(os.getpid())
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:  # ended meanwhile
            continue
        if stat.rpartition(")")[2].split()[1] == parent:
            found.append(pid)
    return found


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="reads /proc")
@pytest.mark.parametrize("strategy", ["--trainer.strategy=ddp", "fsdp2.yaml"])
def test_asking_lightning_for_two_processes_starts_none(strategy):
    """Building the Trainer resolves DDP and FSDP2 on CPU with 2 devices, and stops there:
    no process group, no process, no launcher's variables in the environment."""
    presets = project_root() / "configs" / "presets"
    flag = f"--config={presets / strategy}" if strategy.endswith(".yaml") else strategy
    config = resolve_config([flag, "--trainer.accelerator=cpu", "--trainer.devices=2"])
    environment, before = dict(os.environ), _child_processes()
    plan = built_plan(config["trainer"])
    assert (plan.distributed, plan.devices_per_node, plan.refusals) == (True, 2, ())
    assert not torch.distributed.is_initialized()
    assert _child_processes() == before
    assert dict(os.environ) == environment


@pytest.mark.parametrize(
    ("flags", "row"),
    [
        (["--trainer.accelerator=cpu", "--trainer.strategy=fsdp"], "DR008"),
        ([f"--config={project_root() / 'configs' / 'presets' / n}" for n in FP16_FSDP2], "DR005"),
    ],
    ids=["fsdp1-on-cpu", "fp16-with-fsdp2"],
)
def test_a_setting_lightning_refuses_is_doctors_failure_with_lightnings_reason(
    flags, row, tmp_path, capsys
):
    """doctor fails the row of the settings at fault with the words Lightning refuses them
    with, as the Trainer is built: before anything starts or is written."""
    config = resolve_config(flags)
    strategy = config["trainer"]["strategy"]
    built = trainer_parser().instantiate_classes(
        trainer_parser().parse_object({"trainer": {"strategy": strategy}})
    )
    with pytest.raises((ValueError, MisconfigurationException)) as refused:
        Trainer(
            accelerator=config["trainer"]["accelerator"],
            strategy=built.trainer.strategy,
            precision=config["trainer"]["precision"],
            logger=False,
        )
    root = tmp_path / "run"
    assert doctor([*flags, f"--trainer.default_root_dir={root}"]) == 1
    table = capsys.readouterr().out
    line = next(line for line in table.splitlines() if line.startswith(row))
    assert " fail " in line and str(refused.value) in line, table
    assert not root.exists()
