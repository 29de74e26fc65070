"""`TrialPruning`: the callback a sweep adds to each trial's `fit` when its spec names a pruner.

It loads the sweep's study from its journal file and hands the trial to optuna-integration's
`PyTorchLightningPruningCallback`, which reports `monitor` after every validation (once
per epoch: Optuna's step is the epoch) and asks the pruner whether to stop. That callback
ends a pruned trial by raising `optuna.TrialPruned` inside the Trainer: the process would
exit 1 with a traceback, like a crash. Here the exception becomes a clean stop instead
(`trainer.should_stop`, so checkpoints and logs are complete) and a `pruned_at_epoch` user
attribute on the trial, which the sweep reads to record the trial as pruned.

Under DDP (more than one process per trial) it does nothing but warn: optuna-integration
reports from several processes only through a database storage, and the sweep's study is
a journal file. Such trials train their full budget and are judged by their best value.
"""

from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.utilities import rank_zero_warn

from .spec import make_pruner
from .study import trial_id

PRUNED_AT = "pruned_at_epoch"


class TrialPruning(L.Callback):
    """Reports `monitor` to trial `trial` of the study in `journal`; stops it when pruned.

    Args:
        journal: the sweep's `optuna.journal`.
        study_name: the study in it (the sweep's name).
        trial: the trial's number.
        monitor: the metric reported after each validation.
        pruner: the spec's `pruner:` section (name and arguments).
    """

    def __init__(
        self,
        journal: str,
        study_name: str,
        trial: int,
        monitor: str,
        pruner: dict[str, Any] | None = None,
    ) -> None:
        self.journal, self.study_name, self.number = journal, study_name, trial
        self.monitor, self.pruner = monitor, pruner
        self._inner: Any = None
        self._trial: Any = None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if stage != "fit" or self._inner is not None:
            return
        if trainer.world_size > 1:
            rank_zero_warn(
                f"Sweep trial {self.number} runs on {trainer.world_size} processes (DDP): "
                "pruning is off for it (Optuna's Lightning callback prunes under DDP only "
                "with a database storage). It trains its full budget."
            )
            return
        import optuna
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend
        from optuna_integration import PyTorchLightningPruningCallback

        storage = JournalStorage(JournalFileBackend(self.journal))
        study = optuna.load_study(
            study_name=self.study_name,
            storage=storage,
            sampler=optuna.samplers.RandomSampler(),  # never samples here; cheap to build
            pruner=make_pruner(self.pruner, Path(self.journal)),
        )
        self._trial = optuna.trial.Trial(study, trial_id(storage, self.study_name, self.number))
        self._inner = PyTorchLightningPruningCallback(self._trial, self.monitor)

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._inner is not None:
            self._inner.on_fit_start(trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._inner is None:
            return
        import optuna

        try:
            self._inner.on_validation_end(trainer, pl_module)
        except optuna.TrialPruned:
            self._trial.set_user_attr(PRUNED_AT, pl_module.current_epoch)
            trainer.should_stop = True
