"""A checkpoint is data: no class, module or file it names is imported or read, whatever key,
nesting or spelling carries the name, unless the project, torch, Lightning, or the config and
command line of the command being run provide it.

jsonargparse reads a string where a class, a callable, a type or a nested config is declared
as inline YAML or JSON, or as the path of a YAML file, and imports what that names. So each
attack below hides a module name in a value in each of those ways, in every hyperparameter
of a model and a DataModule that declare one argument of each kind (toy.ToyTypedRegressor,
toy.ToyTypedData), and checks that the module was never imported: a marker file it would
write does not exist, and it is not in `sys.modules`.
"""

import copy
import json
import os
import shutil
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from lightning.pytorch import LightningDataModule, LightningModule
from lightning.pytorch.cli import instantiate_module
from torch import nn

from copier_lightning_core.checkpoints.trusted_classes import (
    MAX_VALUES,
    Trust,
    check_sections,
    taken_hyperparameters,
)
from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.platform.refusal import Refusal
from copier_lightning_core.testing import launch
from harness import FAST, PROJECT, refusal_of_main

TESTS = Path(__file__).parent
TYPED = [
    *FAST,
    "--trainer.logger=false",
    "--test_after_fit=false",
    "--checkpoint.monitor=val/loss",
    "--checkpoint.mode=min",
    "--model=toy.ToyTypedRegressor",
    "--model.net=torch.nn.Linear",
    "--model.net.in_features=8",
    "--model.net.out_features=1",
    "--model.optimizer=torch.optim.Adam",
    "--model.optimizer.lr=0.01",
    "--model.name=typed",
    "--model.tag=first",
    "--model.log_dir=logs",
    "--model.reduction=sum",
    "--model.loss_weights={mse: 1.0}",
    "--model.widths=[4, 2]",
    "--model.extra=3",
    "--model.notes=7",
    "--model.options={depth: 2, activation: gelu}",
    "--data=toy.ToyTypedData",
    "--data.num_samples=128",
    "--data.source=memory",
    "--data.cache_dir=cache",
    "--data.split=ordered",
]
# Evaluation as a user runs it on a checkpoint of that model: its classes named (a checkpoint's
# class outside the project, torch and Lightning is refused unless named).
EVALUATE = ["--model=toy.ToyTypedRegressor", "--data=toy.ToyTypedData", "--data.num_samples=128"]
EVALUATE += [arg for arg in FAST if arg != "--trainer.max_epochs=1"] + ["--trainer.logger=false"]
EVALUATE += ["--checkpoint.monitor=val/loss", "--checkpoint.mode=min", "--test_after_fit=false"]
EVALUATE += [f"--trainer.limit_{split}_batches=1" for split in ("val", "test", "predict")]
TRUST_TOYS = ["--trust", "toy.ToyTypedRegressor", "--trust", "toy.ToyTypedData"]  # export


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("trained") / "run"
    ProjectCLI(args=["fit", *TYPED, "--trainer.max_steps=2", f"--trainer.default_root_dir={root}"])
    return root / "checkpoints" / "last.ckpt"


class Attack:
    """A module that leaves a marker when imported, a YAML file naming it, and the payloads
    that name them the ways jsonargparse reads a string: what a checkpoint may carry."""

    def __init__(self, folder: Path) -> None:
        self.module = f"planted_{uuid.uuid4().hex[:8]}"  # never imported before in this process
        self.marker = folder / "imported.txt"
        (folder / f"{self.module}.py").write_text(
            f"from pathlib import Path\nPath({str(self.marker)!r}).write_text('ran')\n"
            "from torch.nn import Linear as Net\nfrom toy import ToyTypedRegressor as Model\n"
        )
        yaml_file = folder / "evil.yaml"
        yaml_file.write_text(
            f"class_path: {self.module}.Net\ninit_args:\n  in_features: 8\n  out_features: 1\n"
        )
        self.payloads = {
            "inline YAML": "{" + f"class_path: {self.module}.Net" + "}",
            "JSON": json.dumps({"class_path": f"{self.module}.Net"}),
            "a YAML file": "evil.yaml",  # relative: the working directory is `folder`
            "a YAML file by absolute path": str(yaml_file),
            "an installed module": '{"class_path": "this.Zen"}',
            "a class path": f"{self.module}.Net",
        }
        self.this_was_imported = "this" in sys.modules

    def ran(self) -> bool:
        """Whether any payload's code ran (or its module was imported) in this process."""
        imported = self.module in sys.modules
        return (
            self.marker.exists()
            or imported
            or (not self.this_was_imported and "this" in sys.modules)
        )


