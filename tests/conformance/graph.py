"""A user's graph network: torch_geometric's GIN on PyG `Batch` objects.

What it brings the library: batches that are neither tensors nor tuples nor dicts but
PyG `Batch` objects (graphs of different sizes glued into one: node features `x`, edges
`edge_index`, and `batch`, the graph of each node), made by PyG's own DataLoader (a
subclass of torch's, with PyG's collate function); inputs without a shared first
dimension (nodes, edges). The task: graph classification, rings (label 0) against stars
(label 1) of 5 to 10 nodes, with noise in the node features: the degrees tell them apart.
Made in memory from a seed. tests/test_conformance.py copies this file into a rendered
project's package.
"""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn
from torch_geometric.data import Batch, Data
from torch_geometric.loader import DataLoader
from torch_geometric.nn import GINConv, global_add_pool

FEATURES, CLASSES = 4, 2


def ring_or_star(label: int, nodes: int, generator: torch.Generator) -> Data:
    """A ring (label 0) or a star (label 1) of `nodes` nodes, edges both ways."""
    if label == 0:
        source = torch.arange(nodes)
        target = (source + 1) % nodes
    else:
        source = torch.zeros(nodes - 1, dtype=torch.long)
        target = torch.arange(1, nodes)
    edge_index = torch.stack([torch.cat([source, target]), torch.cat([target, source])])
    noise = 0.1 * torch.randn(nodes, FEATURES - 1, generator=generator)
    x = torch.cat([torch.ones(nodes, 1), noise], dim=1)
    return Data(x=x, edge_index=edge_index, y=torch.tensor([label]))


def graphs(count: int, seed: int) -> list[Data]:
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, CLASSES, (count,), generator=generator).tolist()
    sizes = torch.randint(5, 11, (count,), generator=generator).tolist()
    return [ring_or_star(y, n, generator) for y, n in zip(labels, sizes, strict=True)]


class RingsAndStars(L.LightningDataModule):
    def __init__(self, batch_size: int = 8, num_workers: int = 0, train_size: int = 48) -> None:
        super().__init__()
        self.batch_size, self.num_workers, self.train_size = batch_size, num_workers, train_size

    def setup(self, stage: str) -> None:
        self.train_set = graphs(self.train_size, seed=1)
        self.val_set = graphs(16, seed=2)

    def _loader(self, dataset: list[Data], shuffle: bool) -> DataLoader:
        return DataLoader(
            dataset, batch_size=self.batch_size, shuffle=shuffle, num_workers=self.num_workers
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, shuffle=False)

    def test_dataloader(self) -> DataLoader:
        return self.val_dataloader()

    def predict_dataloader(self) -> DataLoader:
        return self.val_dataloader()


def gin_layer(inputs: int, width: int) -> GINConv:
    return GINConv(nn.Sequential(nn.Linear(inputs, width), nn.ReLU(), nn.Linear(width, width)))


class GraphClassifier(L.LightningModule):
    def __init__(self, lr: float = 0.01, width: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.convs = nn.ModuleList([gin_layer(FEATURES, width), gin_layer(width, width)])
        self.head = nn.Linear(width, CLASSES)
        two = [ring_or_star(label, 6, torch.Generator().manual_seed(0)) for label in (0, 1)]
        example = Batch.from_data_list(two)
        self.example_input_array = {
            "x": example.x,
            "edge_index": example.edge_index,
            "batch": example.batch,
        }

    def forward(
        self, x: torch.Tensor, edge_index: torch.Tensor, batch: torch.Tensor
    ) -> torch.Tensor:
        for conv in self.convs:  # x: (nodes, features) -> (nodes, width)
            x = F.relu(conv(x, edge_index))
        return self.head(global_add_pool(x, batch))  # (graphs, CLASSES)

    def _loss(self, batch: Batch) -> torch.Tensor:
        return F.cross_entropy(self(batch.x, batch.edge_index, batch.batch), batch.y)

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._loss(batch)

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        self.log("val_loss", self._loss(batch), batch_size=batch.num_graphs)

    def test_step(self, batch: Batch, batch_idx: int) -> None:
        self.log("test_loss", self._loss(batch), batch_size=batch.num_graphs)

    def predict_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self(batch.x, batch.edge_index, batch.batch).argmax(-1)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr)
