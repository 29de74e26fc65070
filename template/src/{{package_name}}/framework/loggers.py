# Managed by the template; local edits are merged on update.
"""Lightning's loggers, with `save_dir` defaulting to the run root.

Lightning's CSV and TensorBoard loggers require a `save_dir`, and wandb's defaults to the
working directory. A `save_dir` written in a config would pin logs to one place and
`--trainer.default_root_dir` would no longer move them, so these subclasses accept
`save_dir: null` and the CLI fills it with `trainer.default_root_dir`. Everything of a
run then lives under that root, and two runs with different roots share no file.
"""

import os
from typing import Any

from lightning.pytorch import loggers


class CSVLogger(loggers.CSVLogger):
    def __init__(self, save_dir: str | None = None, name: str = "csv", **kwargs: Any) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), name=name, **kwargs)


class TensorBoardLogger(loggers.TensorBoardLogger):
    def __init__(
        self, save_dir: str | None = None, name: str = "tensorboard", **kwargs: Any
    ) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), name=name, **kwargs)


class WandbLogger(loggers.WandbLogger):
    def __init__(self, save_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), **kwargs)