@pytest.fixture
def attack(tmp_path, monkeypatch) -> Attack:
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    # For a command run in a subprocess, too.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])
    )
    return Attack(tmp_path)


SHAPES: dict[str, Callable[[str], Any]] = {
    "as the value": lambda payload: payload,
    "in a list": lambda payload: [payload],
    "in a dict": lambda payload: {"key": payload},
}


def places(checkpoint: dict[str, Any]) -> Iterator[tuple[str, ...]]:
    """Every hyperparameter of the model and the data, and the arguments of their classes."""
    for section in ("hyper_parameters", "datamodule_hyper_parameters"):
        for key, value in checkpoint[section].items():
            if key.startswith("_"):
                continue
            yield (section, key)
            if isinstance(value, dict) and "init_args" in value:
                yield (section, key, "class_path")
                for argument in value["init_args"]:
                    yield (section, key, "init_args", argument)


def planted(checkpoint: dict[str, Any], place: tuple[str, ...], value: Any) -> dict[str, Any]:
    changed = copy.deepcopy(checkpoint)
    node = changed
    for key in place[:-1]:
        node = node[key]
    node[place[-1]] = value
    return changed


def refusal(stop: pytest.ExceptionInfo[Refusal] | str) -> str:
    """The one-paragraph message of a refusal (or of the command line it ended)."""
    message = stop if isinstance(stop, str) else str(stop.value)
    assert message.startswith("error: "), message
    assert "\n" not in message.strip()
    return message


def evaluate(command: str, path: Path, root: Path, *extra: str) -> ProjectCLI:
    args = [command, *EVALUATE, f"--trainer.default_root_dir={root}", f"--ckpt_path={path}"]
    return ProjectCLI(args=[*args, *extra])


@pytest.mark.parametrize("shape", list(SHAPES))
def test_no_value_of_any_hyperparameter_makes_a_rebuild_import_code(trained, attack, shape):
    """Each payload, in each hyperparameter of the model and the data: refused in one
    paragraph naming the key, or taken as the plain value its type declares (a string
    argument keeps the string), and then built by jsonargparse as LightningCLI and
    `load_from_checkpoint` build it (Lightning's instantiator) without importing anything.
    The classes are named, as a user evaluating such a checkpoint names them."""
    checkpoint = torch.load(trained, weights_only=True)
    trust = Trust(named=frozenset({"toy.ToyTypedRegressor", "toy.ToyTypedData"}))
    bases = {
        "hyper_parameters": LightningModule,
        "datamodule_hyper_parameters": LightningDataModule,
    }
    outcomes = {}
    for place in [*places(checkpoint), ("hyper_parameters", "net")]:
        for kind, payload in attack.payloads.items():
            attacked = planted(checkpoint, place, SHAPES[shape](payload))
            hparams = {**attacked[place[0]]}
            hparams.pop("_instantiator")
            try:
                taken, _ = taken_hyperparameters(hparams, place[0], Path("x.ckpt"), trust)
            except Refusal as refused:
                assert f"{place[0]}.{place[1]}" in str(refused), (place, kind)
                outcomes[(place, kind)] = "refused"
            else:
                built = instantiate_module(bases[place[0]], taken)
                held = [str(value) for value in built.hparams.values()]
                assert str(SHAPES[shape](payload)) in held, (place, kind)
                outcomes[(place, kind)] = "taken"
            assert not attack.ran(), (place, kind, shape)
    taken_at = {place[-1] for (place, _), outcome in outcomes.items() if outcome == "taken"}
    # Only arguments declared as strings or paths (and their containers) keep a string.
    strings = {"name", "tag", "log_dir", "source", "cache_dir", "loss_weights", "options"}
    assert taken_at <= strings, taken_at
    assert "net" not in taken_at and "refused" in outcomes.values()


