"""Lightning's loggers, with `save_dir` defaulting to the run root.

Lightning's CSV and TensorBoard loggers require a `save_dir`, and wandb's defaults to the
working directory. A `save_dir` written in a config would pin logs to one place and
`--trainer.default_root_dir` would no longer move them, so these subclasses accept
`save_dir: null` and the CLI fills it with `trainer.default_root_dir`. Everything of a
run then lives under that root, and two runs with different roots share no file.

A resumed fit logs to the version it started (run_record.continue_loggers): the CSV
logger then appends to that version's `metrics.csv`, where Lightning's would delete it,
and the MLflow logger continues its run.
"""

import csv
import os
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.fabric.utilities.cloud_io import get_filesystem
from lightning.pytorch import loggers
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only

from ..platform.private_apis import flat_hyperparameters, kept_experiment


class ContinuingWriter(ExperimentWriter):
    """Lightning's CSV writer, keeping the rows an earlier process wrote to this version."""

    def _check_log_dir_exists(self) -> None:
        # Lightning's version warns and deletes metrics.csv; this one reads its header, so
        # new rows are appended under the same columns (and new columns rewrite the header).
        # Through the filesystem Lightning writes with (fsspec: a local or a remote folder).
        fs = get_filesystem(self.metrics_file_path)
        if fs.isfile(self.metrics_file_path):
            with fs.open(self.metrics_file_path, "r", newline="") as file:
                self.metrics_keys = next(csv.reader(file), [])


class CSVLogger(loggers.CSVLogger):
    def __init__(self, save_dir: str | None = None, name: str = "csv", **kwargs: Any) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), name=name, **kwargs)

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        return kept_experiment(self, ContinuingWriter, self._writer)

    def _writer(self) -> ContinuingWriter:
        get_filesystem(self.root_dir).makedirs(self.root_dir, exist_ok=True)
        return ContinuingWriter(log_dir=self.log_dir)


class TensorBoardLogger(loggers.TensorBoardLogger):
    def __init__(
        self, save_dir: str | None = None, name: str = "tensorboard", **kwargs: Any
    ) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), name=name, **kwargs)


class WandbLogger(loggers.WandbLogger):
    def __init__(self, save_dir: str | None = None, **kwargs: Any) -> None:
        super().__init__(save_dir=save_dir or os.getcwd(), **kwargs)


# mlflow.set_tracking_uri, which Lightning's logger calls with the URI it was given, also
# writes that URI into os.environ["MLFLOW_TRACKING_URI"] (for subprocesses to inherit). Read
# back by the next MLFlowLogger of this process, it would pass for the user's setting and
# send a second fit into the first one's store. The URIs handed to Lightning are kept here,
# and the variable counts only with a value none of them wrote: the user's.
_HANDED_TO_MLFLOW: set[str] = set()
_USERS_TRACKING_URI = {"value": os.environ.get("MLFLOW_TRACKING_URI")}


def users_tracking_uri() -> str | None:
    """`MLFLOW_TRACKING_URI` as the user set it (or not), whatever MLflow wrote there since."""
    current = os.environ.get("MLFLOW_TRACKING_URI")
    if current not in _HANDED_TO_MLFLOW:  # set, changed or removed by the user
        _USERS_TRACKING_URI["value"] = current
    return _USERS_TRACKING_URI["value"]


class MLFlowLogger(loggers.MLFlowLogger):
    """Lightning's MLflow logger, storing runs in `<save_dir>/mlflow.db` unless told otherwise.

    Where runs go, the first that is set: `tracking_uri`, the `MLFLOW_TRACKING_URI`
    environment variable, else a SQLite store `<save_dir>/mlflow.db` with artifacts in
    `<save_dir>/mlartifacts/` (offline, one file per run root). MLflow 3 refuses its folder
    store (`file:./mlruns`, Lightning's default) unless `MLFLOW_ALLOW_FILE_STORE` is set,
    hence SQLite. A resumed fit passes the recorded `run_id` (run_record.continue_loggers)
    and keeps logging to the same run. MLflow refuses to change a parameter's value within
    a run, so there a hyperparameter logged by the first fit keeps its first value (the
    checkpoint's provenance holds the current one); new keys are logged.
    """

    def __init__(
        self,
        save_dir: str | None = None,
        tracking_uri: str | None = None,
        artifact_location: str | None = None,
        **kwargs: Any,
    ) -> None:
        users = users_tracking_uri()  # looked at by every logger, before MLflow writes it
        tracking_uri = tracking_uri or users
        # `rank` is set on the function by Lightning, which its overloads do not declare.
        if not tracking_uri and rank_zero_only.rank > 0:  # type: ignore[attr-defined]
            # Lightning's logger opens its store when built, on every process; only rank 0
            # logs. Processes started together (torchrun, SLURM) that all open a new SQLite
            # file race to create its tables and fail: the others get a store in memory.
            tracking_uri = "sqlite:///:memory:"
        elif not tracking_uri:
            folder = Path(save_dir or os.getcwd()).resolve()
            folder.mkdir(parents=True, exist_ok=True)  # SQLite makes the file, not its folder
            tracking_uri = f"sqlite:///{(folder / 'mlflow.db').as_posix()}"
            artifact_location = artifact_location or (folder / "mlartifacts").as_uri()
        _HANDED_TO_MLFLOW.add(tracking_uri)
        super().__init__(
            save_dir=save_dir,
            tracking_uri=tracking_uri,
            artifact_location=artifact_location,
            **kwargs,
        )

    @rank_zero_only
    def log_hyperparams(self, params: Any) -> None:
        logged = self.experiment.get_run(self.run_id).data.params
        if logged:
            flat = flat_hyperparameters(params).items()
            params = {key: value for key, value in flat if key not in logged}
        super().log_hyperparams(params)
