"""What the framework tests share: the fast CLI options, the flavours, a run root.

Tests run on the modules of `toy.py`, never on the example in `src/` (yours to replace):
each flavour names its module, its data and the metric its checkpoints are judged by.
"""

from dataclasses import dataclass
from pathlib import Path

from copier_lightning_core.cli import ProjectCLI

FAST = [
    "--trainer.max_epochs=1",
    "--trainer.accelerator=cpu",
    "--trainer.devices=1",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
]
# Every argument of the toys is given, so all of a test's values read here. (Named in place of
# configs/default.yaml's classes, the toys get none of its values: lightning_cli.py.)
FLAVOURS = {
    "tabular": [
        "--model=toy.ToyRegressor",
        "--model.num_features=8",
        "--model.hidden=16",
        "--model.lr=0.01",
        "--data=toy.ToyTabularData",
        "--data.num_features=8",
        "--data.num_samples=512",
        "--data.batch_size=64",
        "--checkpoint.monitor=val/loss",
        "--checkpoint.mode=min",
    ],
    "sequence": [
        "--model=toy.ToySequenceClassifier",
        "--model.num_classes=3",
        "--model.vocab_size=30",
        "--model.dim=16",
        "--model.lr=0.03",
        "--data=toy.ToySequenceData",
        "--data.num_classes=3",
        "--data.vocab_size=30",
        "--data.length=12",
        "--data.train_size=384",
        "--data.val_size=96",
        "--data.batch_size=32",
        "--data.num_workers=0",
        "--checkpoint.monitor=valid_nll",
        "--checkpoint.mode=min",
    ],
}
PREDICT_SIZES = {"tabular": 64, "sequence": 96}
# Not a flavour (the tests of every flavour do not run it): toy.ToyDenoiser, whose network
# is required and not in its hyperparameters, whose scheduler needs a validation metric.
DENOISER = [
    "--model=toy.ToyDenoiser",
    "--model.net=torch.nn.Linear",
    "--model.net.in_features=32",
    "--model.net.out_features=32",
    "--model.noise=0.3",
    "--model.lr=0.01",
    "--data=toy.ToySignals",
    "--data.length=32",
    "--data.num_samples=256",
    "--data.batch_size=32",
    "--checkpoint.monitor=val_snr_db",
    "--checkpoint.mode=max",
]
TOYS = {**FLAVOURS, "denoiser": DENOISER}


def toy_classes(flavour: str) -> list[str]:
    """The classes a flavour names (`--model=toy.X`, `--data=toy.Y`): what `export --trust` takes."""
    names = ("--model=", "--data=")
    return [arg.split("=", 1)[1] for arg in TOYS[flavour] if arg.startswith(names)]


@dataclass
class Run:
    """One run root and the arguments that aim a command at it."""

    flavour: str
    root: Path
    args: list[str]

    def cli(self, command: str, *extra: str) -> ProjectCLI:
        return ProjectCLI(args=[command, *self.args, *extra])

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"