@pytest.mark.parametrize("command", ["validate", "test", "predict", "fit"])
def test_every_command_refuses_the_payloads_before_importing_them(
    command, trained, attack, tmp_path
):
    checkpoint = torch.load(trained, weights_only=True)
    keys = [("net", "as the value"), ("optimizer", "in a list"), ("extra", "in a dict")]
    for index, payload in enumerate(attack.payloads.values()):
        key, shape = keys[index % len(keys)]
        path = tmp_path / "attacked.ckpt"
        torch.save(planted(checkpoint, ("hyper_parameters", key), SHAPES[shape](payload)), path)
        with pytest.raises(Refusal) as stop:
            evaluate(command, path, tmp_path / "root")
        assert f"model.{key}" in refusal(stop)
        assert not attack.ran(), (payload, key)


def test_a_datamodule_the_command_line_does_not_name_is_not_rebuilt_from_a_checkpoint(
    trained, attack, tmp_path
):
    """A checkpoint's DataModule replaces the config's only when its class is the project's
    (or torch's, Lightning's): one outside them is refused before anything is read."""
    checkpoint = torch.load(trained, weights_only=True)
    place = ("datamodule_hyper_parameters", "source")
    path = tmp_path / "attacked.ckpt"
    torch.save(planted(checkpoint, place, attack.payloads["inline YAML"]), path)
    flags = [arg for arg in EVALUATE if not arg.startswith("--data")]
    args = ["validate", *flags, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={path}"]
    with pytest.raises(Refusal) as stop:
        ProjectCLI(args=args)
    assert "data._class_path = 'toy.ToyTypedData'" in refusal(stop)
    assert not attack.ran()


def test_fit_resumes_from_a_run_folder_dropped_into_the_runs_without_importing_it(
    trained, attack, tmp_path
):
    """`--ckpt_path last` finds the newest run of the experiment: a folder someone dropped
    there with a later date is read as data like any other checkpoint."""
    runs = tmp_path / "runs"
    dropped = runs / "default" / "2999-01-01_00-00-00" / "checkpoints"
    dropped.mkdir(parents=True)
    checkpoint = torch.load(trained, weights_only=True)
    torch.save(planted(checkpoint, ("hyper_parameters", "net"), attack.payloads["JSON"]),
               dropped / "last.ckpt")  # fmt: skip
    args = ["validate", *EVALUATE, f"--runs_dir={runs}", "--ckpt_path=last"]
    with pytest.raises(Refusal) as stop:
        ProjectCLI(args=args)
    assert "model.net = " in refusal(stop)
    assert not attack.ran()


@pytest.mark.parametrize("kind", ["inline YAML", "a YAML file", "an installed module"])
def test_export_refuses_the_payloads_before_importing_them(kind, trained, attack, tmp_path, capsys):
    checkpoint = torch.load(trained, weights_only=True)
    for place in [("hyper_parameters", "optimizer"), ("datamodule_hyper_parameters", "source")]:
        value = SHAPES["in a dict"](attack.payloads[kind]) if place[1] == "source" else None
        value = attack.payloads[kind] if value is None else value
        path = tmp_path / "attacked.ckpt"
        torch.save(planted(checkpoint, place, value), path)
        out = str(tmp_path / "out")
        message = refusal(
            refusal_of_main(capsys, "export", str(path), "--output", out, *TRUST_TOYS)
        )
        assert "`--trust CLASS`" in message
        assert not attack.ran(), (kind, place)
    assert not list((tmp_path / "out").glob("*")) if (tmp_path / "out").exists() else True


def test_export_builds_a_class_the_user_trusts_by_name(trained, attack, tmp_path, capsys):
    """`--trust CLASS` keeps its meaning for a file the user knowingly trusts."""
    checkpoint = torch.load(trained, weights_only=True)
    net = {"class_path": f"{attack.module}.Net", "init_args": dict(in_features=8, out_features=1)}
    path = tmp_path / "trusted.ckpt"
    torch.save(planted(checkpoint, ("hyper_parameters", "net"), net), path)
    refusal_of_main(capsys, "export", str(path), "--output", str(tmp_path / "out"), *TRUST_TOYS)
    assert not attack.ran()
    trust = ["--trust", f"{attack.module}.Net"]
    main(["export", str(path), "--output", str(tmp_path / "out"), *TRUST_TOYS, *trust])
    assert attack.marker.exists()  # imported, as the user asked
    assert (tmp_path / "out" / "trusted.safetensors").is_file()


def test_inspect_ckpt_init_from_and_compare_read_a_checkpoint_as_data(trained, attack, tmp_path):
    checkpoint = torch.load(trained, weights_only=True)
    run = tmp_path / "attacked_run"
    (run / "checkpoints").mkdir(parents=True)
    attacked = checkpoint
    for place in places(checkpoint):
        if len(place) == 2:
            attacked = planted(attacked, place, attack.payloads["inline YAML"])
    path = run / "checkpoints" / "last.ckpt"
    torch.save(attacked, path)
    assert main(["inspect-ckpt", str(path), "--config"]) == 0
    main(["compare", str(tmp_path)])
    new_run = ["fit", *TYPED, "--trainer.max_steps=1", f"--init_from={path}"]
    ProjectCLI(args=[*new_run, f"--trainer.default_root_dir={tmp_path / 'new'}"])
    assert not attack.ran()


def test_a_refused_value_given_on_the_command_line_lets_evaluation_go_on(trained, attack, tmp_path):
    """The fix a refusal names: give that value yourself, and the rest of the checkpoint's
    hyperparameters still apply."""
    checkpoint = torch.load(trained, weights_only=True)
    attacked = planted(checkpoint, ("hyper_parameters", "tag"), {"class_path": "this.Zen"})
    path = tmp_path / "attacked.ckpt"
    torch.save(attacked, path)
    with pytest.raises(Refusal) as stop:
        evaluate("validate", path, tmp_path / "root")
    assert "model.tag = " in refusal(stop)
    cli = evaluate("validate", path, tmp_path / "root", "--model.tag=mine")
    assert cli.model.hparams.tag == "mine"
    assert cli.model.hparams.name == "typed"  # the checkpoint's, not the class default
    assert not attack.ran()


def test_the_values_a_checkpoint_records_are_taken_by_their_declared_types(trained, tmp_path):
    """A CLI-trained checkpoint rebuilds as it was: nothing it records is refused."""
    cli = evaluate("validate", trained, tmp_path / "root")
    hparams = cli.model.hparams
    assert (hparams.name, hparams.tag, hparams.reduction) == ("typed", "first", "sum")
    assert (hparams.loss_weights, hparams.widths, hparams.extra) == ({"mse": 1.0}, [4, 2], 3)
    assert hparams.options == {"depth": 2, "activation": "gelu"}  # a bare dict keeps strings
    assert isinstance(cli.model.net, nn.Linear)


def test_taken_values_follow_the_declared_type_not_what_the_string_looks_like(tmp_path):
    trust = Trust(named=frozenset())
    hparams = {"_class_path": "toy.ToyTypedRegressor", "name": "{class_path: torch.nn.Linear}"}
    with pytest.raises(Refusal):  # toy is no class of the project, torch or Lightning
        taken_hyperparameters(hparams, "model", tmp_path, trust)
    trust = Trust(named=frozenset({"toy.ToyTypedRegressor"}))
    taken, _ = taken_hyperparameters(hparams, "model", tmp_path, trust)
    assert taken["name"] == hparams["name"]  # a str argument: jsonargparse keeps the string
    for key, value in [("extra", "anything"), ("widths", ["1"]), ("net", "torch.os.system")]:
        with pytest.raises(Refusal, match=f"model.{key}"):
            taken_hyperparameters({**hparams, key: value}, "model", tmp_path, trust)
    taken, _ = taken_hyperparameters(
        {**hparams, "net": "torch.nn.Linear"}, "model", tmp_path, trust
    )
    assert taken["net"] == {"class_path": "torch.nn.Linear"}  # never a bare string
    # jsonargparse's restricted types are plain: they check a number or string, build nothing.
    data = {"_class_path": "toy.ToyGraphData", "num_workers": "auto", "batch_size": 8}
    trust = Trust(named=frozenset({"toy.ToyGraphData"}))
    assert taken_hyperparameters(data, "data", tmp_path, trust)[0] == data
    with pytest.raises(Refusal, match=r"data\.num_workers = 'evil\.yaml'"):
        taken_hyperparameters({**data, "num_workers": "evil.yaml"}, "data", tmp_path, trust)


def test_an_instantiator_lightning_refuses_is_one_paragraph_too(trained, tmp_path, capsys):
    """Lightning's own allowlist stopped it with a traceback (ValueError) after the import
    checks passed: torch is trusted, but no instantiator but LightningCLI's is."""
    checkpoint = torch.load(trained, weights_only=True)
    checkpoint["hyper_parameters"]["_instantiator"] = "torch.nn.Module"
    path = tmp_path / "instantiator.ckpt"
    torch.save(checkpoint, path)
    stop = refusal_of_main(capsys, "export", str(path), "--output", str(tmp_path), *TRUST_TOYS)
    assert "another instantiator than LightningCLI's" in refusal(stop)


def test_hyperparameters_that_repeat_a_shared_value_are_refused_without_walking_them(trained):
    """Pickle's memo shares one list between many places, as YAML aliases do: 12**6 values."""
    checkpoint = torch.load(trained, weights_only=True)
    shared: list = ["x"] * 12
    for _ in range(5):
        shared = [shared] * 12
    checkpoint["hyper_parameters"]["widths"] = shared
    with pytest.raises(Refusal) as stop:
        check_sections(checkpoint, trained, ["hyper_parameters"])
    assert f"expand to more than {MAX_VALUES:,} values" in refusal(stop)


def test_the_shell_gets_one_paragraph_and_no_traceback(trained, attack, tmp_path):
    """`validate --ckpt_path evil.ckpt` printed "Beautiful is better than ugly" for `this.Zen`."""
    checkpoint = torch.load(trained, weights_only=True)
    path = tmp_path / "attacked.ckpt"
    torch.save(planted(checkpoint, ("hyper_parameters", "net"), attack.payloads["JSON"]), path)
    command = [sys.executable, "-m", PROJECT, "validate", *EVALUATE]
    command += [f"--trainer.default_root_dir={tmp_path / 'run'}", f"--ckpt_path={path}"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ["PYTHONPATH"]])}
    result = launch.run(command, cwd=tmp_path, env=env, timeout=300)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.strip().splitlines()[-1].startswith("error: ")
    assert "model.net = " in result.stderr
    assert not attack.marker.exists()


