"""Bad input is refused with one paragraph before any work: files, numbers, folders, flags.

In-process, each refusal is a `Refusal` whose paragraph names the value and the fix (from
the shell: that paragraph, exit code 1, no traceback); nothing is written where a run
would have written.
"""

import importlib
import logging
import os
import re
import shutil
import stat
import sys
import warnings
from pathlib import Path

import pytest
import torch
import yaml
from torch.utils.data import DataLoader

import toy
from copier_lightning_core.checkpoints import trusted_classes
from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.platform.bad_input import check_loader
from copier_lightning_core.platform.loader_rules import available_cpus
from copier_lightning_core.platform.loaders import LoaderOptions
from copier_lightning_core.platform.refusal import Refusal
from copier_lightning_core.run import run_folders
from copier_lightning_core.run.resolve import resolve_config
from copier_lightning_core.testing import launch
from copier_lightning_core.tools.doctor import CHECKS
from copier_lightning_core.tools.doctor.command import main as doctor
from copier_lightning_core.tools.doctor.context import Context, Machine
from copier_lightning_core.tools.doctor.registry import FAIL, Result
from harness import FAST, FLAVOURS, PROJECT, refusal_of_main

TESTS = Path(__file__).parent
SEQUENCE = [*FAST, *FLAVOURS["sequence"], "--trainer.logger=false", "--test_after_fit=false"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """One epoch of the sequence toy; returns its last.ckpt (tests only read it)."""
    root = tmp_path_factory.mktemp("trained") / "run"
    ProjectCLI(args=["fit", *SEQUENCE, f"--trainer.default_root_dir={root}"])
    return root / "checkpoints" / "last.ckpt"


@pytest.fixture(scope="module")
def bad_files(trained, tmp_path_factory) -> dict[str, Path]:
    """A checkpoint cut in half, a text file, and a torch file that is no Lightning checkpoint."""
    folder = tmp_path_factory.mktemp("bad")
    data = trained.read_bytes()
    files = {
        "truncated": folder / "truncated.ckpt",
        "not_torch": folder / "notes.ckpt",
        "foreign": folder / "weights.pt",
    }
    files["truncated"].write_bytes(data[: len(data) // 2])
    files["not_torch"].write_text("epoch 3 looked good\n")
    torch.save({"weights": torch.zeros(3)}, files["foreign"])
    return files


def refusal(args: list[str]) -> str:
    """The paragraph of the Refusal the command stops with."""
    with pytest.raises(Refusal) as stopped:
        ProjectCLI(args=args)
    return str(stopped.value)


WHY = {
    "truncated": "not the zip archive torch.save writes",
    "not_torch": "not the zip archive torch.save writes",
    "foreign": "holds no `state_dict`: it is not a Lightning checkpoint",
}


@pytest.mark.parametrize("kind", list(WHY))
@pytest.mark.parametrize("command", ["fit", "validate", "test", "predict"])
def test_a_bad_checkpoint_file_stops_every_trainer_command_before_work(
    command, kind, bad_files, tmp_path
):
    root = tmp_path / "run"
    path = bad_files[kind]
    message = refusal(
        [command, *SEQUENCE, f"--trainer.default_root_dir={root}", f"--ckpt_path={path}"]
    )
    assert str(path) in message and WHY[kind] in message
    assert not root.exists()  # nothing was written


@pytest.mark.parametrize("kind", list(WHY))
@pytest.mark.parametrize("tool", ["export", "inspect-ckpt"])
def test_a_bad_checkpoint_file_stops_the_tools(tool, kind, bad_files, capsys):
    assert re.search(WHY[kind], refusal_of_main(capsys, tool, str(bad_files[kind])))


@pytest.mark.parametrize("kind", [*WHY, "bad_safetensors"])
def test_a_bad_init_from_file_stops_fit_before_work(kind, bad_files, tmp_path):
    if kind == "bad_safetensors":
        path = tmp_path / "weights.safetensors"
        path.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}")
        why = "not a readable safetensors file"
    else:
        path, why = bad_files[kind], WHY[kind]
    root = tmp_path / "run"
    message = refusal(
        ["fit", *SEQUENCE, f"--trainer.default_root_dir={root}", f"--init_from={path}"]
    )
    assert why in message
    assert not root.exists()


def test_a_truncated_checkpoint_from_the_shell_is_one_paragraph_without_traceback(
    bad_files, tmp_path
):
    """LightningCLI itself loads --ckpt_path before the project sees it: not any more."""
    command = [sys.executable, "-m", PROJECT, "validate", *SEQUENCE]
    command += [
        f"--trainer.default_root_dir={tmp_path / 'run'}",
        f"--ckpt_path={bad_files['truncated']}",
    ]
    result = launch.run(command, cwd=TESTS, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--data.batch_size=0", "a batch holds at least one sample"),
        ("--data.num_workers=-2", "num_workers=-2 is not valid"),
        (f"--data.num_workers={available_cpus() + 1}", f"than the {available_cpus()} CPUs"),
        ("--trainer.max_epochs=0", "--trainer.max_epochs 0: a fit with it trains no step"),
        ("--trainer.max_steps=0", "--trainer.max_steps 0: a fit with it trains no step"),
        ("--data.prefetch_factor=4", "prefetch_factor=4 needs worker processes, but num_workers=0"),
        ("--data.prefetch_factor=0", "prefetch_factor=0 is not valid: use a positive number"),
    ],
)
def test_impossible_numbers_stop_fit_before_work(flag, message, tmp_path):
    """The toy's DataModule takes plain ints, as yours may: bad_input.py checks them."""
    root = tmp_path / "run"
    assert message in refusal(["fit", *SEQUENCE, f"--trainer.default_root_dir={root}", flag])
    assert not root.exists()


@pytest.mark.parametrize(
    ("flag", "paragraph"),
    [
        (
            "--data.num_workers=-1",
            "--data.num_workers -1 (ToyGraphData): expected NonNegativeInt (v>=0) or "
            f"'auto'. `python -m {PROJECT} fit --data.help ToyGraphData` lists what each "
            "of its arguments takes.",
        ),
        ("--data.batch_size=0", "--data.batch_size 0 (ToyGraphData): expected PositiveInt"),
        ("--data.prefetch_factor=0", "--data.prefetch_factor 0 (ToyGraphData): expected "),
    ],
)
def test_a_value_the_signatures_type_refuses_is_one_paragraph_from_the_parser(
    flag, paragraph, tmp_path, capsys
):
    """A DataModule may type its arguments (jsonargparse's NonNegativeInt, ...), as
    toy.ToyGraphData does: the parser refuses the value, in one paragraph instead of
    jsonargparse's tree."""
    root = tmp_path / "run"
    toys = ["--model=toy.ToyGraphRegressor", "--data=toy.ToyGraphData"]
    with pytest.raises(SystemExit) as stopped:
        main(["fit", f"--trainer.default_root_dir={root}", *toys, flag])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {paragraph}"), err
    assert "Union" not in err and len(err.splitlines()) <= 2, err
    assert not root.exists()


def test_a_callbacks_argument_its_type_refuses_in_a_config_is_one_paragraph(tmp_path, capsys):
    config = tmp_path / "guard.yaml"
    guard = {"class_path": "copier_lightning_core.callbacks.health.NonFiniteGuard"}
    guard["init_args"] = {"check_every_n_steps": 0}
    config.write_text(yaml.safe_dump({"trainer": {"callbacks+": [guard]}}))
    root = tmp_path / "run"
    with pytest.raises(SystemExit):
        main(["fit", f"--config={config}", f"--trainer.default_root_dir={root}"])
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith(
        "error: --trainer.callbacks.check_every_n_steps 0 (NonFiniteGuard): expected "
        f"PositiveInt (v>0). `python -m {PROJECT} fit --trainer.callbacks.help NonFiniteGuard`"
    ), err
    assert not root.exists()


PLAIN_LOADERS = [
    *FAST,
    *FLAVOURS["tabular"],
    "--data=faulty_data.PlainLoadersData",
    "--trainer.logger=false",
    "--test_after_fit=false",
]


def test_a_plain_dataloader_with_more_workers_than_cpus_is_refused_when_built(tmp_path):
    too_many = available_cpus() + 1
    args = ["fit", *PLAIN_LOADERS, f"--data.loader_processes={too_many}"]
    message = refusal([*args, f"--trainer.default_root_dir={tmp_path}"])
    assert f"num_workers {too_many}: more DataLoader worker processes than" in message
    assert not (tmp_path / "checkpoints").exists()


def _after_value(message: str, value: int) -> str:
    """A paragraph without where the value came from: `--data.num_workers 3: more ...`."""
    return message.split(f" {value}: ", 1)[1]


def _doctor_row(check_id: str, config: dict, processes: int = 1) -> Result:
    """One doctor check on a machine described as this one (its CPUs), no GPU."""
    machine = Machine(
        cuda_devices=0,
        cuda_bf16=False,
        mps=False,
        system="Linux",
        cpus=available_cpus(),
        torch_version=torch.__version__,
        cxx=None,
        modules=frozenset(),
    )
    if processes > 1:
        config["trainer"].update(accelerator="cpu", strategy="ddp", devices=processes)
    context = Context(config=config, machine=machine, env={}, root=TESTS)
    return CHECKS[check_id].run(context)


def test_too_many_workers_is_one_paragraph_wherever_the_count_comes_in(tmp_path, capsys):
    """The config, a loader your code builds, doctor and `tune --workers` apply one rule
    (loader_rules.worker_ceiling): the same threshold, the same words after the value."""
    too_many = available_cpus() + 1
    root = tmp_path / "run"
    config = refusal(
        ["fit", *SEQUENCE, f"--trainer.default_root_dir={root}", f"--data.num_workers={too_many}"]
    )
    built = refusal(
        [
            "fit",
            *PLAIN_LOADERS,
            f"--data.loader_processes={too_many}",
            f"--trainer.default_root_dir={root}",
        ]
    )
    with pytest.raises(Refusal) as stopped:
        doctor([*FLAVOURS["sequence"], f"--data.num_workers={too_many}"])
    told = str(stopped.value)
    parsed = resolve_config(FLAVOURS["sequence"])
    parsed["data"]["init_args"]["num_workers"] = too_many
    row = _doctor_row("DR003", parsed)
    with pytest.raises(SystemExit):  # tune's own argument parser: exit status 2
        main(["tune", f"--workers=0,{too_many}"])
    tuned = capsys.readouterr().err.strip().splitlines()[-1]
    assert config.startswith(f"error: --data.num_workers {too_many}: more DataLoader worker")
    assert f"_dataloader(): num_workers {too_many}: more" in built  # the first one built
    assert told == config  # doctor parses as fit does, and stops with fit's paragraph
    assert row.status == FAIL
    paragraphs = {config, built, f"{row.detail}. {row.fix}", tuned}
    assert len({_after_value(paragraph, too_many) for paragraph in paragraphs}) == 1
    assert not root.exists()


def test_workers_of_every_local_process_count_at_the_loader_and_in_doctor():
    """Under DDP each of N processes on the machine starts its own workers: a count that
    one process may use, times N above the CPUs, is a warning from the loader check (more
    than the CPUs in one process: refused) and a failed check in doctor, in the same words."""
    cpus = available_cpus()
    workers = cpus // 2 + 1  # at most the CPUs for one process, too many for two
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_loader(DataLoader(range(8), num_workers=workers), "train_dataloader", processes=1)
    with pytest.warns(UserWarning) as told:
        check_loader(DataLoader(range(8), num_workers=workers), "train_dataloader", processes=2)
    parsed = resolve_config(FLAVOURS["sequence"])
    parsed["data"]["init_args"]["num_workers"] = workers
    row = _doctor_row("DR003", parsed, processes=2)
    assert row.status == FAIL
    warned = _after_value(str(told[0].message), workers)
    assert warned == _after_value(f"{row.detail}. {row.fix}", workers)
    assert f"({workers} in each of 2 training processes)" in warned


def test_prefetch_without_workers_is_one_paragraph_from_python_the_config_and_doctor(tmp_path):
    with pytest.raises(ValueError) as python:
        LoaderOptions(num_workers=0, prefetch_factor=4)
    flags = [*FLAVOURS["sequence"], "--data.num_workers=0", "--data.prefetch_factor=4"]
    root = tmp_path / "run"
    config = refusal(["fit", *SEQUENCE, *flags[-2:], f"--trainer.default_root_dir={root}"])
    with pytest.raises(Refusal) as stopped:
        doctor(flags)
    assert config == str(stopped.value) == f"error: in --data, {python.value}"
    assert not root.exists()


@pytest.mark.parametrize("data", ["sequence", "plain"])
def test_an_empty_training_set_is_refused_instead_of_a_run_that_trains_nothing(data, tmp_path):
    if data == "sequence":
        args = [*SEQUENCE, "--data.train_size=0"]
    else:
        args = [*PLAIN_LOADERS, "--data.loader_processes=0", "--data.num_samples=0"]
    message = refusal(["fit", *args, f"--trainer.default_root_dir={tmp_path}"])
    assert "the training set is empty: train_dataloader() yields 0 batches" in message
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.parametrize("case", ["read_only_folder", "file_in_the_way"])
def test_an_unwritable_run_folder_is_refused_naming_it(case, tmp_path):
    if case == "read_only_folder":
        parent = tmp_path / "shared"
        parent.mkdir()
        parent.chmod(stat.S_IRUSR | stat.S_IXUSR)
        if os.access(parent, os.W_OK):  # root writes any folder: take one no one writes
            parent.chmod(stat.S_IRWXU)
            if not Path("/proc").is_dir():
                pytest.skip("root may write every folder here: nothing to refuse")
            parent = Path("/proc")  # procfs: no new folder, whoever asks
    else:
        parent = tmp_path / "notes.txt"
        parent.write_text("a file, not a folder\n")
    root = parent / "run"
    try:
        message = refusal(["fit", *SEQUENCE, f"--trainer.default_root_dir={root}"])
    finally:
        if (tmp_path / "shared").is_dir():
            (tmp_path / "shared").chmod(stat.S_IRWXU)
    assert f"the run folder {root} cannot be written" in message
    assert "--trainer.default_root_dir" in message


def test_a_flag_that_contradicts_the_checkpoint_stops_a_resume(trained, tmp_path):
    """`fit --ckpt_path X --model.lr 0.5`: the resumed optimizer would keep the saved lr."""
    root = tmp_path / "run"
    shutil.copytree(trained.parent.parent, root)
    resumed = root / "checkpoints" / "last.ckpt"
    saved = resumed.read_bytes()
    args = ["fit", *SEQUENCE, f"--trainer.default_root_dir={root}", f"--ckpt_path={resumed}"]
    message = refusal([*args, "--trainer.max_epochs=2", "--model.lr=0.5"])
    assert "--model.lr 0.5 (checkpoint: 0.03)" in message and "--init_from" in message
    assert resumed.read_bytes() == saved


def test_resuming_with_another_run_length_warns_that_the_schedule_does_not_stretch(
    trained, tmp_path
):
    root = tmp_path / "run"
    shutil.copytree(trained.parent.parent, root)
    args = ["fit", *SEQUENCE, f"--trainer.default_root_dir={root}", "--ckpt_path=last"]
    with warnings.catch_warnings(record=True) as same_length:
        warnings.simplefilter("always")
        ProjectCLI(args=args)  # the run had ended: nothing more to train
    assert not [w for w in same_length if "the run's length changed" in str(w.message)]
    with pytest.warns(UserWarning, match=r"length changed \(max_epochs 1 -> 2\)") as longer:
        ProjectCLI(args=[*args, "--trainer.max_epochs=2"])
    warned = next(str(w.message) for w in longer if "the run's length" in str(w.message))
    assert "--init_from" in warned
    # Shorter than what is done: one paragraph before any work, not Lightning's traceback.
    with pytest.raises(Refusal, match=r"max_epochs 1: the checkpoint has 2 epochs done"):
        ProjectCLI(args=[*args, "--trainer.max_epochs=1"])


def test_an_explicit_flag_wins_over_the_checkpoint_for_evaluation(trained, tmp_path, caplog):
    args = [
        "validate",
        *SEQUENCE,
        f"--trainer.default_root_dir={tmp_path}",
        f"--ckpt_path={trained}",
    ]
    with caplog.at_level(logging.INFO):
        cli = ProjectCLI(args=[*args, "--model.lr=0.5"])
    assert cli.model.hparams.lr == 0.5
    assert "model.lr: kept from the command line" in caplog.text


def test_config_file_values_yield_to_the_checkpoint_and_are_listed(trained, tmp_path, caplog):
    """Only flags typed on the command line are explicit; a --config file's values are defaults."""
    config = tmp_path / "other.yaml"
    config.write_text(yaml.safe_dump({"model": {"init_args": {"lr": 0.7}}}))
    without_lr = [arg for arg in SEQUENCE if not arg.startswith("--model.lr")]
    args = ["validate", *without_lr, f"--config={config}", f"--ckpt_path={trained}"]
    with caplog.at_level(logging.INFO):
        cli = ProjectCLI(args=[*args, f"--trainer.default_root_dir={tmp_path}"])
    assert cli.model.hparams.lr == 0.03  # the checkpoint's
    assert "model.lr: 0.7 (config) -> 0.03 (checkpoint)" in caplog.text


def test_the_data_comes_from_the_checkpoint_with_its_model(trained, tmp_path, caplog, monkeypatch):
    """Trained with classes named on the command line, evaluated without naming them: the
    example's DataModule (and its num_classes, linked into the model) was kept."""
    args = ["validate", *FAST, "--trainer.logger=false", f"--trainer.default_root_dir={tmp_path}"]
    args += [f"--ckpt_path={trained}"]
    # The data's code is trust-checked as the model's: named, the model is trusted, not the data.
    message = refusal([*args, "--model=toy.ToySequenceClassifier"])
    assert "data._class_path = 'toy.ToySequenceData'" in message
    assert "toy.ToySequenceClassifier" not in message
    # As if the toys were the project's own code (pkg.mine.Model): trusted without naming.
    trusted = (*trusted_classes.trusted_packages(), "toy")
    monkeypatch.setattr(trusted_classes, "trusted_packages", lambda: trusted)
    with caplog.at_level(logging.INFO):
        cli = ProjectCLI(args=args)
    assert type(cli.datamodule).__name__ == "ToySequenceData"
    assert cli.datamodule.hparams.vocab_size == 30 and cli.datamodule.hparams.length == 12
    assert {"valid_nll", "valid_accuracy"} <= set(cli.trainer.callback_metrics)
    assert "data: " in caplog.text and "toy.ToySequenceData (checkpoint)" in caplog.text


def test_an_endless_fit_is_refused_when_its_schedule_asks_for_the_run_length(tmp_path):
    """max_epochs and max_steps -1: `int(estimated_stepping_batches)` was an OverflowError."""
    scheduled = [*SEQUENCE, "--model=kill_points.ScheduledSequenceClassifier"]
    endless = ["--trainer.max_epochs=-1", "--trainer.max_steps=-1"]
    root = tmp_path / "run"
    message = refusal(["fit", *scheduled, *endless, f"--trainer.default_root_dir={root}"])
    assert "this fit has no length" in message and "--trainer.max_steps N" in message
    assert "ScheduledSequenceClassifier asks for its number of steps" in message
    assert not (root / "checkpoints").exists()


@pytest.mark.parametrize("content", ["", "# a preset, not written yet\n"])
def test_an_empty_config_file_is_read_as_no_overrides(content, tmp_path):
    """jsonargparse stopped with "Unexpected config: " and nothing after it."""
    from copier_lightning_core.run.resolve import resolve_config

    empty = tmp_path / "empty.yaml"
    empty.write_text(content)
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"  # a new run's folder is timed
    with_it = resolve_config([*SEQUENCE, root, f"--config={empty}"])
    without = resolve_config([*SEQUENCE, root])
    assert {key: with_it[key] for key in ("model", "data", "trainer")} == {
        key: without[key] for key in ("model", "data", "trainer")
    }


def billion_laughs(levels: int = 12) -> list[str]:
    """YAML lines whose last anchor stands for 9**levels strings, in a few hundred bytes."""
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for level in range(1, levels):
        lines.append(f"a{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    return lines


@pytest.mark.parametrize("kind", ["config", "sweep spec"])
def test_a_yaml_alias_bomb_is_refused_at_once_not_expanded(kind, tmp_path):
    """The parser's error was printed, then the process ran until killed (or out of memory)."""
    if kind == "config":
        path = tmp_path / "bomb.yaml"
        path.write_text("\n".join(["trainer:", "  max_steps: 2", *billion_laughs()]) + "\n")
        args = ["fit", *SEQUENCE, f"--config={path}", f"--trainer.default_root_dir={tmp_path}"]
    else:  # the bomb where the spec is read (an accepted key), the choices that name it
        path = tmp_path / "spec.yaml"
        nested = [f"    {line}" for line in billion_laughs()]
        choices = "{type: categorical, choices: [*a11, [1]]}"
        spec = ["slurm:", "  additional_parameters:", *nested, "space:", f"  model.dim: {choices}"]
        path.write_text("\n".join(spec) + "\n")
        args = ["sweep", str(path), "--dir", str(tmp_path / "sweep")]
    # Refused in seconds; expanded, it never ends.
    result = launch.run([sys.executable, "-m", PROJECT, *args], cwd=TESTS, timeout=60)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"error: {'--config' if kind == 'config' else kind} {path} has YAML aliases"
    )
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "sweep").exists()


