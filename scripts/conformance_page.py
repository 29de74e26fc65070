"""Write docs/conformance.md from the latest run of the conformance matrix.

    bash scripts/test.sh -m conformance           # the whole matrix (tests/test_conformance.py)
    .venv/bin/python scripts/conformance_page.py  # -> docs/conformance.md

The run leaves each cell's outcome (pass / refused with its reason / fail with its first
line / not run) and time in `.pytest_cache/conformance-results.json`; this script only
formats that file, so the page says what a run did, never more. A run of the default
suite covers the fast subset only: the other cells then read "not run".
`--results FILE` reads another results file; `--output FILE` writes elsewhere.
"""

import argparse
import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / ".pytest_cache" / "conformance-results.json"
PAGE = REPO / "docs" / "conformance.md"
HEADER = "| cell | what it proves |"

INTRO = """\
# Conformance matrix

Written by `python scripts/conformance_page.py` from a run of the template's test suite;
do not edit by hand: rerun it.

A generated project's training, resume after kills and signals, presets (compile, bf16,
DDP, FSDP2) and tools (export, tune, predict), each a row below, on architectures users
bring: Hugging Face transformers, peft, torch_geometric and MONAI models. Each is wrapped
the way a user would: a few lines of LightningModule with `example_input_array` set, and a
DataModule of its own (shuffling on, a few dozen samples made in memory that the model
learns; torchdata's `StatefulDataLoader` unless said otherwise). Nothing is downloaded:
transformers models are built from their config classes.

- **ResNet**: `ResNetForImageClassification(ResNetConfig(embedding_size=8, hidden_sizes=[8, 16],
  depths=[1, 1], num_labels=4))`: BatchNorm buffers, in-place activations;
- **ViT with dropout**: `ViTForImageClassification(ViTConfig(hidden_size=32, num_hidden_layers=2,
  num_attention_heads=2, intermediate_size=64, image_size=16, patch_size=4, num_labels=4,
  hidden_dropout_prob=0.1))`: random numbers drawn at every step;
- **GPT-2**: `GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=100,
  n_positions=32))`: tied input/output embeddings, dict batches with an attention mask;
- **BERT on a plain DataLoader**: `BertForSequenceClassification(BertConfig(hidden_size=32,
  num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_labels=2))` whose
  DataModule returns `torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True,
  num_workers=N)`, no generator: the library rebuilds it as a `StatefulDataLoader` in a
  one-process run; under DDP and FSDP2 Lightning's `DistributedSampler` orders each epoch;
- **GAN (manual optimization)**: two MLPs on 2-D points, `automatic_optimization = False`,
  two optimizers and two `manual_backward` per batch: the global step counts 2 per batch
  (its cells expect twice the steps), and a backward pass reaches half of the parameters;
- **LoRA (peft) on Llama**: `get_peft_model(LlamaForCausalLM(LlamaConfig(hidden_size=32,
  num_hidden_layers=2, ...)), LoraConfig(r=8, target_modules=[q, k, v, o, up, down]))`:
  the base frozen, only the adapters trained; `export` writes the full, unmerged state_dict;
- **GIN (torch_geometric)**: two `GINConv` layers and `global_add_pool` on PyG `Batch`
  objects from PyG's own `DataLoader` (rings against stars); exported with the dict example
  `{x, edge_index, batch}`, which has no shared batch dimension;
- **3-D UNet (MONAI)**: `UNet(spatial_dims=3, channels=(4, 8, 16), strides=(2, 2),
  num_res_units=1)` segmenting a box in 16^3 volumes.

The user files are in the template repository's `tests/conformance/`, the cells in the
library's `copier_lightning_core/testing/conformance.py`, which `tests/test_conformance.py`
runs on them (a project runs the same cells on its own model: `pytest -m conformance`);
each cell runs a rendered project's command line, that is the
library `copier-lightning-core` as the checkout's `core/` holds it. Each cell must work, or be refused before any work in one
paragraph naming the cause and the fix (and then only where the suite records that
reason). Each run is 2 epochs of 6 batches of 8, a checkpoint every 3 global steps, on CPU.
"Bit-identical" means `torch.equal` on every weight, buffer, optimizer and scheduler tensor
against one uninterrupted run with the same seed.

Cells marked **(CI)** are the fast subset the default suite runs (`bash scripts/test.sh`);
the whole matrix runs with:

```bash
bash scripts/test.sh -m conformance               # every cell (and only those)
.venv/bin/python scripts/conformance_page.py      # then rewrite this page from that run
bash scripts/test.sh tests/test_conformance.py -k "gpt2-compile"   # one cell
```
"""


def entry(cell: dict) -> str:
    outcome = {"fail": "**FAIL**"}.get(cell["outcome"], cell["outcome"])
    seconds = "" if cell["seconds"] is None else f", {cell['seconds']:.0f} s"
    return f"{outcome}{seconds}{' (CI)' if cell['fast'] else ''}"


def render(results: dict) -> str:
    run, archs, what = results["run"], results["archs"], results["cells_what"]
    cells = {(cell["arch"], cell["cell"]): cell for cell in results["cells"]}
    versions = ", ".join(f"{name} {version}" for name, version in run["versions"].items())
    load = " / ".join(map(str, run["load_average"]))
    lines = [
        INTRO,
        "## Latest run",
        "",
        f"- date: {run['date']}, template commit {run['commit']}",
        f"- command: `{run['command']}`",
        f"- machine: {run['machine']}, load average (1 / 5 / 15 min) at the end: {load}",
        f"- versions: {versions}",
        f"- wall time of the cells: {run['seconds']:.0f} s (a cell's time includes the shared"
        " runs it was first to need, e.g. the uninterrupted run its resume is compared with)",
        "",
        f"{HEADER} {' | '.join(archs.values())} |",
        "|---|---|" + "---|" * len(archs),
    ]
    for name, text in what.items():
        row = [entry(cells[(arch, name)]) for arch in archs]
        lines.append(f"| `{name}` | {text} | {' | '.join(row)} |")
    for outcome, title in (("fail", "Failures"), ("refused", "Refusals (expected)")):
        found = [cell for cell in results["cells"] if cell["outcome"] == outcome]
        if found:
            lines += ["", f"## {title}", ""]
            lines += [f"- `{c['arch']}-{c['cell']}`: {c['detail']}" for c in found]
    return "\n".join(lines) + "\n"


def parse_page(text: str) -> tuple[list[str], list[tuple[str, str, list[str]]]]:
    """The page's architectures (column labels) and rows: (cell, what it proves, one entry
    per architecture)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(HEADER))
    split = [part.strip() for part in lines[start].strip("|").split("|")]
    archs = split[2:]
    rows = []
    for line in lines[start + 2 :]:
        if not line.startswith("| `"):
            break
        parts = [part.strip() for part in line.strip().strip("|").split("|")]
        rows.append((parts[0].strip("`"), parts[1], parts[2:]))
    return archs, rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--output", type=Path, default=PAGE)
    args = parser.parse_args()
    if not args.results.is_file():
        raise SystemExit(
            f"error: no results at {args.results}: run the matrix first "
            "(`bash scripts/test.sh -m conformance`)."
        )
    args.output.write_text(render(json.loads(args.results.read_text())))
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
