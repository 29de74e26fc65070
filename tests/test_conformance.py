"""The conformance matrix: every preset and tool of a generated project, on real architectures.

A project is rendered once ("Conformance Probe") and given the models a user might bring,
each wrapped in a few lines of LightningModule with `example_input_array` set, each with a
DataModule of its own (shuffling on, a small dataset made in memory that the model learns;
torchdata's StatefulDataLoader unless said otherwise): tests/conformance/ holds these user
files and their configs.

- `resnet`: transformers' ResNetForImageClassification (BatchNorm buffers, in-place ops);
- `vit`: ViTForImageClassification with dropout (random numbers drawn at every step);
- `gpt2`: GPT2LMHeadModel (tied input/output embeddings, dict batches with an attention mask);
- `plain`: BertForSequenceClassification on a plain `torch.utils.data.DataLoader` (no
  generator, no LoaderOptions: the library rebuilds it for an exact resume);
- `gan`: manual optimization, two optimizers, two `manual_backward` per batch (two
  optimizer steps per batch: OPTIMIZER_STEPS_PER_BATCH scales the steps cells expect);
- `peft`: peft's LoRA adapters on LlamaForCausalLM, the base frozen;
- `graph`: torch_geometric's GIN on PyG `Batch` objects from PyG's own DataLoader;
- `monai3d`: MONAI's 3-D UNet on 16^3 volumes (per-voxel segmentation).

Models are built from config classes or in code: nothing is downloaded. The cells and the
commands they run are the library's (copier_lightning_core.testing.conformance, which a
project also runs on its own model with `pytest -m conformance`). Each cell of
ARCHS x CELLS is one test (`test_cell[gpt2-fit]`): it must work, or be refused before any
work in one paragraph naming cause and fix, and then only where EXPECTED_REFUSALS records
that reason. Failures are reported as failures, never hidden.

Which cells run:
- `bash scripts/test.sh` (the CI): the fast subset, FAST: every cell on GPT-2, fit and one
  resume on ResNet and ViT, and on each later architecture the one or two cells that prove
  its own risk; the other cells are skipped, naming the command below;
- `bash scripts/test.sh -m conformance`: the whole matrix (and nothing else);
- `bash scripts/test.sh tests/test_conformance.py -k gpt2-compile`: one cell.

Each run writes every cell's outcome and time to RESULTS (`.pytest_cache/`);
`python scripts/conformance_page.py` turns the latest run into docs/conformance.md, and
`test_the_conformance_page_lists_exactly_the_cells_the_suite_has` keeps that page honest.
"""

import datetime
import json
import os
import platform
import sys
import time
from pathlib import Path

import pytest
import torch
from copier_lightning_core.testing.conformance import CELLS, conformance_requested, run_cell
from copier_lightning_core.testing.matrix import Arch, Matrix

from conftest import REPO, ZOO_PATH, render, with_zoo
from scaffold import git, install_editable, package_name, uninstall

USER_FILES = Path(__file__).parent / "conformance"
RESULTS = REPO / ".pytest_cache" / "conformance-results.json"
PAGE = REPO / "docs" / "conformance.md"
FULL_MATRIX = "bash scripts/test.sh -m conformance"

# architecture (its user module and config in tests/conformance/) -> label in the docs
ARCHS = {
    "resnet": "ResNet (transformers)",
    "vit": "ViT with dropout (transformers)",
    "gpt2": "GPT-2 (transformers)",
    "plain": "BERT on a plain DataLoader",
    "gan": "GAN (manual optimization)",
    "peft": "LoRA (peft) on Llama",
    "graph": "GIN (torch_geometric)",
    "monai3d": "3-D UNet (MONAI)",
}
FAST = {
    *(("gpt2", cell) for cell in CELLS),
    *((arch, cell) for arch in ("resnet", "vit") for cell in ("fit", "kill9-mid-epoch-w0")),
    # each later architecture: the cells that prove what it alone brings
    ("plain", "kill9-mid-epoch-w0"),  # the plain loader rebuilt: an exact resume
    ("plain", "kill9-mid-epoch-w2"),  # ... with workers
    ("gan", "fit"),  # manual optimization: two optimizer steps per batch
    ("gan", "ddp"),  # a backward pass that reaches half of the parameters
    ("peft", "fit"),  # a frozen base: only the adapters in the optimizer
    ("peft", "export"),  # ONNX, and the merged model and adapters peft loads
    ("graph", "fit"),  # PyG Batch objects through every callback
    ("graph", "tune"),  # batch size and workers measured on PyG's own loader
    ("graph", "kill9-mid-epoch-w0"),  # PyG's DataLoader (a subclass) rebuilt: exact resume
    ("monai3d", "fit"),  # 3-D convolutions, a per-voxel loss
}
# (arch, cell) -> a phrase of the one-paragraph refusal that cell is expected to end in,
# with the reason it is accepted. Empty: every cell must work.
EXPECTED_REFUSALS: dict[tuple[str, str], str] = {}

