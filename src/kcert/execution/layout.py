"""How one output is bucketed (:class:`OutputLayout`): fixed by the first replicate, read by the
reduction (:mod:`.outputs`), the accumulators (:mod:`.accumulator`) and the checkpoint codec."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..case import Axes, BucketSpec, Labels
from . import bitwise


@dataclass(frozen=True)
class OutputLayout:
    """How one output is bucketed; fixed by the first replicate."""

    index: int
    name: str
    shape: tuple[int, ...]
    dtype: torch.dtype  # ref's output dtype: ULPs follow it
    prod_dtype: torch.dtype
    spec: BucketSpec
    bucket_axes: tuple[int, ...]  # empty for Labels
    bucket_shape: tuple[int, ...]

    @property
    def bitwise_comparable(self) -> bool:
        """Whether L0 compares prod's bits with ref's (one floating format on both sides)."""
        return bitwise.comparable(self.dtype, self.prod_dtype)

    @property
    def buckets(self) -> int | None:
        return int(np.prod(self.bucket_shape)) if isinstance(self.spec, Axes) else self.spec.count

    @property
    def dtype_name(self) -> str:
        return str(self.dtype).removeprefix("torch.")

    def bucket_label(self, g: int) -> str:
        """Numpy-style index of the bucket: ``[..., 17]`` for channel 17, ``[:, 3]`` for head 3."""
        if isinstance(self.spec, Labels):
            return f"{self.spec.name} {g}"
        if not self.bucket_axes:
            return "[...]"
        index = dict(zip(self.bucket_axes, (int(i) for i in np.unravel_index(g, self.bucket_shape))))
        parts = [str(index[a]) if a in index else ":" for a in range(len(self.shape))]
        while parts and parts[-1] == ":":
            parts.pop()
        if len(parts) > 2 and parts[0] == ":" and parts[1] == ":":
            first = next(i for i, p in enumerate(parts) if p != ":")
            parts = ["..."] + parts[first:]
        return "[" + ", ".join(parts) + "]"
