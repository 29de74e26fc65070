"""The presets and launch scripts a copy ships: present, aimed at the package, documented."""

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
    assert callback["class_path"] == f"{package}.framework.compile.TorchCompile"
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
