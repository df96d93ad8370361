"""fasttrain's own small models: fast enough to train on a 2-core CPU in the demo and the tests."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import nn


def tiny_cnn(num_classes: int = 10, in_chans: int = 3, width: int = 32) -> nn.Module:
    """Four conv blocks with batch norm and a global pool: learns the built-in shapes set in a few epochs."""
    from torch import nn

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(
            nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True)
        )

    return nn.Sequential(
        block(in_chans, width),
        nn.MaxPool2d(2),
        block(width, width * 2),
        nn.MaxPool2d(2),
        block(width * 2, width * 4),
        nn.MaxPool2d(2),
        block(width * 4, width * 4),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(width * 4, num_classes),
    )


BUILTIN = {"tiny_cnn": tiny_cnn}
