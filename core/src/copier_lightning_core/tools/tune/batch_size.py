"""Which batch size to recommend from measured throughput and memory, and why.

The largest batch that fits is rarely the one to train with: past the size that fills
the device, samples per second stop growing while each epoch gets fewer optimizer steps
and the memory left for anything else shrinks. So the recommendation is the smallest
size within `tolerance` of the best throughput measured, among the sizes that leave
memory headroom, and the reasons are written next to it.
"""

import math
from dataclasses import dataclass

from .measure import Measurement, percent


@dataclass
class Bounds:
    """What limited the sizes tried: the training set, the device memory, the trial count."""

    train_samples: int | None  # None: an iterable dataset without a length
    min_steps_per_epoch: int
    largest_that_fits: int | None  # Lightning's BatchSizeFinder; None: not searched (CPU)
    device: str

    @property
    def by_train_set(self) -> int | None:
        """The largest size that leaves `min_steps_per_epoch` steps in an epoch."""
        if self.train_samples is None:
            return None
        return max(1, self.train_samples // self.min_steps_per_epoch)


def candidates(smallest: int, max_trials: int, bounds: Bounds) -> list[int]:
    """Powers of two from `smallest`, at most `max_trials`, within the bounds."""
    limits = [bounds.by_train_set, bounds.largest_that_fits]
    largest = min(limit for limit in limits if limit is not None) if any(limits) else math.inf
    sizes = [smallest * 2**n for n in range(max_trials)]
    return [size for size in sizes if size <= largest] or [min(smallest, int(largest))]


def choose(measured: list[Measurement], tolerance: float, max_memory: float) -> Measurement:
    """The smallest size within `tolerance` of the best samples/s, among those with headroom.

    When every size measured uses more than `max_memory` of the device, the smallest.
    """
    roomy = [m for m in measured if m.memory is None or m.memory <= max_memory]
    if not roomy:
        return min(measured, key=lambda m: m.value)
    best = max(roomy, key=_rate)
    return min((m for m in roomy if _rate(m) >= (1 - tolerance) * _rate(best)), key=_value)


def reasons(
    chosen: Measurement,
    measured: list[Measurement],
    bounds: Bounds,
    tolerance: float,
    max_memory: float,
) -> list[str]:
    """The comment lines written above the recommended batch size."""
    roomy = [m for m in measured if m.memory is None or m.memory <= max_memory]
    best = max(roomy or measured, key=_rate)
    share = _rate(chosen) / _rate(best) if _rate(best) > 0 else float("nan")
    lines = [
        f"batch_size {chosen.value}: {percent(share)} of the best throughput measured "
        f"({_rate(best):.0f} samples/s at {best.value}); the smallest size within "
        f"{percent(tolerance)} of it."
    ]
    larger = [m for m in roomy if m.value > chosen.value]
    if larger and _rate(chosen) > 0:
        gain = max(_rate(m) for m in larger) / _rate(chosen) - 1
        more = f"at most {percent(gain)} more samples/s" if gain > 0 else "no more samples/s"
        lines.append(f"Larger sizes gave {more}, and fewer steps per epoch.")
    if chosen.memory is not None:
        lines.append(
            f"It used {percent(chosen.memory)} of the {bounds.device} memory (peak reserved / "
            f"total; sizes above {percent(max_memory)} are not recommended)."
        )
    else:
        lines.append(f"No device memory limit is measured on {bounds.device}.")
    if len(roomy) < len(measured):
        over = ", ".join(str(m.value) for m in measured if m not in roomy)
        lines.append(f"Over {percent(max_memory)} of device memory: {over}.")
    lines.append("samples/s by size: " + ", ".join(f"{m.value}: {_rate(m):.0f}" for m in measured))
    lines.append(_limit(measured, bounds, max_memory))
    return lines


def _limit(measured: list[Measurement], bounds: Bounds, max_memory: float) -> str:
    """Why no larger size was tried."""
    largest = max(m.value for m in measured)
    memory = max(measured, key=_value).memory
    if memory is not None and memory > max_memory:
        return f"Not tried above {largest}: it used over {percent(max_memory)} of device memory."
    by_train_set = bounds.by_train_set
    if by_train_set is not None and largest > by_train_set:
        return (
            f"Even {largest} leaves fewer than {bounds.min_steps_per_epoch} steps per epoch "
            f"({bounds.train_samples} training samples): lower --min-batch-size to time smaller."
        )
    if by_train_set is not None and 2 * largest > by_train_set:
        return (
            f"Not tried above {largest}: {bounds.min_steps_per_epoch} steps per epoch at least "
            f"({bounds.train_samples} training samples)."
        )
    if bounds.largest_that_fits is not None and 2 * largest > bounds.largest_that_fits:
        return f"Not tried above {largest}: the largest size that fits the device."
    return f"Not tried above {largest}: --max-trials sizes."


def _rate(measurement: Measurement) -> float:
    rate = measurement.samples_per_sec
    return rate if math.isfinite(rate) else 0.0


def _value(measurement: Measurement) -> int:
    return int(measurement.value)
