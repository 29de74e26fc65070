"""Health checks for training, as Lightning callbacks (wired in configs/default.yaml).

Each one has one job, costs no device-to-host copy per step, and works with any
LightningModule: a missing optional hook (e.g. `num_classes`) narrows the check and says so.
"""

from .data_wait import DataWaitMonitor
from .errors import HealthCheckFailed
from .first_batch import FirstBatchCheck
from .gradients import GradientHealth
from .memory import MemoryStats
from .nonfinite import NonFiniteGuard

__all__ = [
    "DataWaitMonitor",
    "FirstBatchCheck",
    "GradientHealth",
    "HealthCheckFailed",
    "MemoryStats",
    "NonFiniteGuard",
]
