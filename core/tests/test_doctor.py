"""doctor: each check fails on exactly the setting or code it exists for, and on nothing else.

The checks are pure functions of a Context, so each case states the machine it runs on
(a laptop, a 4-GPU node) whatever machine runs the tests. The base config is the project's
real default config, parsed the way `fit` parses it.
"""

import copy
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml

from copier_lightning_core.platform.project import project_root
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.tools.doctor import CHECKS
from copier_lightning_core.tools.doctor.command import main, run_checks
from copier_lightning_core.tools.doctor.context import Context, Machine
from copier_lightning_core.tools.doctor.registry import FAIL, PASS, WARN
from copier_lightning_core.tools.doctor.trial import STACKED, trials
from harness import FAST, FLAVOURS
from toy import ToyRegressor

LAPTOP = Machine(
    system="Linux",
    cpus=8,
    cuda_devices=0,
    cuda_bf16=False,
    mps=False,
    torch_version="2.6.0",
    cxx="/usr/bin/g++",
    modules=frozenset(),
    dynamo_supported=True,
    compile_modes=frozenset({"default", "reduce-overhead", "max-autotune"}),
)
GPU_NODE = dataclasses.replace(LAPTOP, cpus=32, cuda_devices=4, cuda_bf16=True)
PROVENANCE = "copier_lightning_core.checkpoints.provenance.CheckpointProvenance"
COMPILE = "copier_lightning_core.callbacks.compile.TorchCompile"
TESTS = Path(__file__).parent


@pytest.fixture(scope="module")
def base() -> dict:
    """The default config with the provenance callback, as a complete project ships it."""
    config = resolve_config([])
    config["trainer"]["callbacks"] = [*config["trainer"]["callbacks"], {"class_path": PROVENANCE}]
    return config


def results(config, machine=LAPTOP, env=None, root: Path | None = None):
    context = Context(
        config=config,
        machine=machine,
        env=env or {},
        root=root or Path("/nonexistent-project"),
        provenance_class=PROVENANCE,
    )
    return run_checks(context, CHECKS.values())


def failing(*args, **kwargs) -> set[str]:
    return {check_id for check_id, r in results(*args, **kwargs).items() if r.status == FAIL}


def set_trainer(**values):
    return lambda config: config["trainer"].update(values)


def set_data(**values):
    return lambda config: config["data"]["init_args"].update(values)


def add_callback(class_path, **init_args):
    def mutate(config):
        config["trainer"]["callbacks"].append({"class_path": class_path, "init_args": init_args})

    return mutate


def drop_provenance(config):
    config["trainer"]["callbacks"] = [
        c for c in config["trainer"]["callbacks"] if not c["class_path"].endswith("Provenance")
    ]