@pytest.mark.parametrize("given", ["config", "experiment"])
def test_a_config_file_that_is_not_utf8_is_one_paragraph_naming_the_line(
    given, tmp_path, monkeypatch
):
    """jsonargparse read it and stopped with a UnicodeDecodeError traceback."""
    path = tmp_path / "latin1.yaml"
    path.write_bytes("trainer:\n  max_epochs: 1  # café\n".encode("latin-1"))
    if given == "config":
        chosen = f"--config={path}"
    else:
        monkeypatch.setattr(run_folders, "experiments_folder", lambda: tmp_path)
        chosen = "--experiment=latin1"
    root = tmp_path / "run"
    message = refusal(["fit", *SEQUENCE, chosen, f"--trainer.default_root_dir={root}"])
    assert f"the config file {path} is not UTF-8 text: byte 0xe9 on line 2" in message
    assert "Save it as UTF-8" in message and "iconv -f latin1 -t utf-8" in message
    assert not root.exists()


def test_an_optimizer_value_torch_refuses_is_one_paragraph_before_work(tmp_path):
    """`--model.optimizer.lr -1` came from torch as a traceback inside fit, after the run
    folder, command.txt, the lock and the CSV logs were made."""
    root = tmp_path / "run"
    command = [sys.executable, "-m", PROJECT, "fit", "--model.optimizer.lr", "-1"]
    command += [f"--trainer.default_root_dir={root}"]
    result = launch.run(command, cwd=TESTS, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --model.optimizer.lr -1.0 (AdamW): torch refuses it (")
    assert "--model.optimizer.help AdamW" in result.stderr
    assert not root.exists()


def failing_optimizers(monkeypatch) -> None:
    """The toy's optimizer fails to build, as torch's do on a value they refuse."""

    def refused(self):
        raise ValueError("Invalid learning rate: -1.0")

    monkeypatch.setattr(toy.ToySequenceClassifier, "configure_optimizers", refused)


def contents(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a folder)."""
    return {
        str(path.relative_to(root)): None if path.is_dir() else path.read_bytes()
        for path in sorted(root.rglob("*"))
    }


LOGGED = [*FAST, *FLAVOURS["sequence"], "--test_after_fit=false"]  # the CSV logger writes


@pytest.mark.parametrize("folder", ["given", "planned"])
def test_a_fit_that_fails_to_build_leaves_no_new_run_folder(folder, tmp_path, monkeypatch):
    """The run folder, its command.txt, lock, CSV logs and saved config were left behind."""
    failing_optimizers(monkeypatch)
    if folder == "given":
        where = f"--trainer.default_root_dir={tmp_path / 'new' / 'run'}"
    else:
        where = f"--runs_dir={tmp_path / 'runs'}"
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ProjectCLI(args=["fit", *LOGGED, where])
    leftover = [str(path) for path in tmp_path.rglob("*") if path.name not in ("runs", "default")]
    assert leftover == []


def test_a_resume_that_fails_to_build_leaves_the_run_as_it_was(trained, tmp_path, monkeypatch):
    root = tmp_path / "run"
    shutil.copytree(trained.parent.parent, root)
    before = contents(root)
    failing_optimizers(monkeypatch)
    args = ["fit", *LOGGED, f"--trainer.default_root_dir={root}", "--ckpt_path=last"]
    with pytest.raises(ValueError, match="Invalid learning rate"):
        ProjectCLI(args=[*args, "--trainer.max_epochs=2"])
    assert contents(root) == before


@pytest.mark.parametrize("flag", ["--trainer.default_root_dir", "--runs_dir"])
def test_a_run_folder_behind_a_symlink_loop_is_refused_naming_the_link(flag, tmp_path):
    """Python's "Symlink loop" RuntimeError came out of the lock or the folder's mkdir."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    message = refusal(["fit", *SEQUENCE, f"{flag}={loop / 'runs'}"])
    assert f"{loop} is a symbolic link that leads back to itself" in message
    assert f"or give another folder with {flag}" in message
    assert [path.name for path in tmp_path.iterdir()] == ["loop"]


@pytest.mark.parametrize("inside", ["src", "package", "library"])
@pytest.mark.parametrize("flag", ["--trainer.default_root_dir", "--runs_dir"])
def test_a_run_folder_inside_the_code_is_refused(inside, flag):
    """Checkpoints and logs in src/ (or an installed package: the project's, the library's)
    are packaged or deleted."""
    package = PROJECT if inside != "library" else "copier_lightning_core"
    code = Path(importlib.import_module(package).__file__).parent
    folder = "src/runs-here" if inside == "src" else str(code / "runs-here")
    message = refusal(["fit", *SEQUENCE, f"{flag}={folder}"])
    assert "which holds the package's code" in message and f"outside it with {flag}" in message
    assert not (code.parent / "runs-here").exists() and not (code / "runs-here").exists()


@pytest.mark.parametrize("command", ["fit", "validate"])
def test_a_last_checkpoint_that_links_out_of_the_run_is_refused_naming_the_target(
    command, trained, tmp_path
):
    """The fit was refused as a second run into the folder, with "add `--ckpt_path last`"."""
    root = tmp_path / "run"
    (root / "checkpoints").mkdir(parents=True)
    (root / "checkpoints" / "last.ckpt").symlink_to(trained)
    before = contents(root)
    message = refusal(
        [command, *SEQUENCE, f"--trainer.default_root_dir={root}", "--ckpt_path=last"]
    )
    assert f"is a link to {trained.resolve()}, outside this run ({root})" in message
    assert f"`--ckpt_path {trained.resolve()}`" in message and "add `--ckpt_path" not in message
    assert contents(root) == before
