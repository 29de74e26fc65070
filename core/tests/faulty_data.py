"""A DataModule as many users write one: plain torch DataLoaders with worker processes.

Its loaders do not go through `LoaderOptions`, and its worker count is not an argument
named `num_workers`: what the library sees of them, it sees only on the built loaders
(loader_hooks.py): the worker count, the signals workers ignore, an empty training set.
"""

from torch.utils.data import DataLoader

from toy import ToyTabularData


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
