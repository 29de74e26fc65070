"""The command line itself: default config, shipped YAMLs, dispatch, help and its errors."""

import contextlib
import inspect
import io
import re
import subprocess
import sys

import jsonargparse
import pytest
import torch
import yaml

from copier_lightning_core import cli
from copier_lightning_core.platform.paths import default_config, project_path
from copier_lightning_core.platform.private_apis import subcommand_parser
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.run import lightning_cli, run_plan
from copier_lightning_core.run.resolve import _parse_only_cli, resolve_config
from harness import FAST, FLAVOURS, PROJECT, refusal_of_main
from toy import ToySequenceClassifier, ToySequenceData, ToySignals

# Configs for fit; configs/sweeps/ holds sweep specs (test_sweep.py parses those).
SHIPPED_CONFIGS = sorted(
    path for path in (project_root() / "configs").rglob("*.yaml") if path.parent.name != "sweeps"
)


@pytest.mark.parametrize(
    "config", SHIPPED_CONFIGS, ids=lambda path: str(path.relative_to(project_root()))
)
def test_every_shipped_config_parses_against_the_real_signatures(config, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--config", str(config), "--print_config"])
    assert exit_info.value.code == 0, capsys.readouterr().err
    assert "class_path" in capsys.readouterr().out


def test_default_config_applies_from_any_working_directory(run, tmp_path, monkeypatch):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cli_run = run.cli("validate")
    assert cli_run.config.validate.seed_everything == 1234  # from configs/default.yaml
    assert cli_run.trainer.default_root_dir == str(run.root)
    assert list(elsewhere.iterdir()) == []  # nothing written to the working directory


def test_a_misspelled_option_is_refused_naming_it(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--trainer.max_epoch=3"])
    assert exit_info.value.code != 0
    err = capsys.readouterr().err
    # jsonargparse capitalizes "Unrecognized" from some 4.x release on: either is fine.
    assert "error: unrecognized arguments: --trainer.max_epoch" in err.lower()
    assert "usage:" not in err and len(err.splitlines()) <= 3, err  # the error, not a wall


def test_missing_default_config_is_a_clear_error(monkeypatch, tmp_path, capsys):
    missing = tmp_path / "configs" / "default.yaml"
    monkeypatch.setattr(lightning_cli, "default_config", lambda: missing)
    paragraph = refusal_of_main(capsys, "fit")
    assert re.match(r"error: the default config .*default\.yaml is missing", paragraph)


def test_unknown_command_lists_the_commands(capsys):
    paragraph = refusal_of_main(capsys, "trian")
    assert re.match(r"error: unknown command 'trian'.*fit, validate, test, predict", paragraph)


def test_options_without_a_command_are_an_error_listing_the_commands(capsys):
    with pytest.raises(SystemExit) as stopped:
        cli.main(["--print_config"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err, err
    assert re.search(
        r"error: expected .subcommand. to be one of \{fit,validate,test,predict\}", err
    )


class _Built(Exception):
    """Carries the parser a ProjectCLI built, before it parses."""


def test_a_command_builds_the_parser_of_its_own_subcommand_only():
    # LightningCLI builds a parser per subcommand it lists; a process runs one of them.
    class BuildOnly(lightning_cli.ProjectCLI):
        def parse_arguments(self, parser, args) -> None:
            raise _Built(parser)

    with pytest.raises(_Built) as built:
        BuildOnly(args=["validate"])
    parser = built.value.args[0]
    assert (
        parser.parse_args(["validate", "--trainer.max_epochs=2"]).validate.trainer.max_epochs == 2
    )
    with pytest.raises(SystemExit):  # jsonargparse's error: fit is not a choice of this parser
        parser.parse_args(["fit"])


def built_parser(default_yaml, monkeypatch):
    """The parser a `fit` builds, reading its defaults from DEFAULT_YAML (a path)."""

    class BuildOnly(lightning_cli.ProjectCLI):
        def parse_arguments(self, parser, args) -> None:
            raise _Built(parser)

    monkeypatch.setattr(lightning_cli, "default_config", lambda: default_yaml)
    with pytest.raises(_Built) as built:
        BuildOnly(args=["fit"])
    return built.value.args[0]


def edited_default_config(tmp_path, **trainer) -> object:
    """configs/default.yaml with these trainer settings, in a file under tmp_path."""
    edited = yaml.safe_load(default_config().read_text())
    edited["trainer"].update(trainer)
    path = tmp_path / "default.yaml"
    path.write_text(yaml.safe_dump(edited))
    return path


def test_a_parse_reads_the_default_config_once(tmp_path, monkeypatch):
    """jsonargparse asks the command's parser for its defaults twice in a parse; they are
    computed once (parser_once.py), and each parse computes them again: an edit of the
    file between two parses is read."""
    path = edited_default_config(tmp_path, max_epochs=3)
    parser = built_parser(path, monkeypatch)
    computed = []
    compute = jsonargparse.ArgumentParser.get_defaults

    def counted(self, *args, **kwargs):
        if self.default_config_files:
            computed.append(self)
        return compute(self, *args, **kwargs)

    monkeypatch.setattr(jsonargparse.ArgumentParser, "get_defaults", counted)
    assert parser.parse_args(["fit"]).fit.trainer.max_epochs == 3
    assert len(computed) == 1, computed
    path.write_text(path.read_text().replace("max_epochs: 3", "max_epochs: 2"))
    assert parser.parse_args(["fit"]).fit.trainer.max_epochs == 2
    assert len(computed) == 2, computed


def test_a_bad_value_in_the_default_config_is_refused_naming_the_option(tmp_path, monkeypatch):
    parser = built_parser(edited_default_config(tmp_path, max_epochs="three"), monkeypatch)
    stderr = io.StringIO()
    with pytest.raises(SystemExit) as stopped, contextlib.redirect_stderr(stderr):
        parser.parse_args(["fit"])
    assert stopped.value.code == 2
    said = stderr.getvalue()
    assert "Traceback" not in said and len(said.splitlines()) <= 3, said
    assert "error: --trainer.max_epochs three: expected int or null" in said, said


def test_a_command_validates_its_config_once_and_not_again_at_each_dump(tmp_path, monkeypatch):
    """jsonargparse validates a config when it parses it and again at each dump (a command
    dumps twice: the hyperparameters, config.yaml). The parse's validation stands for the
    dumps (parser_once.py): a fit, a resumed fit and a validate validate nothing outside
    their parses, and config.yaml is what a validating dump writes."""
    outside_parses = []
    inside = [0]

    def counting(method, count):
        def counted(self, *args, **kwargs):
            if count and inside[0] == 0:
                outside_parses.append(method)
            inside[0] += 1
            try:
                return getattr(jsonargparse.ArgumentParser, f"_counted_{method}")(
                    self, *args, **kwargs
                )
            finally:
                inside[0] -= 1

        return counted

    for method, count in (("parse_args", False), ("parse_object", False), ("validate", True)):
        monkeypatch.setattr(
            jsonargparse.ArgumentParser,
            f"_counted_{method}",
            getattr(jsonargparse.ArgumentParser, method),
            raising=False,
        )
        monkeypatch.setattr(jsonargparse.ArgumentParser, method, counting(method, count))
    args = [*FAST, *FLAVOURS["tabular"], f"--trainer.default_root_dir={tmp_path}"]
    lightning_cli.ProjectCLI(args=["fit", *args, "--test_after_fit=false"])
    assert outside_parses == []
    resumed = lightning_cli.ProjectCLI(
        args=["fit", *args, "--test_after_fit=false", "--ckpt_path=last", "--trainer.max_epochs=2"]
    )
    assert outside_parses == []
    lightning_cli.ProjectCLI(args=["validate", *args, "--ckpt_path=last"])
    assert outside_parses == []
    # A fresh folder the plan chose, taken when claimed: the run moves to `<name>-1`, and
    # both the hyperparameters and config.yaml are dumped from the config as moved.
    claim_fresh = run_plan.claim_fresh

    def taken(root):
        root.mkdir(parents=True)
        return claim_fresh(root)

    monkeypatch.setattr(run_plan, "claim_fresh", taken)
    moved = lightning_cli.ProjectCLI(
        args=["fit", *FAST, *FLAVOURS["tabular"], f"--runs_dir={tmp_path / 'runs'}",
              "--test_after_fit=false"]
    )  # fmt: skip
    assert moved.config.fit.trainer.default_root_dir.endswith("-1")
    assert outside_parses == []
    monkeypatch.undo()
    section = subcommand_parser(resumed, "fit")
    checked = section.dump(resumed.config.fit, skip_none=False)  # validates, or raises
    saved = tmp_path / "csv" / "version_0" / "config-1.yaml"  # the resumed fit continues it
    assert yaml.safe_load(checked) == yaml.safe_load(saved.read_text())


def test_a_config_changed_after_its_validation_is_validated_at_its_dump(tmp_path, monkeypatch):
    parser = built_parser(edited_default_config(tmp_path), monkeypatch)
    config = parser.parse_args(["fit"])
    parser.dump(config)  # as parsed: dumped
    config.fit.trainer.max_epochs = "three"
    with pytest.raises(TypeError, match="max_epochs"):
        parser.dump(config)


def test_relative_paths_are_relative_to_the_project_root(tmp_path):
    assert project_path("runs/x") == project_root() / "runs" / "x"
    assert project_path(tmp_path) == tmp_path
    assert default_config().is_file()


@pytest.mark.parametrize("words", [["--help"], ["-h"], []], ids=["--help", "-h", "nothing"])
def test_help_lists_every_command_with_one_line_each(words, capsys):
    assert cli.main(words) == (0 if words else 2)
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m {PROJECT} <command>")
    for command in ["fit", "validate", "test", "predict", *cli.TOOLS]:
        (line,) = [line for line in out.splitlines() if line.split()[:1] == [command]]
        assert len(line.split()) > 2, line  # the command, then what it does


def test_a_trainer_command_help_is_lightning_clis_under_the_program_name(capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: python -m {PROJECT}")
    assert " fit " in out.splitlines()[0]
    assert "--trainer.max_epochs" in out and "--checkpoint.monitor" in out


def test_num_classes_is_declared_once_in_the_data_section(tmp_path):
    # The tabular toys have no num_classes at all: every tabular test parses with the links.
    args = [*FAST, f"--trainer.default_root_dir={tmp_path}", *FLAVOURS["sequence"]]
    linked = lightning_cli.ProjectCLI(args=["validate", *args, "--data.num_classes=5"])
    assert linked.model.num_classes == 5 and linked.model.head.out_features == 5


def own_defaults(cls: type, **given) -> dict:
    """The init arguments `cls` gets from its own signature, then those `given`."""
    return {name: p.default for name, p in inspect.signature(cls).parameters.items()} | given


def toy_sections(data: type) -> dict:
    """`model:` ToySequenceClassifier and `data:` `data`, given batch_size 5."""
    return {
        "model": {"class_path": "toy.ToySequenceClassifier"},
        "data": {"class_path": f"toy.{data.__name__}", "init_args": {"batch_size": 5}},
    }


def swap_in(data: type, where: str, tmp_path) -> list[str]:
    """Options that name toy_sections(data) in place of the default config's classes."""
    sections = toy_sections(data)
    if where == "command line":
        model, data_class = sections["model"]["class_path"], sections["data"]["class_path"]
        return [f"--model={model}", f"--data={data_class}", "--data.batch_size=5"]
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(sections))
    return [f"--config={config}"]


@pytest.mark.parametrize("where", ["command line", "--config"])
@pytest.mark.parametrize("data", [ToySignals, ToySequenceData], ids=lambda data: data.__name__)
def test_a_class_named_in_place_of_the_examples_gets_none_of_its_values(data, where, tmp_path):
    # The default config's values (and the num_classes linked from its data) belong to its
    # own classes: a DataModule without num_classes left the example's count in the model,
    # one with it got the example's count, batch_size and num_workers.
    config = resolve_config(swap_in(data, where, tmp_path))
    assert config["model"]["init_args"] == own_defaults(ToySequenceClassifier)
    assert config["data"]["init_args"] == own_defaults(data, batch_size=5)


@pytest.mark.parametrize("later", ["--config", "--model.class_path"])
def test_a_class_named_then_replaced_later_gets_none_of_the_first_ones_defaults(later, tmp_path):
    # The command line names one class, a later word another: the last one is the run's,
    # from its own defaults (lr 3e-2, not ToyRegressor's 1e-2), though the parse started
    # from the first one.
    config = tmp_path / "mine.yaml"
    config.write_text(yaml.safe_dump(toy_sections(ToySequenceData)))
    replaced = {
        "--config": [f"--config={config}"],
        "--model.class_path": [
            "--model.class_path=toy.ToySequenceClassifier",
            "--data.class_path=toy.ToySequenceData",
            "--data.batch_size=5",
        ],
    }[later]
    first = ["--model=toy.ToyRegressor", "--data=toy.ToyTabularData"]
    resolved = resolve_config([*first, *replaced])
    assert resolved["model"]["init_args"] == own_defaults(ToySequenceClassifier)
    assert resolved["data"]["init_args"] == own_defaults(ToySequenceData, batch_size=5)


@pytest.mark.parametrize("where", ["command line", "--config"])
def test_classes_named_on_the_command_line_are_parsed_once(where, tmp_path, monkeypatch):
    """A command naming its classes as `--model CLASS` parses once, as one with the
    example's does; named elsewhere (a --config file), the parse is done again from them."""
    parser = _parse_only_cli().parser
    parses = []
    parse = parser.parse_args
    monkeypatch.setattr(parser, "parse_args", lambda *a, **k: parses.append(a) or parse(*a, **k))
    resolve_config(swap_in(ToySequenceData, where, tmp_path))
    assert len(parses) == (1 if where == "command line" else 2), parses


def printed_sections(capsys, *words: str) -> dict:
    """The `model:` and `data:` sections `fit --print_config` prints for these options."""
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["fit", *words, "--print_config"])
    assert exit_info.value.code == 0, capsys.readouterr().err
    config = yaml.safe_load(capsys.readouterr().out)
    return {key: config[key] for key in ("model", "data")}


def test_classes_named_in_the_default_config_print_as_when_named_on_the_command_line(
    tmp_path, monkeypatch, capsys
):
    named = printed_sections(capsys, *swap_in(ToySequenceData, "command line", tmp_path))
    assert named["data"]["init_args"] == own_defaults(ToySequenceData, batch_size=5)
    edited = yaml.safe_load(default_config().read_text()) | toy_sections(ToySequenceData)
    edited_config = tmp_path / "default.yaml"
    edited_config.write_text(yaml.safe_dump(edited))
    monkeypatch.setattr(lightning_cli, "default_config", lambda: edited_config)
    assert printed_sections(capsys) == named


def test_a_tool_whose_reader_stops_early_ends_without_a_traceback(tmp_path):
    checkpoint = tmp_path / "weights.ckpt"
    torch.save({"state_dict": {f"layer{i}.weight": torch.zeros(1) for i in range(500)}}, checkpoint)
    tool = subprocess.Popen(
        [sys.executable, "-m", PROJECT, "inspect-ckpt", str(checkpoint)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    tool.stdout.close()  # what `| head` does once it has its lines: before the tool prints
    _, stderr = tool.communicate(timeout=300)
    assert "BrokenPipeError" not in stderr.decode() and "Traceback" not in stderr.decode()
    assert tool.returncode == 141
