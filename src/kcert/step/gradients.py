"""The step's gradient as one output: every certified parameter's gradient, flattened and concatenated.

The optimizer consumes the gradient as one vector, and one output keeps the variance gate to one
tail fit per step instead of one per parameter (each at its own false-WARN rate: twenty parameters
of a small model made a correct step WARN somewhere most of the time). The bias gate still
localizes: one bucket per *parameter channel* (a row of a matrix, an element of a gain or bias, a
scalar parameter's one value), as :func:`kcert.gradients` buckets weight gradients, labelled with the
parameter's name in the step report. The diagnosis works per parameter on slices of the vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..case import Labels


@dataclass(frozen=True)
class GradientLayout:
    """Where each parameter's gradient sits in the concatenated vector, and its channels."""

    names: tuple[str, ...]
    shapes: tuple[tuple[int, ...], ...]
    offsets: tuple[int, ...]  # start of each parameter, then the total length
    channel_offsets: tuple[int, ...]  # first channel of each parameter, then the channel count
    dtype: torch.dtype

    @classmethod
    def of(cls, values: dict[str, torch.Tensor], names: tuple[str, ...]) -> GradientLayout:
        shapes = tuple(tuple(values[n].shape) for n in names)
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        channels = [s[0] if len(s) else 1 for s in shapes]
        dtype = values[names[0]].dtype
        for n in names[1:]:
            dtype = torch.promote_types(dtype, values[n].dtype)
        return cls(names, shapes, tuple(np.cumsum([0] + sizes).tolist()), tuple(np.cumsum([0] + channels).tolist()),
                   dtype)

    @property
    def size(self) -> int:
        return self.offsets[-1]

    @property
    def channels(self) -> int:
        return self.channel_offsets[-1]

    def flatten(self, grads) -> torch.Tensor:
        """The gradients (in ``names`` order) as one vector in the common dtype."""
        return torch.cat([g.reshape(-1).to(self.dtype) for g in grads])

    def slice(self, vector, index: int):
        """Parameter ``index``'s part of a flat vector (numpy or torch)."""
        return vector[self.offsets[index]:self.offsets[index + 1]]

    def channel_labels(self) -> torch.Tensor:
        """The bucket of every element: its parameter's first channel plus its row (leading index)."""
        parts = []
        for shape, first in zip(self.shapes, self.channel_offsets):
            if not shape:
                parts.append(torch.tensor([first]))
                continue
            rows = torch.arange(shape[0]) + first
            parts.append(rows.repeat_interleave(int(np.prod(shape[1:], dtype=np.int64))))
        return torch.cat(parts)

    def channel_name(self, channel: int) -> str:
        """``grad.<parameter>[row]`` of a bucket index."""
        i = int(np.searchsorted(self.channel_offsets, channel, side="right")) - 1
        row = channel - self.channel_offsets[i]
        return f"{self.names[i]}[{row}]" if self.shapes[i] else self.names[i]

    def buckets(self) -> Labels:
        labels = self.channel_labels()
        return Labels(lambda inputs, weights, ref_output: labels, count=self.channels, name="parameter channel")
