"""The reference-operator catalogue: the single source of reference implementations.

Each family module (norms, rope, attention, softmax, moe, activations, linear, losses) defines
reference kernels written the way reference frameworks write them, and :class:`Operator`
entries that carry the bucket axis where defects localise and a probe contract able to trigger
the known defect classes. Controls, tests, benchmarks and docs import these; none copies them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import torch

from ..case import Axes, BucketSpec, Case, Probe


@dataclass(frozen=True)
class Operator:
    """A reference operator with its certification contract.

    ``reference``: the reference kernel (keyword arguments named like the probes).
    ``inputs`` / ``weights``: the probe contract, as a function of the contract's parameters
    (shapes, scales, positions...) returning ``{name: probe}``; call ``contract(**params)``.
    ``buckets``: where a defect of this operator localises (default: the last axis).
    ``triggers``: the defect classes the probe contract is built to trigger.
    """

    name: str
    family: str
    reference: Callable[..., Any]
    inputs: Callable[..., Mapping[str, Probe]]
    weights: Callable[..., Mapping[str, Probe]] = field(default=lambda **_: {})
    buckets: BucketSpec | tuple[BucketSpec, ...] | None = None
    triggers: tuple[str, ...] = ()
    description: str = ""

    def case(self, name: str, prod: Callable[..., Any], *, ref: Callable[..., Any] | None = None,
             dtype: torch.dtype = torch.bfloat16, oracle: Callable[..., Any] | None = None,
             buckets: BucketSpec | tuple[BucketSpec, ...] | None = None, description: str = "",
             output_names=None, **contract) -> Case:
        """A case certifying ``prod`` against this operator (or ``ref``) under its probe contract;
        ``contract`` parameters go to the probe builders."""
        return Case(
            name=name,
            ref=ref or self.reference,
            prod=prod,
            inputs=dict(self.inputs(**contract)),
            weights=dict(self.weights(**contract)),
            buckets=next(b for b in (buckets, self.buckets, Axes(-1)) if b is not None),
            dtype=dtype,
            oracle=oracle,
            output_names=output_names,
            description=description or self.description,
        )
