"""Network building blocks: plain nn.Modules that know nothing of Lightning, data or devices.

YOURS to edit (the template never overwrites it on update). The LightningModule receives
its network from the config (`model.init_args.net`), so a new architecture is a new class
here plus a `class_path` in the config, not an edit of the training logic.
"""

from collections.abc import Sequence
from itertools import pairwise

from torch import nn


class ConvBlock(nn.Sequential):
    """3x3 convolution -> batch norm -> ReLU, optionally followed by 2x2 max pooling."""

    def __init__(self, in_channels: int, out_channels: int, pool: bool = True) -> None:
        layers: list[nn.Module] = [
            nn.Conv2d(in_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        ]
        if pool:
            layers.append(nn.MaxPool2d(2))
        super().__init__(*layers)


class ConvNet(nn.Sequential):
    """A stack of ConvBlocks, global average pooling and a linear classifier head.

    (N, in_channels, H, W) -> (N, num_classes) logits.
    """

    def __init__(
        self, in_channels: int = 3, num_classes: int = 8, widths: Sequence[int] = (16, 32, 64)
    ) -> None:
        channels = [in_channels, *widths]
        super().__init__(
            *(ConvBlock(c_in, c_out) for c_in, c_out in pairwise(channels)),
            nn.AdaptiveAvgPool2d(1),
            nn.Flatten(),
            nn.Linear(channels[-1], num_classes),
        )