def test_the_config_names_what_evaluation_rebuilds(trained, tmp_path):
    """The default config names the example's model; a checkpoint of another class is refused
    until the command line names that class, instead of silently building it."""
    flags = [arg for arg in EVALUATE if not arg.startswith(("--model", "--data"))]
    args = ["validate", *flags, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={trained}"]
    with pytest.raises(Refusal, match=r"toy\.ToyTypedRegressor"):
        ProjectCLI(args=args)
    cli = ProjectCLI(args=[*args, "--model=toy.ToyTypedRegressor", "--data=toy.ToyTypedData"])
    assert type(cli.model).__name__ == "ToyTypedRegressor"


@pytest.mark.parametrize(("recorded", "followed"), [("../../escape", None), ("3", 3)])
def test_a_logger_version_from_a_checkpoint_is_followed_only_when_it_names_one_folder(
    trained, recorded, followed
):
    """A resumed fit logs to the version its checkpoint records, never to a path it writes."""
    from jsonargparse import Namespace

    from copier_lightning_core.run.run_record import continue_loggers

    checkpoint = torch.load(trained, weights_only=True)
    checkpoint.setdefault("provenance", {})["loggers"] = {"CSVLogger": recorded}
    logger = Namespace(class_path="lightning.pytorch.loggers.CSVLogger", init_args=Namespace())
    logger.init_args.version = None
    continue_loggers([logger], checkpoint)
    assert logger.init_args.version == followed


def test_the_recorded_config_is_taken_by_the_same_rule(trained, attack, tmp_path):
    """What the hyperparameters lack (an injected `net`) comes from the run's recorded config:
    a value there is data too."""
    checkpoint = torch.load(trained, weights_only=True)
    config = yaml.safe_load(checkpoint["provenance"]["config"])
    config["model"]["init_args"]["net"] = attack.payloads["a YAML file"]
    checkpoint["provenance"]["config"] = yaml.safe_dump(config)
    path = tmp_path / "recorded.ckpt"
    torch.save(checkpoint, path)
    with pytest.raises(Refusal) as stop:
        evaluate("validate", path, tmp_path / "root")
    assert "model.net = 'evil.yaml'" in refusal(stop)
    assert not attack.ran()


def test_a_resume_takes_the_checkpoints_value_given_again_on_the_command_line(trained, tmp_path):
    """A value the checkpoint holds where no plain type is declared: refused from the file,
    but given again on the command line, the same value resumes; another one does not."""
    root = tmp_path / "run"
    shutil.copytree(trained.parent.parent, root)
    resumed = root / "checkpoints" / "last.ckpt"
    checkpoint = torch.load(resumed, weights_only=True)
    torch.save(planted(checkpoint, ("hyper_parameters", "extra"), "kept"), resumed)
    flags = [arg for arg in TYPED if not arg.startswith("--model.extra")]
    args = ["fit", *flags, f"--trainer.default_root_dir={root}", "--ckpt_path=last"]
    with pytest.raises(Refusal) as stop:
        ProjectCLI(args=[*args, "--trainer.max_epochs=2", "--trainer.max_steps=3"])
    assert "model.extra = 'kept'" in refusal(stop)
    with pytest.raises(Refusal) as stop:
        ProjectCLI(
            args=[*args, "--trainer.max_epochs=2", "--trainer.max_steps=3", "--model.extra=other"]
        )
    assert "sets model.extra to other values" in refusal(stop)
    cli = ProjectCLI(
        args=[*args, "--trainer.max_epochs=2", "--trainer.max_steps=3", "--model.extra=kept"]
    )
    assert cli.model.hparams.extra == "kept"


def test_a_checkpoint_naming_the_librarys_classes_as_a_project_held_them_rebuilds_them(tmp_path):
    """Until v0.2.0 the library was copied into each project as `<package>.framework`, first
    flat (`framework.health`), then in rooms (`framework.callbacks.health`): its checkpoints
    name the library's classes so. They are the library's classes, read by their paths of
    today (platform/old_paths.py), and nothing is imported from the old paths."""
    from copier_lightning_core.callbacks.health import GradientHealth, NonFiniteGuard

    guards = [
        {"class_path": "copier_lightning_core.callbacks.health.NonFiniteGuard"},
        {"class_path": "copier_lightning_core.callbacks.health.GradientHealth"},
    ]
    guards[0]["init_args"] = {"check_every_n_steps": 5}
    toy = [*FAST, "--trainer.logger=false", "--test_after_fit=false", "--trainer.max_steps=2"]
    toy += ["--model=toy.ToyGuardedRegressor", "--data=toy.ToyTabularData"]
    toy += ["--checkpoint.monitor=val/loss", "--checkpoint.mode=min"]
    root = tmp_path / "run"
    given = f"--model.guards={json.dumps(guards)}"
    ProjectCLI(args=["fit", *toy, given, f"--trainer.default_root_dir={root}"])
    checkpoint = torch.load(root / "checkpoints" / "last.ckpt", weights_only=True)
    recorded = checkpoint["hyper_parameters"]["guards"]
    assert [guard["class_path"] for guard in recorded] == [guard["class_path"] for guard in guards]
    recorded[0]["class_path"] = f"{PROJECT}.framework.callbacks.health.NonFiniteGuard"  # rooms
    recorded[1]["class_path"] = f"{PROJECT}.framework.health.GradientHealth"  # flat
    old = tmp_path / "old.ckpt"
    torch.save(checkpoint, old)
    again = f"--trainer.default_root_dir={tmp_path / 'again'}"
    rebuilt = ProjectCLI(args=["validate", *toy, again, f"--ckpt_path={old}"]).model.guards
    assert [type(guard) for guard in rebuilt] == [NonFiniteGuard, GradientHealth]
    assert rebuilt[0].check_every_n_steps == 5
    assert not any(name.startswith(f"{PROJECT}.framework") for name in sys.modules)