# (expected failing ID, change to the base config, machine, environment)
CONFIG_CASES = {
    "DR001-random-seed": ("DR001", lambda c: c.update(seed_everything=True), LAPTOP, {}),
    "DR001-no-seed": ("DR001", lambda c: c.update(seed_everything=False), LAPTOP, {}),
    "DR002": ("DR002", set_trainer(deterministic=True, benchmark=True), LAPTOP, {}),
    "DR003": ("DR003", set_data(num_workers=64), LAPTOP, {}),
    "DR003-ddp": (
        "DR003",
        lambda c: (set_data(num_workers=10)(c), set_trainer(strategy="ddp", devices=4)(c)),
        GPU_NODE,
        {},
    ),
    "DR004": ("DR004", set_data(pin_memory=False), GPU_NODE, {}),
    "DR005-flag-and-plugin": (
        "DR005",
        set_trainer(
            precision="bf16-mixed",
            plugins=[{"class_path": "lightning.pytorch.plugins.DoublePrecision"}],
        ),
        LAPTOP,
        {},
    ),
    "DR005-fp64-mps": (
        "DR005",
        set_trainer(precision="64-true"),
        dataclasses.replace(LAPTOP, mps=True),
        {},
    ),
    "DR005-bf16-old-gpu": (
        "DR005",
        set_trainer(precision="bf16-mixed"),
        dataclasses.replace(GPU_NODE, cuda_bf16=False),
        {},
    ),
    "DR006-pure-fp16": ("DR006", set_trainer(precision="16-true"), LAPTOP, {}),
    "DR007-bad-mode": ("DR007", add_callback(COMPILE, mode="fastest"), LAPTOP, {}),
    "DR007-no-compiler": (
        "DR007",
        add_callback(COMPILE, mode="default"),
        dataclasses.replace(LAPTOP, cxx=None),
        {},
    ),
    "DR007-old-torch": (
        "DR007",
        add_callback(COMPILE),
        dataclasses.replace(LAPTOP, torch_version="2.1.2"),
        {},
    ),
    "DR008-no-gpu": ("DR008", set_trainer(accelerator="gpu"), LAPTOP, {}),
    "DR008-too-many": ("DR008", set_trainer(strategy="ddp", devices=8), GPU_NODE, {}),
    "DR008-fsdp-cpu": ("DR008", set_trainer(accelerator="cpu", strategy="fsdp"), GPU_NODE, {}),
    "DR008-sync-batchnorm-cpu": ("DR008", set_trainer(sync_batchnorm=True), LAPTOP, {}),
    "DR008-cpu-device-ids": ("DR008", set_trainer(accelerator="cpu", devices=[0, 1]), LAPTOP, {}),
    "DR009-no-launcher": (
        "DR009",
        set_trainer(num_nodes=2, strategy="ddp", devices=4),
        GPU_NODE,
        {},
    ),
    "DR009-slurm-tasks": (
        "DR009",
        set_trainer(num_nodes=2, strategy="ddp", devices=4),
        GPU_NODE,
        {"SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_JOB_NAME": "train"},
    ),
    "DR009-torchrun-no-master": (
        "DR009",
        set_trainer(strategy="ddp", devices=4),
        GPU_NODE,
        {"WORLD_SIZE": "4"},
    ),
    "DR010": ("DR010", drop_provenance, LAPTOP, {}),
}

# (expected failing ID, file under src/, its code)
SOURCE_CASES = {
    "DR011-cuda-call": ("DR011", "model.py", "def f(x):\n    return x.cuda()\n"),
    "DR011-to-cuda": ("DR011", "model.py", 'def f(x):\n    return x.to("cuda:0")\n'),
    "DR012": (
        "DR012",
        "train.py",
        "import torch.distributed as dist\n\ndist.init_process_group('nccl')\n",
    ),
    "DR013": (
        "DR013",
        "model.py",
        "class M:\n    def training_step(self, batch, i):\n        loss = batch.sum()\n"
        "        print(loss.item())\n        return loss\n",
    ),
}


def test_the_base_config_fails_nothing(base):
    assert failing(base, LAPTOP) == set()
    assert failing(base, GPU_NODE) == set()


@pytest.mark.parametrize("case", list(CONFIG_CASES))
def test_a_config_problem_fails_exactly_its_check(base, case):
    check_id, mutate, machine, env = CONFIG_CASES[case]
    config = copy.deepcopy(base)
    mutate(config)
    found = results(config, machine, env)
    assert {i for i, r in found.items() if r.status == FAIL} == {check_id}
    assert found[check_id].detail and found[check_id].fix


@pytest.mark.parametrize("case", list(SOURCE_CASES))
def test_a_source_problem_fails_exactly_its_check_naming_the_file(base, tmp_path, case):
    check_id, name, code = SOURCE_CASES[case]
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / name).write_text(code)
    found = results(base, root=tmp_path)
    assert {i for i, r in found.items() if r.status == FAIL} == {check_id}
    assert f"src/{name}:" in found[check_id].detail


