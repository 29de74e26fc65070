"""The resume tests' toys: one whose learning-rate schedule reads
`trainer.estimated_stepping_batches`, and the sequence data behind plain torch DataLoaders.
The callbacks that stop a run at a chosen point are the library's
(copier_lightning_core.testing.interrupts).
"""

import torch
from torch.utils.data import DataLoader, Dataset

from toy import ToySequenceClassifier, ToySequenceData


class ScheduledSequenceClassifier(ToySequenceClassifier):
    """The sequence toy with a one-cycle schedule over all steps, as a warmup schedule has.

    Reading `estimated_stepping_batches` in `configure_optimizers` builds the train loader
    before a checkpoint is restored (Lightning #20550): the case `ResumeState` handles.
    """

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        total = int(self.trainer.estimated_stepping_batches)
        schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, self.hparams.lr, total)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


class PlainSequenceData(ToySequenceData):
    """The sequence data served as most DataModules serve theirs: `DataLoader(shuffle=True)`,
    no generator, no `LoaderOptions` (the library rebuilds them as StatefulDataLoaders)."""

    def _loader(self, dataset: Dataset, shuffle: bool) -> DataLoader:
        batch_size, workers = self.hparams.batch_size, self.hparams.num_workers
        return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, num_workers=workers)
