"""A DataModule as many users write one: plain torch DataLoaders with worker processes.

Its loaders do not go through `LoaderOptions`, and its worker count is not an argument
named `num_workers`: what the library sees of them, it sees only on the built loaders
(loader_hooks.py): the worker count, the signals workers ignore, an empty training set.

And code of a user's that refuses what it is given (`Refusal`), at each point of a run:
a DataModule's `setup`, a sample read in a loader's worker process, a callback mid-fit.
"""

import lightning as L
from torch.utils.data import DataLoader, Dataset

from copier_lightning_core import Refusal
from toy import ToyTabularData

DAMAGED = "sample {} of the training set is damaged (truncated file). Restore it from a backup."


class PlainLoadersData(ToyTabularData):
    """The tabular toy's data, in order, loaded by `loader_processes` workers per DataLoader."""

    def __init__(
        self,
        num_features: int = 8,
        num_samples: int = 512,
        batch_size: int = 64,
        loader_processes: int = 1,
    ) -> None:
        super().__init__(num_features, num_samples, batch_size)
        self.loader_processes = loader_processes

    def _loader(self, dataset) -> DataLoader:
        # Not shuffled: an empty set gives a loader of 0 batches (a shuffled one makes torch's
        # sampler refuse the empty set while the loader is built; the toys test that case).
        return DataLoader(
            dataset, batch_size=self.hparams.batch_size, num_workers=self.loader_processes
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set)


class DamagedSamples(Dataset):
    """A dataset whose every sample is refused when read, as a damaged file is."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, index: int) -> None:
        raise Refusal(DAMAGED.format(index))


class DamagedSamplesData(PlainLoadersData):
    """Its training samples are refused in the loader's worker processes."""

    def train_dataloader(self) -> DataLoader:
        return self._loader(DamagedSamples())


class RefusingSetupData(ToyTabularData):
    """Refuses in `setup`, on every process, before any batch."""

    SAYS = "--data.num_samples: the data folder holds no samples. Check the path."

    def setup(self, stage: str) -> None:
        raise Refusal(self.SAYS)


class RefuseAtStep(L.Callback):
    """Refuses once training has taken `step` steps (a check of the user's, mid-fit)."""

    SAYS = "the loss is no longer a number at step {}. Lower --model.lr."

    def __init__(self, step: int = 2) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: L.Trainer, *args: object) -> None:
        if trainer.global_step >= self.step:
            raise Refusal(self.SAYS.format(trainer.global_step))
