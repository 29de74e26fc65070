"""FSDP2 (configs/presets/fsdp2.yaml) on two CPU processes (gloo), against one process.

The tabular toy trains full-batch (each step sees the whole training set, split in two
halves by the DistributedSampler), so the order of samples cannot matter: the sharded run
must follow the single-process run step by step, and a resume must end bit-identical to
the uninterrupted run.

`toy.ToyTiedLM` is laid out as GPT-2 is (blocks in a ModuleList, tied input and output
embeddings): the default shard units must be read from it, and its folder of shards must
serve a resume on two processes and a validate in one.
"""

import os
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import torch
from torch import nn

from copier_lightning_core import Refusal
from copier_lightning_core.callbacks.sharding import find_blocks, with_networks
from copier_lightning_core.checkpoints.load import is_sharded
from copier_lightning_core.cli import ProjectCLI, main
from copier_lightning_core.platform.project import project_root
from copier_lightning_core.testing import launch
from harness import FAST, FLAVOURS, PROJECT
from probes import probe_arg, read_probes
from toy import ToyRegressor, ToySequenceClassifier, ToyTiedLM

TESTS = Path(__file__).parent
FSDP2 = project_root() / "configs" / "presets" / "fsdp2.yaml"
STEPS = 4  # one full-batch step per epoch
FULL_BATCH = 384  # the tabular toy's training set (512 samples, 75 %)
COMMON = [
    *FAST,
    *FLAVOURS["tabular"],
    f"--trainer.max_epochs={STEPS}",
    "--trainer.logger=false",
    "--checkpoint.save_top_k=-1",  # keep every epoch's checkpoint: one to resume from
]
TABULAR = [*COMMON, f"--data.batch_size={FULL_BATCH // 2}"]
TIED_LM = [  # 128 sequences in batches of 16 per process: 4 steps per epoch
    *FAST,
    "--trainer.logger=false",
    "--model=toy.ToyTiedLM",
    "--model.vocab_size=30",
    "--model.length=12",
    "--model.dim=16",
    "--model.depth=2",
    "--model.lr=0.01",
    "--data=toy.ToySequenceData",
    "--data.num_classes=3",
    "--data.vocab_size=30",
    "--data.length=12",
    "--data.train_size=128",
    "--data.val_size=32",
    "--data.batch_size=16",
    "--data.num_workers=0",
    "--checkpoint.monitor=val/loss",
    "--checkpoint.mode=min",
]


def fit_on_two_processes(
    root: Path, probes: Path, *extra: str, toy: Sequence[str] = TABULAR
) -> None:
    path = os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))
    args = [sys.executable, "-m", PROJECT, "fit", f"--config={FSDP2}", *toy]
    args += ["--trainer.devices=2", "--test_after_fit=false"]
    args += [f"--trainer.default_root_dir={root}", probe_arg(probes), *extra]
    env = {**os.environ, "PYTHONPATH": path, "WANDB_MODE": "offline"}
    result = launch.run(args, cwd=project_root(), env=env)
    assert result.returncode == 0, result.stderr[-4000:]


def consolidated(folder: Path) -> dict:
    assert is_sharded(folder)
    assert main(["consolidate-ckpt", str(folder)]) == 0
    return torch.load(folder.parent / "consolidated" / folder.name, weights_only=True)


@pytest.mark.slow
def test_fsdp2_on_two_cpu_processes_matches_one_process_and_resumes_exactly(tmp_path):
    sharded, resumed = tmp_path / "sharded", tmp_path / "resumed"
    fit_on_two_processes(sharded, tmp_path / "probe-sharded")
    ranks = read_probes(tmp_path / "probe-sharded")
    assert sorted(ranks) == [0, 1]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == STEPS  # both ranks stepped
    assert ranks[0]["parameter_types"] == ["DTensor"]
    # Each rank's loss is over its half of the full batch: their mean is the full loss.
    sharded_losses = torch.tensor([ranks[0]["losses"], ranks[1]["losses"]]).mean(0)

    single = ProjectCLI(
        args=[
            "fit",
            *COMMON,
            "--test_after_fit=false",
            f"--data.batch_size={FULL_BATCH}",
            f"--trainer.default_root_dir={tmp_path / 'single'}",
            probe_arg(tmp_path / "probe-single"),
        ]
    )
    single_losses = torch.tensor(read_probes(tmp_path / "probe-single")[0]["losses"])
    torch.testing.assert_close(sharded_losses, single_losses, rtol=1e-5, atol=1e-6)

    full = consolidated(sharded / "checkpoints" / "last.ckpt")
    assert full["global_step"] == STEPS and "optimizer_states" not in full
    torch.testing.assert_close(full["state_dict"], single.model.state_dict(), rtol=1e-5, atol=1e-6)

    # Resume the sharded run from its second epoch's folder (weights and Adam state).
    middle = sharded / "checkpoints" / "epoch01-step00002.ckpt"
    fit_on_two_processes(resumed, tmp_path / "probe-resumed", f"--ckpt_path={middle}")
    assert read_probes(tmp_path / "probe-resumed")[0]["start_step"] == 2
    again = consolidated(resumed / "checkpoints" / "last.ckpt")
    for key, tensor in full["state_dict"].items():
        assert torch.equal(again["state_dict"][key], tensor), key

    # The consolidated file serves single-process commands.
    ProjectCLI(
        args=[
            "validate",
            *FAST[1:],
            *FLAVOURS["tabular"],
            "--trainer.logger=false",
            f"--trainer.default_root_dir={tmp_path / 'validate'}",
            f"--ckpt_path={sharded / 'checkpoints' / 'consolidated' / 'last.ckpt'}",
        ]
    )