# Lightning's global step counts optimizer steps: a manual-optimization module that steps
# two optimizers per batch advances it by 2 per batch (its checkpoints every 3 steps then
# fall on every third batch as well: 6, 12, ...).
OPTIMIZER_STEPS_PER_BATCH = {"gan": 2}
ADAPTERS = {"peft"}  # architectures training peft adapters: export writes more for them
VALIDATION_SAMPLES = 16  # each architecture's validation set, which predict reads too


# -- fixtures and tests -----------------------------------------------------------------------
@pytest.fixture(scope="module")
def matrix(template, tmp_path_factory, request):
    """Render "Conformance Probe", add the user files and configs, install it; record results."""
    commit = rendered_commit()  # before the render: what the working tree was made of
    project = render(
        template,
        tmp_path_factory.mktemp("conformance") / "project",
        {"project_name": "Conformance Probe"},
    )
    package = package_name(project)
    configs = project / "configs" / "conformance"
    configs.mkdir()
    for arch in ARCHS:
        text = (USER_FILES / f"{arch}.py").read_text().replace("PACKAGE", package)
        (project / "src" / package / f"{arch}.py").write_text(text)
        text = (USER_FILES / f"{arch}.yaml").read_text().replace("PACKAGE", package)
        (configs / f"{arch}.yaml").write_text(text)
    git(project, "add", "-A")
    git(project, "commit", "-q", "--no-verify", "-m", "real architectures of my own")
    install_editable(project)
    # The architectures' packages, here (cells run in this process) and in the cells' commands.
    paths = [str(project / "src"), *ZOO_PATH]
    sys.path[:0] = paths
    archs = {
        arch: Arch(
            configs=(configs / f"{arch}.yaml",),
            optimizer_steps_per_batch=OPTIMIZER_STEPS_PER_BATCH.get(arch, 1),
            adapters=arch in ADAPTERS,
            predict_samples=VALIDATION_SAMPLES,
        )
        for arch in ARCHS
    }
    matrix = Matrix(project, tmp_path_factory.mktemp("cells"), archs)
    matrix.env = with_zoo(matrix.env)
    started = time.perf_counter()
    yield matrix
    write_results(matrix.results, request.config, time.perf_counter() - started, commit)
    for path in paths:
        sys.path.remove(path)
    uninstall(package)


def rendered_commit() -> str:
    """The commit the render is made from, marked when the working tree differs from it."""
    commit = git(REPO, "rev-parse", "--short", "HEAD").strip()
    if git(REPO, "status", "--porcelain", "--untracked-files=no").strip():
        commit += " + uncommitted changes"  # the render is of the working tree
    return commit


def write_results(
    results: dict[str, dict], config: pytest.Config, seconds: float, commit: str
) -> None:
    """This run's outcome of every cell it ran (and the matrix it belongs to) to RESULTS."""
    if not results:
        return
    import lightning
    import monai
    import peft
    import torch_geometric
    import transformers

    run = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit,
        "command": FULL_MATRIX if conformance_requested(config) else "bash scripts/test.sh",
        "cpus": os.cpu_count(),
        "machine": f"{platform.machine()}, {os.cpu_count()} logical cores",
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "versions": {
            "python": platform.python_version(),
            "torch": torch.__version__,
            "lightning": lightning.__version__,
            "transformers": transformers.__version__,
            "peft": peft.__version__,
            "torch_geometric": torch_geometric.__version__,
            "monai": monai.__version__,
        },
        "seconds": round(seconds, 1),
    }
    cells = [
        {
            "arch": arch,
            "cell": cell,
            "fast": (arch, cell) in FAST,
            **results.get(f"{arch}-{cell}", {"outcome": "not run", "detail": "", "seconds": None}),
        }
        for arch in ARCHS
        for cell in CELLS
    ]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(
        json.dumps({"run": run, "archs": ARCHS, "cells_what": CELLS, "cells": cells}, indent=1)
    )


@pytest.mark.slow
@pytest.mark.conformance
@pytest.mark.parametrize(
    ("arch", "cell"),
    [pytest.param(arch, cell, id=f"{arch}-{cell}") for arch in ARCHS for cell in CELLS],
)
def test_cell(arch: str, cell: str, request: pytest.FixtureRequest) -> None:
    if (arch, cell) not in FAST and not conformance_requested(request.config):
        pytest.skip(f"outside the conformance matrix's fast subset: `{FULL_MATRIX}` runs it")
    run_cell(request.getfixturevalue("matrix"), arch, cell, EXPECTED_REFUSALS.get((arch, cell)))


def test_the_conformance_page_lists_exactly_the_cells_the_suite_has():
    """docs/conformance.md (scripts/conformance_page.py) shows this suite's cells, no others."""
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        from conformance_page import parse_page
    finally:
        sys.path.remove(str(REPO / "scripts"))
    archs, rows = parse_page(PAGE.read_text())
    assert archs == list(ARCHS.values())
    assert [cell for cell, _, _ in rows] == list(CELLS)
    for cell, what, entries in rows:
        assert what == CELLS[cell], f"{cell}: the page says what an older suite proved"
        fast = [arch for arch, entry in zip(ARCHS, entries, strict=True) if "(CI)" in entry]
        assert set(fast) == {arch for arch in ARCHS if (arch, cell) in FAST}, cell
