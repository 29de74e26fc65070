"""The copy of the training state that `NonFiniteGuard(keep_copy=True)` keeps, to undo a
bad step on the device: every parameter, optimizer state and buffer, in a few flat groups.

Only the opt-in mode uses it: the copy costs about as much memory as the state itself
(see NonFiniteGuard for the figure).
"""

from __future__ import annotations  # GuardedState, defined below, in a signature

import math
from collections.abc import Iterable

import torch

from ...platform.private_apis import copy_each


class Group:
    """Tensors of one device and dtype, gathered into one flat tensor and written back.

    One `torch.cat` and one `copy_each` per group, instead of a call per tensor: what
    keeps the guard cheap on a small model, where the per-call cost dominates.
    """

    def __init__(self, keys: list[int], tensors: list[torch.Tensor]) -> None:
        self.keys = keys
        self.tensors = tensors
        # Views share the tensors' memory; a non-contiguous tensor is copied each time.
        self.contiguous = all(t.is_contiguous() for t in tensors)
        self.views = [t.detach().view(-1) if self.contiguous else t for t in tensors]
        self.sizes = [t.numel() for t in tensors]

    def gather(self) -> torch.Tensor:
        if self.contiguous:
            return torch.cat(self.views)
        return torch.cat([t.reshape(-1) for t in self.tensors])

    def write(self, flat: torch.Tensor) -> None:
        pieces = list(torch.split(flat, self.sizes))
        if self.contiguous:
            copy_each(self.views, pieces)
        else:
            for tensor, piece in zip(self.tensors, pieces, strict=True):
                tensor.copy_(piece.view(tensor.shape))

    def pieces(self, flat: torch.Tensor) -> dict[int, torch.Tensor]:
        return dict(zip(self.keys, torch.split(flat, self.sizes), strict=True))


class GuardedState:
    """The guarded tensors in flat groups, with a copy of the last good values of each.

    `here`: the groups on the flag's device, undone on the device with `torch.where`.
    `elsewhere`: the others, which the caller keeps a copy of per check instead.
    """

    def __init__(
        self,
        tensors: dict[int, torch.Tensor],
        device: torch.device,
        layout: tuple[int, ...],
        good: dict[int, torch.Tensor] | None = None,
    ) -> None:
        self.layout = layout
        by_kind: dict[tuple[torch.device, torch.dtype, bool], list[tuple[int, torch.Tensor]]] = {}
        for key, tensor in tensors.items():
            kind = (tensor.device, tensor.dtype, tensor.is_contiguous())
            by_kind.setdefault(kind, []).append((key, tensor))
        groups = [Group([k for k, _ in items], [t for _, t in items]) for items in by_kind.values()]
        self.here = [g for g in groups if g.tensors[0].device == device]
        self.others = [g for g in groups if g.tensors[0].device != device]
        self.good = [g.gather() if good is None else assemble(g, good) for g in self.here]

    def gather(self) -> list[torch.Tensor]:
        return [group.gather() for group in [*self.here, *self.others]]

    def magnitudes(self, current: list[torch.Tensor]) -> list[torch.Tensor]:
        """Per floating group on the flag's device, its largest magnitude: NaN if one is.

        abs().amax(), not vector_norm(inf): the same value, 25 times faster on a CPU.
        """
        return [
            flat.abs().amax()
            for flat in current[: len(self.here)]
            if flat.is_floating_point() and flat.numel()
        ]

    def worst_on_host(self, current: list[torch.Tensor]) -> float | None:
        """The largest magnitude of the floating groups on the flag's device, read on the
        host; a NaN or an infinity when there is one. None: no floating tensor there.

        amax and amin: two reductions that write nothing, where abs().amax() writes a
        temporary as large as the state.
        """
        extremes = [
            float(extreme)
            for flat in current[: len(self.here)]
            if flat.is_floating_point() and flat.numel()
            for extreme in (flat.amax(), flat.amin())
        ]
        if not extremes:
            return None
        return next((x for x in extremes if not math.isfinite(x)), max(map(abs, extremes)))

    def keep_or_undo(self, current: list[torch.Tensor], bad: torch.Tensor, on_host: bool) -> None:
        """Where the flag is up, put the good copy back; else the current values become it.

        `on_host`: the flag may be read on the host (where that waits for nothing).
        """
        if on_host:
            # Read on the host: the `where` and the write-back, a pass over the whole state
            # each, happen only to undo (two thirds of the check's cost on a small model).
            if bad:
                for group, good in zip(self.here, self.good, strict=True):
                    group.write(good)
            else:
                self.good = current[: len(self.here)]
            return
        for index, (group, flat) in enumerate(zip(self.here, current, strict=False)):
            torch.where(bad, self.good[index], flat, out=flat)
            group.write(flat)
            self.good[index] = flat

    def good_pieces(self) -> dict[int, torch.Tensor]:
        pieces: dict[int, torch.Tensor] = {}
        for group, flat in zip(self.here, self.good, strict=True):
            pieces |= group.pieces(flat)
        return pieces

    def elsewhere(
        self, current: list[torch.Tensor] | None = None
    ) -> list[tuple[Group, torch.Tensor]]:
        """The groups off the flag's device with their values now (from `current` if given)."""
        if current is None:
            return [(group, group.gather()) for group in self.others]
        return list(zip(self.others, current[len(self.here) :], strict=True))

    def put_back(self, kept: Iterable[tuple[Group, torch.Tensor]]) -> None:
        """Write values kept by `elsewhere` back (tensors made since then: zeros)."""
        pieces: dict[int, torch.Tensor] = {}
        for group, flat in kept:
            pieces |= group.pieces(flat)
        for group in self.others:
            group.write(assemble(group, pieces))


def assemble(group: Group, pieces: dict[int, torch.Tensor]) -> torch.Tensor:
    """A group's flat values from per-tensor pieces; a tensor without one gets zeros."""
    flat = [pieces.get(key) for key in group.keys]
    return torch.cat(
        [
            p if p is not None else torch.zeros(n, dtype=t.dtype, device=t.device)
            for p, n, t in zip(flat, group.sizes, group.tensors, strict=True)
        ]
    )