@pytest.fixture(scope="module")
def tied_lm_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of a one-epoch fit of toy.ToyTiedLM on two processes (4 steps), probed."""
    root = tmp_path_factory.mktemp("tied-lm")
    fit_on_two_processes(root / "run", root / "probe", toy=TIED_LM)
    return root


@pytest.mark.slow
def test_fsdp2_trains_blocks_of_a_module_list_with_tied_embeddings_and_resumes(
    tied_lm_run, tmp_path
):
    ranks = read_probes(tied_lm_run / "probe")
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 4
    assert ranks[0]["parameter_types"] == ["DTensor"]
    last = tied_lm_run / "run" / "checkpoints" / "last.ckpt"
    assert is_sharded(last)

    resumed = tmp_path / "resumed"
    fit_on_two_processes(
        resumed, tmp_path / "probe", "--trainer.max_epochs=2", f"--ckpt_path={last}", toy=TIED_LM
    )
    ranks = read_probes(tmp_path / "probe")
    assert [ranks[rank]["start_step"] for rank in (0, 1)] == [4, 4]
    assert [ranks[rank]["global_step"] for rank in (0, 1)] == [8, 8]
    assert is_sharded(resumed / "checkpoints" / "last.ckpt")


def _files(folder: Path) -> dict[Path, tuple[int, int]]:
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_one_process_validates_the_sharded_last_checkpoint_and_leaves_it_untouched(tied_lm_run):
    run = tied_lm_run / "run"
    before = _files(run / "checkpoints")
    cli = ProjectCLI(
        args=["validate", *TIED_LM, f"--trainer.default_root_dir={run}", "--ckpt_path=last"]
    )
    assert _files(run / "checkpoints") == before
    # The weights the two processes ended training with, gathered (probes.py).
    trained = read_probes(tied_lm_run / "probe")[0]["parameter_checksum"]
    loaded = torch.cat([p.detach().double().flatten() for p in cli.model.parameters()])
    assert float(loaded.sum()) == pytest.approx(trained, rel=1e-12)
    assert torch.isfinite(cli.trainer.callback_metrics["val/loss"])


@pytest.mark.slow
def test_a_one_process_fit_from_the_sharded_checkpoint_stops_with_the_commands_that_work(
    tied_lm_run, tmp_path
):
    last = tied_lm_run / "run" / "checkpoints" / "last.ckpt"
    root = f"--trainer.default_root_dir={tmp_path / 'run'}"
    with pytest.raises(Refusal, match=r"folder of shards.*fsdp2\.yaml.*--init_from"):
        ProjectCLI(args=["fit", *TIED_LM, root, f"--ckpt_path={last}"])


def test_default_blocks_are_the_layers_of_the_one_injected_network():
    regressor = ToyRegressor()
    assert find_blocks(regressor, []) == [regressor.net[0], regressor.net[2]]
    sequence = ToySequenceClassifier()
    assert find_blocks(sequence, []) == [sequence.embed, sequence.head]
    assert find_blocks(sequence, ["torch.nn.modules.linear.Linear"]) == [sequence.head]


def test_default_blocks_are_the_members_of_a_module_list_and_the_untied_embeddings():
    lm = ToyTiedLM()
    # wte and head hold one Parameter: both stay in the root unit.
    assert find_blocks(lm, []) == [lm.wpe, lm.blocks[0], lm.blocks[1]]


def test_default_blocks_descend_through_nested_containers_to_modules_that_run_forward():
    model = nn.Module()
    model.stem = nn.Conv1d(1, 4, 3)
    model.stages = nn.ModuleDict({"a": nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])})
    model.stages["b"] = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
    stages = model.stages
    assert find_blocks(model, []) == [stages["a"][0], stages["a"][1], stages["b"]]


def test_named_blocks_descend_into_a_named_container_and_leave_tied_weights_to_the_root():
    lm = ToyTiedLM()
    assert find_blocks(lm, ["ModuleList"]) == [lm.blocks[0], lm.blocks[1]]
    assert find_blocks(lm, ["ToyBlock"]) == [lm.blocks[0], lm.blocks[1]]
    with pytest.warns(UserWarning, match=r"wte \(Embedding\) share weights"):
        assert find_blocks(lm, ["Embedding"]) == [lm.wpe]


def test_the_networks_a_module_holds_are_units_too_so_steps_may_call_them_directly():
    """`self.model(**batch)` in a step runs no hook of the root unit: its networks need theirs."""
    wrapper = nn.Module()
    wrapper.lm = ToyTiedLM()  # wte and head tied, both inside lm: lm may be a unit
    wrapper.head = nn.Linear(30, 2)
    lm = wrapper.lm
    units = with_networks(wrapper, find_blocks(wrapper, []))
    assert units == [lm, lm.wpe, lm.blocks[0], lm.blocks[1], wrapper.head]
    tied = nn.Module()
    tied.encoder, tied.decoder = nn.Embedding(30, 4), nn.Linear(4, 30)
    tied.decoder.weight = tied.encoder.weight  # tied across two networks: the root's
    assert with_networks(tied, []) == []


def test_blocks_that_name_no_submodule_list_the_classes_there_are():
    with pytest.raises(ValueError, match=r"no submodule of ToyRegressor.*Linear, ReLU"):
        find_blocks(ToyRegressor(), ["TransformerEncoderLayer"])
