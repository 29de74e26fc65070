"""The presets of configs/presets/: each one trains, and does what its header says.

Effects are asserted from inside the runs (the `probes.Probe` callback and the
Trainer's own objects), on both toy flavours where they run in-process.
Distributed presets run in real processes: DDP relaunches the command, torchrun starts
two "nodes" on localhost, and a SLURM job is preempted and requeued.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import yaml
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins import MixedPrecision

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.compile import CompileError, TorchCompile
from copier_lightning_core.checkpoints.checkpoint_io import AtomicCheckpointIO
from copier_lightning_core.cli import ProjectCLI
from copier_lightning_core.platform.paths import default_config
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing import launch
from harness import FAST, FLAVOURS, PROJECT, Run
from probes import probe_arg, read_probes
from toy import ToyRegressor

# One inductor cache for every test and process of the suite (and later runs of it).
os.environ.setdefault(
    "TORCHINDUCTOR_CACHE_DIR", str(Path(tempfile.gettempdir()) / f"{PROJECT}-inductor")
)

PRESETS = project_root() / "configs" / "presets"
ALL_PRESETS = sorted(PRESETS.glob("*.yaml"))
COMPILE_MODES = {
    "compile": "default",
    "compile-reduce-overhead": "reduce-overhead",
    "compile-max-autotune": "max-autotune",
}
COMPILE_PRESETS = list(COMPILE_MODES)
IN_PROCESS_PRESETS = ["bf16", "fp16", *COMPILE_PRESETS, "deterministic", "debug", "profile"]
TESTS = Path(__file__).parent


class Instantiated(ProjectCLI):
    """Builds model, data and Trainer from the configs, and runs nothing."""

    def _run_subcommand(self, subcommand: str) -> None:
        pass


def preset(name: str, tmp_path: Path, **compile_args) -> str:
    """`--config` for a preset; compile presets may get other TorchCompile arguments."""
    path = PRESETS / f"{name}.yaml"
    if not compile_args:
        return f"--config={path}"
    config = yaml.safe_load(path.read_text())
    config["trainer"]["callbacks+"][0]["init_args"].update(compile_args)
    changed = tmp_path / f"{name}-changed.yaml"
    changed.write_text(yaml.safe_dump(config))
    return f"--config={changed}"


def presets_first(run: Run, *configs: str, extra: tuple[str, ...] = ()) -> list[str]:
    """Presets before the run's own options, as a user stacks them: the run root wins."""
    return [*configs, *run.args, *extra]


def default_callback_classes() -> list[str]:
    """configs/default.yaml's callbacks but the progress bar, which FAST turns off."""
    callbacks = yaml.safe_load(default_config().read_text())["trainer"]["callbacks"]
    names = [entry["class_path"].rsplit(".", 1)[-1] for entry in callbacks]
    return [name for name in names if name != "ThrottledProgressBar"]


@pytest.mark.parametrize("path", ALL_PRESETS, ids=lambda path: path.stem)
def test_every_preset_keeps_the_default_callbacks_and_checkpoint_plugin(path, tmp_path):
    args = ["fit", f"--config={path}", *FAST, *FLAVOURS["tabular"]]
    args.append(f"--trainer.default_root_dir={tmp_path}")
    cli = Instantiated(args=args)
    active = [type(callback).__name__ for callback in cli.trainer.callbacks]
    assert set(default_callback_classes()) <= set(active), active
    assert isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    # the ModelCheckpoints of default.yaml's callback list, and the `checkpoint:` section's
    expected = default_callback_classes().count("ModelCheckpoint") + 1
    assert sum(isinstance(c, ModelCheckpoint) for c in cli.trainer.callbacks) == expected


@pytest.mark.parametrize("path", ALL_PRESETS, ids=lambda path: path.stem)
def test_every_preset_documents_when_cost_and_traps(path):
    header = path.read_text().split("\ntrainer:")[0].lower()
    assert header.startswith("# ")
    assert "when:" in header and "cost" in header and "traps:" in header


