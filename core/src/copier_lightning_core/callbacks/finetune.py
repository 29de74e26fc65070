"""Fine-tuning: start `fit` from another run's weights (`--init_from PATH`).

Unlike `--ckpt_path`, which resumes a run (optimizer, scheduler, counters, RNG), this loads
weights only, from a Lightning checkpoint or a safetensors file, into any LightningModule.
Tensors whose name and shape match are loaded; the rest are listed, so a renamed layer or
a new head is visible at once. `--freeze net.0 net.1` stops gradients of named submodules.
"""

from pathlib import Path
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_info

from ..checkpoints.load import load_checkpoint
from ..platform.refusal import Refusal


def read_weights(path: Path) -> dict[str, torch.Tensor]:
    """The state_dict of a `.ckpt` (its `state_dict`) or a `.safetensors` file."""
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        return load_file(path)
    weights: dict[str, torch.Tensor] = load_checkpoint(path)["state_dict"]
    return weights


def load_matching(
    module: torch.nn.Module, weights: dict[str, torch.Tensor]
) -> dict[str, list[str]]:
    """Load the tensors whose name and shape match; report what did not."""
    own = module.state_dict()
    weights = {key.replace("_orig_mod.", ""): value for key, value in weights.items()}
    matched = [k for k in own if k in weights and weights[k].shape == own[k].shape]
    shape_mismatched = [
        f"{k}: {tuple(weights[k].shape)} in file, {tuple(own[k].shape)} in model"
        for k in own
        if k in weights and weights[k].shape != own[k].shape
    ]
    module.load_state_dict({k: weights[k] for k in matched}, strict=False)
    tied = _other_names(module)  # a tied weight is written once (export), under one name
    return {
        "matched": matched,
        "missing": [k for k in own if k not in weights and not tied[k] & set(matched)],
        "unexpected": [k for k in weights if k not in own],
        "shape_mismatched": shape_mismatched,
    }


def _other_names(module: torch.nn.Module) -> dict[str, set[str]]:
    """name -> the other names of the same tensor (tied weights; usually none)."""
    names: dict[int, set[str]] = {}
    state = module.state_dict(keep_vars=True)
    for name, tensor in state.items():
        names.setdefault(id(tensor), set()).add(name)
    return {name: names[id(tensor)] - {name} for name, tensor in state.items()}


class InitFromWeights(L.Callback):
    """Loads weights at the start of `fit` (a resume's `--ckpt_path` still wins: it loads later).

    Args:
        path: a `.ckpt` or `.safetensors` file.
        freeze: names of submodules (as in `model.named_modules()`) to freeze.
        weights: the file's weights when they have been read already; else read at setup.
    """

    def __init__(
        self,
        path: str | Path,
        freeze: list[str] | None = None,
        weights: dict[str, torch.Tensor] | None = None,
    ) -> None:
        self.path = Path(path)
        self.freeze = freeze or []
        self.report: dict[str, Any] = {}
        self._weights = weights  # the file's, read already (the run plan); let go once loaded

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit":
            return
        weights, self._weights = self._weights, None
        if weights is None:
            weights = read_weights(self.path)
        self.report = load_matching(pl_module, weights)
        lines = [f"--init_from {self.path}: {len(self.report['matched'])} tensors loaded"]
        for kind in ("missing", "unexpected", "shape_mismatched"):
            if self.report[kind]:
                lines.append(f"  {kind} ({len(self.report[kind])}): {', '.join(self.report[kind])}")
        for name in self.freeze:
            try:
                submodule = pl_module.get_submodule(name)
            except AttributeError:
                names = ", ".join(n for n, _ in pl_module.named_children())
                raise Refusal(
                    f"--freeze {name}: the model has no submodule of that name. "
                    f"Its top-level submodules are: {names}."
                ) from None
            submodule.requires_grad_(False)
            lines.append(f"  frozen: {name}")
        rank_zero_info("\n".join(lines))
