"""The presets, sweep specs and launch scripts a copy ships: present, aimed at the package,
documented."""

import os

import pytest
import yaml

from scaffold import package_name

PRESETS = [
    "ddp",
    "ddp-multinode",
    "slurm",
    "fsdp2",
    "bf16",
    "fp16",
    "compile",
    "compile-reduce-overhead",
    "compile-max-autotune",
    "deterministic",
    "debug",
    "profile",
]


@pytest.mark.parametrize("name", ["defaults", "all_loggers"])
def test_presets_and_scripts_are_rendered_for_the_package(rendered, name):
    project = rendered(name)
    package = package_name(project)
    shipped = sorted(path.stem for path in (project / "configs" / "presets").glob("*.yaml"))
    assert shipped == sorted(PRESETS)
    compile_preset = yaml.safe_load((project / "configs/presets/compile.yaml").read_text())
    (callback,) = compile_preset["trainer"]["callbacks+"]  # appended, never a replacement
    assert callback["class_path"] == "copier_lightning_core.callbacks.compile.TorchCompile"
    for script in ("torchrun.sh", "slurm.sbatch"):
        path = project / "scripts" / script
        assert f"-m {package} fit" in path.read_text()
        assert os.access(path, os.X_OK), f"{script} is not executable"


def test_readme_has_a_row_per_preset(rendered):
    readme = (rendered("defaults") / "README.md").read_text()
    for preset in PRESETS:
        assert f"| `{preset}.yaml` |" in readme, preset


def test_no_preset_replaces_the_callback_list(rendered):
    for path in (rendered("defaults") / "configs" / "presets").glob("*.yaml"):
        trainer = yaml.safe_load(path.read_text()).get("trainer", {})
        assert "callbacks" not in trainer, f"{path.name} replaces the default callbacks"


def test_every_key_of_the_shipped_sweep_specs_carries_a_comment(rendered):
    # Checked here, on the template's specs; the project's own test only parses the specs,
    # which are the user's to rewrite, comments or not.
    specs = sorted((rendered("defaults") / "configs" / "sweeps").glob("*.yaml"))
    assert specs
    for spec in specs:
        text = spec.read_text()
        space = yaml.safe_load(text)["space"]
        for key in ["trials", "space", "sampler", "pruner", *space]:
            (line,) = [line for line in text.splitlines() if line.lstrip().startswith(f"{key}:")]
            assert "#" in line, f"{spec.name}: `{key}` carries no comment"