@pytest.mark.slow
@pytest.mark.parametrize("name", IN_PROCESS_PRESETS)
def test_cpu_preset_trains_a_few_steps_and_has_its_effect(run, name, tmp_path):
    compile_args = {"backend": "eager"} if name in COMPILE_PRESETS else {}
    extra = ("--trainer.limit_train_batches=3", "--trainer.limit_val_batches=2")
    extra += ("--test_after_fit=false", probe_arg(tmp_path / "probe"))
    try:
        cli = ProjectCLI(
            args=["fit", *presets_first(run, preset(name, tmp_path, **compile_args), extra=extra)]
        )
    finally:
        torch.use_deterministic_algorithms(False)  # a global flag: keep it out of other tests
    facts = read_probes(tmp_path / "probe")[0]
    trainer = cli.trainer
    assert trainer.global_step == 3
    assert set(default_callback_classes()) <= set(facts["callbacks"])
    dtypes = set(facts["activation_dtypes"])
    checkpoint = torch.load(run.checkpoints / "last.ckpt", weights_only=True)
    if name == "bf16":
        assert dtypes == {"torch.bfloat16"}
    elif name == "fp16":
        assert dtypes == {"torch.float16"}  # not Lightning's silent bf16 swap on CPU
        plugin = trainer.precision_plugin
        assert isinstance(plugin, MixedPrecision) and plugin.scaler is not None
        assert checkpoint["MixedPrecision"]["scale"] > 0
    else:
        assert dtypes == {"torch.float32"}
    if name in COMPILE_PRESETS:
        compiler = next(c for c in trainer.callbacks if isinstance(c, TorchCompile))
        assert compiler.compiled and compiler.mode == COMPILE_MODES[name]
        assert not any("_orig_mod." in key for key in checkpoint["state_dict"])
    if name == "deterministic":
        assert facts["deterministic"] and not torch.backends.cudnn.benchmark
        assert cli.config.fit.seed_everything == 1234
    if name == "debug":
        assert facts["anomaly_detection"] and trainer.loggers == []
    if name == "profile":
        (report,) = run.root.rglob("fit-profile.txt")
        text = report.read_text()
        assert "train_dataloader_next" in text and "run_training_batch" in text


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("name", ["fsdp2", "bf16", "fp16", "compile"])
def test_gpu_preset_trains_a_few_steps(run, name, tmp_path):
    if name == "bf16" and not torch.cuda.is_bf16_supported():
        pytest.skip("this GPU has no bfloat16")
    extra = ("--trainer.accelerator=gpu", "--trainer.limit_train_batches=3")
    extra += ("--trainer.limit_val_batches=1", "--test_after_fit=false")
    cli = ProjectCLI(args=["fit", *presets_first(run, preset(name, tmp_path), extra=extra)])
    assert cli.trainer.global_step == 3 and cli.trainer.strategy.root_device.type == "cuda"
    state = torch.load(run.checkpoints / "last.ckpt", weights_only=True)["state_dict"]
    assert state and not any("_orig_mod." in key for key in state)


def test_bf16_on_a_gpu_without_it_is_told_to_use_fp16(run, monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *args, **kwargs: False)
    args = presets_first(run, preset("bf16", tmp_path), extra=("--trainer.accelerator=gpu",))
    with pytest.raises(Refusal, match=r"no bfloat16.*configs/presets/fp16\.yaml"):
        Instantiated(args=["fit", *args])


@pytest.mark.parametrize(
    ("option", "named"),
    [
        ("--trainer.precision=17", "trainer.precision"),
        ("--trainer.precision=fp8-mixed", "trainer.precision"),
        ("--trainer.devices=-3", "--trainer.devices -3"),
        ("--trainer.devices=0", "--trainer.devices 0"),
        ("--trainer.sync_batchnorm=true", "--trainer.sync_batchnorm"),
    ],
)
def test_bad_trainer_values_are_refused_naming_the_flag(run, option, named, capsys):
    with pytest.raises((SystemExit, Refusal)) as stopped:  # the parser's, or the library's
        Instantiated(args=["fit", *run.args, option])
    assert named in str(stopped.value) + capsys.readouterr().err


class ForwardNeverCalled(ToyRegressor):
    """Its steps call the network directly, so compiling `forward` compiles nothing."""

    def training_step(self, batch, batch_idx: int) -> torch.Tensor:
        features, targets = batch
        return torch.nn.functional.mse_loss(self.net(features), targets)