def test_every_check_has_a_case_that_fails_it():
    covered = {case[0] for case in [*CONFIG_CASES.values(), *SOURCE_CASES.values()]}
    assert covered | {"DR014"} == set(CHECKS)  # DR014 (git) only ever warns: tested below


def test_mentions_in_comments_and_exempt_lines_are_not_findings(base, tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "model.py").write_text(
        '"""Never call x.cuda() here."""\n\n\n'
        "def f(x):\n"
        "    # x.to('cuda') would pin the device\n"
        "    return x.cuda()  # doctor: ignore[DR011]\n"
    )
    assert results(base, root=tmp_path)["DR011"].status == PASS


def test_tests_are_not_scanned(base, tmp_path):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_gpu.py").write_text("def test(x):\n    x.cuda()\n")
    assert results(base, root=tmp_path)["DR011"].status == PASS


def _git(root: Path, *args: str) -> None:
    identity = ["-c", "user.name=Test", "-c", "user.email=test@example.com"]
    subprocess.run(["git", *identity, *args], cwd=root, check=True, capture_output=True)


def test_git_state_only_ever_warns(base, tmp_path):
    assert results(base, root=tmp_path)["DR014"].status == WARN  # not a repository
    (tmp_path / "a.txt").write_text("a\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "commit", "-q", "-m", "first")
    assert results(base, root=tmp_path)["DR014"].status == PASS
    (tmp_path / "a.txt").write_text("changed\n")
    dirty = results(base, root=tmp_path)["DR014"]
    assert dirty.status == WARN and "a.txt" in dirty.detail


def test_doctor_passes_on_this_project(capsys):
    assert main([]) == 0, capsys.readouterr().out
    table = capsys.readouterr().out
    assert all(f"\n{check_id} " in table for check_id in CHECKS)


def test_fp16_on_cpu_passes_as_real_float16(base):
    config = copy.deepcopy(base)
    config["trainer"].update(accelerator="cpu", precision="16-mixed")
    found = results(config)
    assert found["DR005"].status == PASS and "float16" in found["DR005"].detail
    assert found["DR006"].status == PASS  # the guard adds a GradScaler


def test_a_strategy_class_with_one_process_is_named_by_its_class_not_its_arguments(base):
    config = copy.deepcopy(base)
    ddp = "copier_lightning_core.callbacks.ddp.DDPStrategy"
    config["trainer"].update(accelerator="cpu", devices=1)
    strategy = dict(class_path=ddp, init_args=dict(find_unused_parameters=None))
    config["trainer"]["strategy"] = strategy
    found = results(config)
    assert found["DR008"].status == WARN
    assert "strategy DDPStrategy with one process" in found["DR008"].detail
    assert "init_args" not in found["DR008"].detail


class MarksWhenBuilt(L.LightningDataModule):
    """A data module that leaves the file `built` when it is constructed."""

    def __init__(self, built: str) -> None:
        super().__init__()
        Path(built).touch()


def test_doctor_takes_fits_flags_and_exits_1_on_a_failure(tmp_path, capsys):
    preset = tmp_path / "cpu-sync-batchnorm.yaml"
    preset.write_text("trainer:\n  accelerator: cpu\n  sync_batchnorm: true\n")
    built = tmp_path / "built"
    data = ["--data=test_doctor.MarksWhenBuilt", f"--data.built={built}"]
    assert main(["--config", str(preset), *data]) == 1
    rows = [line for line in capsys.readouterr().out.splitlines() if " fail " in line]
    assert [row.split()[0] for row in rows] == ["DR008"]
    assert not built.exists()  # parsed only: no data module built, no data generated


def test_doctor_refuses_an_unknown_flag_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--trainer.devise=2"])
    assert exit_info.value.code != 0
    assert "devise" in capsys.readouterr().err


def test_static_mode_reads_sources_only_and_names_the_file(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f(x):\n    return x.cuda()\n")
    code = (
        "import sys\n"
        "from copier_lightning_core.tools.doctor.command import main\n"
        f"status = main(['--static', {str(bad)!r}])\n"
        "print('imported torch:', 'torch' in sys.modules)\n"
        "sys.exit(status)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ}
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "imported torch: False" in result.stdout  # (an assert there would exit 1 too)
    assert f"{bad.as_posix()}:2: .cuda()" in result.stdout
    assert {line.split()[0] for line in result.stdout.splitlines() if line.startswith("DR")} == {
        check.id for check in CHECKS.values() if check.static
    }


def test_trials_take_each_config_with_the_other_flags_then_all_together():
    argv = ["--config", "a.yaml", "--model.lr=0.1", "--config=b.yaml", "--trainer.devices=1"]
    assert trials(argv) == {
        "a.yaml": ["--config=a.yaml", "--model.lr=0.1", "--trainer.devices=1"],
        "b.yaml": ["--model.lr=0.1", "--config=b.yaml", "--trainer.devices=1"],
        STACKED: ["--config=a.yaml", "--model.lr=0.1", "--config=b.yaml", "--trainer.devices=1"],
    }
    assert trials(["--model.lr=0.1"]) == {"the default run": ["--model.lr=0.1"]}


def test_a_config_naming_the_model_is_in_every_trial_not_tried_alone(tmp_path):
    """Each preset is tried on the user's model (their config), not on the example."""
    own = tmp_path / "mine.yaml"
    own.write_text("model:\n  class_path: my.Net\n")
    argv = [f"--config={own}", "--config=a.yaml", "--config=b.yaml"]
    assert trials(argv) == {
        "a.yaml": [f"--config={own}", "--config=a.yaml"],
        "b.yaml": [f"--config={own}", "--config=b.yaml"],
        STACKED: argv,
    }
    assert trials([f"--config={own}"]) == {"the default run": [f"--config={own}"]}


class GraphBreak(ToyRegressor):
    """A forward dynamo must split: fine for compile, an error under `fullgraph: true`."""

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        torch._dynamo.graph_break()
        return self.net(features)


def tried(tmp_path, monkeypatch, capsys, **compile_args) -> tuple[int, list[str]]:
    """`doctor --try` of the compile preset (these TorchCompile arguments) on GraphBreak."""
    compile_preset = project_root() / "configs" / "presets" / "compile.yaml"
    config = yaml.safe_load(compile_preset.read_text())
    config["trainer"]["callbacks+"][0]["init_args"].update(backend="eager", **compile_args)
    preset = tmp_path / "compile.yaml"
    preset.write_text(yaml.safe_dump(config))
    tabular = [arg for arg in FLAVOURS["tabular"] if not arg.startswith("--model=")]
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", path)  # the toys, importable in the trial's process
    model = "--model=test_doctor.GraphBreak"
    status = main(["--try", f"--config={preset}", *FAST, model, *tabular])
    output = capsys.readouterr().out
    rows = output.split("\nTried: ", 1)[1].splitlines()[1:]
    return status, [row for row in rows if row.startswith(str(preset))]


@pytest.mark.slow
def test_try_fails_a_config_that_passes_the_checks_but_stops_fit(tmp_path, monkeypatch, capsys):
    status, rows = tried(tmp_path, monkeypatch, capsys, fullgraph=True)
    assert status == 1 and len(rows) == 1
    assert " fail " in rows[0]
    assert "error: torch.compile failed on GraphBreak.forward" in rows[0]


@pytest.mark.slow
def test_try_passes_a_config_that_fits(tmp_path, monkeypatch, capsys):
    status, rows = tried(tmp_path, monkeypatch, capsys, fullgraph=False)
    assert status == 0 and len(rows) == 1 and " pass " in rows[0]
    assert "1 graph break(s) in GraphBreak.forward" in rows[0]  # it fits, at a cost: named