class GraphBreak(ToyRegressor):
    def forward(self, features: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return self.net(features)


class ExampleInput(ToyRegressor):
    """Sets `example_input_array`, as export asks: Lightning's model summary runs it through
    forward, under a FLOP counter, before the first batch."""

    def __init__(self, num_features: int = 8, hidden: int = 16, lr: float = 1e-2) -> None:
        super().__init__(num_features, hidden, lr)
        self.example_input_array = torch.zeros(2, num_features)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        # Code of its own: no earlier test of the session can have compiled it.
        return self.net(features)


def toy_compile_run(tmp_path: Path, model: str, *extra: str, **compile_args) -> ProjectCLI:
    """The tabular toy, its module swapped for `model` (a subclass: same arguments)."""
    tabular = [arg for arg in FLAVOURS["tabular"] if not arg.startswith("--model=")]
    args = [
        "fit",
        preset("compile", tmp_path, backend="eager", **compile_args),
        *FAST,
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--model=test_presets.{model}",
        *tabular,
        "--trainer.limit_train_batches=2",
        "--trainer.limit_val_batches=1",
        "--test_after_fit=false",
        *extra,
    ]
    return ProjectCLI(args=args)


def test_compile_that_compiles_nothing_is_an_error_naming_the_fix(tmp_path):
    with pytest.raises(CompileError, match=r"ForwardNeverCalled.*submodule"):
        toy_compile_run(tmp_path, "ForwardNeverCalled")
    cli = toy_compile_run(tmp_path, "ForwardNeverCalled", submodule="net")
    assert next(c for c in cli.trainer.callbacks if isinstance(c, TorchCompile)).compiled


def test_compile_compiles_a_module_whose_example_input_the_summary_ran_first(tmp_path):
    cli = toy_compile_run(tmp_path, "ExampleInput", "--trainer.enable_model_summary=true")
    assert next(c for c in cli.trainer.callbacks if isinstance(c, TorchCompile)).compiled
    assert cli.trainer.global_step == 2


def test_compile_failure_names_the_module_and_fullgraph(tmp_path):
    with pytest.raises(CompileError, match=r"GraphBreak\.forward.*fullgraph: false"):
        toy_compile_run(tmp_path, "GraphBreak", fullgraph=True)


def test_compile_failure_can_fall_back_to_eager(tmp_path):
    with pytest.warns(UserWarning, match="Falling back to eager"):
        cli = toy_compile_run(tmp_path, "GraphBreak", fullgraph=True, fallback_to_eager=True)
    assert cli.trainer.global_step == 2


@pytest.mark.slow
def test_inductor_compiled_checkpoint_validates_without_compile(run, tmp_path):
    """The one real inductor compile of the suite: the compile preset exactly as shipped."""
    if run.flavour != "tabular":
        pytest.skip("one real compile is enough: the tabular toy's is the cheapest")
    extra = ("--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1")
    extra += ("--test_after_fit=false",)
    cli = ProjectCLI(args=["fit", *presets_first(run, preset("compile", tmp_path), extra=extra)])
    compiler = next(c for c in cli.trainer.callbacks if isinstance(c, TorchCompile))
    assert compiler.backend == "inductor" and compiler.compiled
    state = torch.load(run.checkpoints / "last.ckpt", weights_only=True)["state_dict"]
    assert state and not any("_orig_mod." in key for key in state)
    validated = run.cli("validate", "--ckpt_path=last", "--trainer.limit_val_batches=1")
    assert not any(isinstance(c, TorchCompile) for c in validated.trainer.callbacks)
    assert validated.trainer.callback_metrics["val/loss"].item() == pytest.approx(
        cli.trainer.callback_metrics["val/loss"].item(), rel=1e-4
    )


@pytest.mark.slow
def test_compile_composes_with_bf16(run, tmp_path):
    extra = ("--trainer.limit_train_batches=2", "--trainer.limit_val_batches=1")
    extra += ("--test_after_fit=false", probe_arg(tmp_path / "probe"))
    configs = (preset("compile", tmp_path, backend="eager"), preset("bf16", tmp_path))
    cli = ProjectCLI(args=["fit", *presets_first(run, *configs, extra=extra)])
    assert next(c for c in cli.trainer.callbacks if isinstance(c, TorchCompile)).compiled
    assert set(read_probes(tmp_path / "probe")[0]["activation_dtypes"]) == {"torch.bfloat16"}


@pytest.mark.slow
def test_eager_checkpoint_resumes_compiled(fitted, tmp_path):
    steps = torch.load(fitted.checkpoints / "last.ckpt", weights_only=True)["global_step"]
    cli = fitted.cli(
        "fit",
        preset("compile", tmp_path, backend="eager"),
        "--trainer.max_epochs=2",
        "--ckpt_path=last",
        "--test_after_fit=false",
    )
    assert cli.trainer.global_step == 2 * steps
    assert next(c for c in cli.trainer.callbacks if isinstance(c, TorchCompile)).compiled


def subprocess_env(**extra: str) -> dict[str, str]:
    """This interpreter's environment with the test helpers importable (probes, toy)."""
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline", **extra}


def run_command(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return launch.run(args, cwd=project_root(), env=subprocess_env(**env))


def files_under(root: Path) -> list[Path]:
    return sorted(path for path in root.rglob("*") if path.is_file())


@pytest.mark.slow
def test_ddp_with_bf16_and_lr_scaling_on_two_cpu_processes(tmp_path):
    runs, probes = tmp_path / "runs", tmp_path / "probe"
    configured_lr = 0.05
    args = [sys.executable, "-m", PROJECT, "fit"]
    args += [f"--config={PRESETS / 'bf16.yaml'}", f"--config={PRESETS / 'ddp.yaml'}"]
    args += [*FAST, *FLAVOURS["sequence"], "--data.train_size=128", "--data.val_size=64"]
    args += ["--trainer.devices=2", f"--runs_dir={runs}"]  # a fresh run folder, made once
    args += [f"--model.lr={configured_lr}", "--test_after_fit=false"]
    scaling = "copier_lightning_core.callbacks.lr_scaling.LinearLRScaling"
    args.append(f"--trainer.callbacks+={scaling}")
    result = run_command([*args, probe_arg(probes)])
    assert result.returncode == 0, result.stderr[-4000:]
    ranks = read_probes(probes)
    assert sorted(ranks) == [0, 1]
    zero, one = ranks[0], ranks[1]
    (root,) = (runs / "default").iterdir()  # the launched process took the one its parent made
    assert zero["root"] == one["root"] == str(root)
    assert zero["world_size"] == one["world_size"] == 2
    # 128 samples, batch 32 per process, 2 processes: 2 steps each, on different shards
    assert zero["global_step"] == one["global_step"] == 2
    assert zero["first_batch_sum"] != one["first_batch_sum"]
    # gradients were all-reduced: the ranks end with the same weights
    assert zero["parameter_checksum"] == one["parameter_checksum"]
    # each rank validated and has the metric the best checkpoints are judged by (the toy
    # logs it per rank, without sync_dist: whether to sync is the module's choice)
    assert "valid_nll" in zero["metrics"] and "valid_nll" in one["metrics"]
    assert set(zero["activation_dtypes"]) == {"torch.bfloat16"}
    assert zero["lr"] == one["lr"] == pytest.approx(2 * configured_lr)  # 2 processes, tuned for 1
    # only rank 0 wrote: one saved config, one log version, one set of checkpoints
    names = [path.relative_to(root).as_posix() for path in files_under(root)]
    assert sum(name.endswith("config.yaml") for name in names) == 1, names
    assert {name.split("/")[1] for name in names if name.startswith("csv/")} == {"version_0"}
    assert "checkpoints/last.ckpt" in names
    assert "checkpoints/epoch00-step00002.ckpt" in names  # the `checkpoint:` section's best
    # Resumed: every rank writes on in the run the launching process found, no new folder.
    more = [*args, "--ckpt_path=last", "--trainer.max_epochs=2", probe_arg(tmp_path / "more")]
    resumed = run_command(more)
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    again = read_probes(tmp_path / "more")
    assert again[0]["root"] == again[1]["root"] == str(root)
    assert again[0]["start_step"] == 2 and list((runs / "default").iterdir()) == [root]


def test_lr_scaling_applies_once_across_a_resume(run, tmp_path):
    if run.flavour != "tabular":
        pytest.skip("the tabular toy's Adam has a constant lr: the factor reads off directly")
    scaling = {
        "class_path": "copier_lightning_core.callbacks.lr_scaling.LinearLRScaling",
        "init_args": {"reference_world_size": 2},  # tuned for 2 processes, run on 1: lr / 2
    }
    scaling_arg = f"--trainer.callbacks+={json.dumps(scaling)}"
    halved = pytest.approx(0.01 / 2)
    lr = "--model.lr=0.01"
    run.cli("fit", lr, scaling_arg, "--test_after_fit=false", probe_arg(tmp_path / "first"))
    assert read_probes(tmp_path / "first")[0]["lr"] == halved
    run.cli(
        "fit",
        lr,
        scaling_arg,
        "--trainer.max_epochs=2",
        "--ckpt_path=last",
        "--test_after_fit=false",
        probe_arg(tmp_path / "resumed"),
    )
    assert read_probes(tmp_path / "resumed")[0]["lr"] == halved  # not halved twice


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow
def test_torchrun_two_nodes_on_localhost(tmp_path):
    runs, probes = tmp_path / "runs", tmp_path / "probe"
    options = [*FLAVOURS["tabular"], *FAST[:1], "--trainer.enable_progress_bar=false"]
    options.append("--test_after_fit=false")
    options += [f"--runs_dir={runs}", probe_arg(probes)]
    common = {"NNODES": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())}
    common["RUN_NAME"] = "2030-01-01_00-00-00"  # the same on each node: their one run folder
    common |= {"NPROC_PER_NODE": "1", "ACCELERATOR": "cpu", "PYTHON": sys.executable}
    nodes = [
        subprocess.Popen(
            ["bash", "scripts/torchrun.sh", *options],
            cwd=project_root(),
            env=subprocess_env(**common, NODE_RANK=str(rank)),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in (0, 1)
    ]
    outputs = [node.communicate(timeout=300)[0] for node in nodes]
    assert [node.returncode for node in nodes] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    ranks = read_probes(probes)
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["world_size"] == ranks[1]["world_size"] == 2
    assert ranks[0]["parameter_checksum"] == ranks[1]["parameter_checksum"]
    root = runs / "default" / common["RUN_NAME"]
    assert ranks[0]["root"] == ranks[1]["root"] == str(root)
    assert list((runs / "default").iterdir()) == [root]


def test_torchrun_on_several_nodes_refuses_to_start_without_one_run_name(tmp_path):
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    env = {"NNODES": "2", "NPROC_PER_NODE": "1", "PYTHON": sys.executable}
    result = run_command(["bash", "scripts/torchrun.sh", f"--runs_dir={tmp_path}"], **env)
    assert result.returncode == 2 and "set RUN_NAME" in result.stderr
    assert not list(tmp_path.iterdir())


@pytest.mark.slow
def test_slurm_requeued_job_continues_where_it_stopped(tmp_path):
    """SIGUSR1 before the time limit: Lightning saves hpc_ckpt and requeues; the rerun resumes
    in the same run folder (named after the job, no root given)."""
    runs, probes, bin_dir = tmp_path / "runs", tmp_path / "probe", tmp_path / "bin"
    bin_dir.mkdir()
    requeues = tmp_path / "requeues.txt"
    # The real scontrol requeues the job and SLURM kills it; this one records and kills.
    scontrol = bin_dir / "scontrol"
    scontrol.write_text(f'#!/bin/sh\necho "$@" >> {requeues}\nkill -9 $PPID\n')
    scontrol.chmod(0o755)
    slurm = {"SLURM_NTASKS": "1", "SLURM_JOB_ID": "4242", "SLURM_JOB_NAME": "train"}
    slurm |= {"SLURM_PROCID": "0", "SLURM_LOCALID": "0", "SLURM_NODEID": "0", "SLURM_NNODES": "1"}
    slurm["PATH"] = f"{bin_dir}{os.pathsep}{os.environ['PATH']}"
    # tabular toy: 384 training samples, batch 64 -> 6 steps per epoch, 12 in all
    args = [
        sys.executable,
        "-m",
        PROJECT,
        "fit",
        f"--config={PRESETS / 'slurm.yaml'}",
    ]
    args += [*FAST, *FLAVOURS["tabular"], "--trainer.max_epochs=2"]
    args += [f"--runs_dir={runs}"]
    args += ["--test_after_fit=false", "--trainer.logger=false"]

    # Signalled in the second epoch: the first one's checkpoints are in <root>/checkpoints/,
    # and the requeued job (no --ckpt_path) still may run into that root.
    preempted = run_command([*args, probe_arg(probes, signal_at_step=8)], **slurm)
    assert preempted.returncode != 0  # killed by the requeue, as on a cluster
    assert requeues.read_text().split() == ["requeue", "4242"]
    (root,) = (runs / "default").iterdir()
    assert root.name.endswith("_job4242.0")
    (hpc,) = root.glob("hpc_ckpt_*.ckpt")
    assert torch.load(hpc, weights_only=True)["global_step"] == 8
    assert (root / "checkpoints" / "last.ckpt").is_file()
    assert not read_probes(probes)

    requeued = run_command([*args, probe_arg(probes)], **slurm)
    assert requeued.returncode == 0, requeued.stderr[-4000:]
    facts = read_probes(probes)[0]
    assert facts["start_step"] == 8 and facts["global_step"] == 12
    assert facts["root"] == str(root) and list((runs / "default").iterdir()) == [root]


@pytest.mark.parametrize("script", ["slurm.sbatch", "torchrun.sh"])
def test_launch_scripts_are_valid_bash(script):
    if shutil.which("bash") is None:
        pytest.skip("no bash here")
    result = run_command(["bash", "-n", f"scripts/{script}"])
    assert result.returncode == 0, result.stderr


def test_sbatch_requeues_and_never_forces_a_checkpoint_path():
    lines = (project_root() / "scripts" / "slurm.sbatch").read_text().splitlines()
    commands = [line for line in lines if not line.startswith("#")]
    assert not any("--ckpt_path" in line for line in commands)  # it would bypass hpc_ckpt
    assert "#SBATCH --signal=SIGUSR1@90" in lines and "#SBATCH --requeue" in lines
