"""What a user declares: the kernel pair, the probe distribution, the weights, the buckets."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from .errors import CaseError

_FLOATING = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


def _shape(shape, where: str) -> tuple[int, ...]:
    if isinstance(shape, int):
        shape = (shape,)
    try:
        shape = tuple(int(s) for s in shape)
    except TypeError:
        raise CaseError(f"{where}: shape must be a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shape):
        raise CaseError(f"{where}: shape must have non-negative sizes, got {shape}")
    return shape


def _finite(value, name: str, where: str, positive: bool = False) -> float:
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise CaseError(f"{where}: {name} must be a number, got {value!r}") from None
    if not math.isfinite(value) or (positive and value <= 0):
        rule = "a finite number > 0" if positive else "a finite number"
        raise CaseError(f"{where}: {name} must be {rule}, got {value!r}")
    return value


# --- probes -----------------------------------------------------------------------------------


class Probe:
    """A distribution of one kernel argument. ``sample`` returns a float32/float64 tensor for
    floating probes (rounded to the case dtype by the runner) or a tensor kept as it is."""

    rounds_to_case_dtype: bool = True

    def sample(self, generator: torch.Generator, device: torch.device, precision: torch.dtype):
        raise NotImplementedError

    def widened(self, factor: float) -> Probe:
        """The same probe with a wider spread (used by the algebra gate's identity test)."""
        return self

    def describe(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class Gaussian(Probe):
    """Independent N(shift, std**2) entries. The default shift of 0 is symmetric: METHOD.md
    section 3 recommends shift=0.1 so multiplicative defects of odd kernels stay visible."""

    shape: tuple[int, ...]
    shift: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "shape", _shape(self.shape, "Gaussian"))
        object.__setattr__(self, "shift", _finite(self.shift, "shift", "Gaussian"))
        object.__setattr__(self, "std", _finite(self.std, "std", "Gaussian", positive=True))

    def sample(self, generator, device, precision):
        x = torch.randn(self.shape, generator=generator, device=device, dtype=precision)
        return x.mul_(self.std).add_(self.shift)

    def widened(self, factor):
        return Gaussian(self.shape, shift=self.shift * factor, std=self.std * factor)

    def describe(self):
        return {"kind": "Gaussian", "shape": list(self.shape), "shift": self.shift, "std": self.std}


@dataclass(frozen=True)
class Uniform(Probe):
    """Independent U(low, high) entries."""

    shape: tuple[int, ...]
    low: float = -1.0
    high: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "shape", _shape(self.shape, "Uniform"))
        low = _finite(self.low, "low", "Uniform")
        high = _finite(self.high, "high", "Uniform")
        if not low < high:
            raise CaseError(f"Uniform: low must be < high, got low={low}, high={high}")
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def sample(self, generator, device, precision):
        x = torch.rand(self.shape, generator=generator, device=device, dtype=precision)
        return x.mul_(self.high - self.low).add_(self.low)

    def widened(self, factor):
        mid, half = (self.low + self.high) / 2, (self.high - self.low) / 2
        return Uniform(self.shape, mid - half * factor, mid + half * factor)

    def describe(self):
        return {"kind": "Uniform", "shape": list(self.shape), "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Integers(Probe):
    """Independent integers in [low, high): token ids, positions, labels. Kept as int64."""

    shape: tuple[int, ...]
    low: int = 0
    high: int = 2

    rounds_to_case_dtype = False

    def __post_init__(self):
        object.__setattr__(self, "shape", _shape(self.shape, "Integers"))
        if not (isinstance(self.low, int) and isinstance(self.high, int) and self.low < self.high):
            raise CaseError(
                f"Integers: low and high must be ints with low < high, got {self.low!r}, {self.high!r}"
            )

    def sample(self, generator, device, precision):
        return torch.randint(self.low, self.high, self.shape, generator=generator, device=device)

    def describe(self):
        return {"kind": "Integers", "shape": list(self.shape), "low": self.low, "high": self.high}


@dataclass(frozen=True, eq=False)
class Fixed(Probe):
    """A constant tensor kept in its own dtype (positions, labels, masks, a captured activation).
    ref and prod get it as it is; the oracle gets an exact float64 copy when it is floating."""

    value: torch.Tensor

    rounds_to_case_dtype = False

    def __post_init__(self):
        if not isinstance(self.value, torch.Tensor):
            raise CaseError(f"Fixed: value must be a torch.Tensor, got {type(self.value).__name__}")

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.value.shape)

    def sample(self, generator, device, precision):
        return self.value.to(device)

    def describe(self):
        return {"kind": "Fixed", "shape": list(self.value.shape), "dtype": str(self.value.dtype).removeprefix("torch.")}


@dataclass(frozen=True, eq=False)
class Custom(Probe):
    """Any distribution: ``fn(generator, device)`` returns a tensor. Floating results are rounded
    to the case dtype like Gaussian draws; ``description`` is recorded in the report."""

    fn: Callable[[torch.Generator, torch.device], torch.Tensor]
    description: str = "custom"
    shape: tuple[int, ...] | None = None

    def sample(self, generator, device, precision):
        out = self.fn(generator, device)
        if not isinstance(out, torch.Tensor):
            raise CaseError(f"Custom probe {self.description!r}: fn must return a tensor, got {type(out).__name__}")
        return out.to(precision) if out.is_floating_point() else out

    def widened(self, factor):
        """Floating draws scaled by ``factor`` (outliers and all); integer draws unchanged."""
        fn = self.fn

        def wide(generator, device):
            out = fn(generator, device)
            return out * factor if isinstance(out, torch.Tensor) and out.is_floating_point() else out

        return Custom(wide, f"{self.description} x{factor:g}", self.shape)

    def describe(self):
        return {"kind": "Custom", "description": self.description}


# --- buckets ----------------------------------------------------------------------------------


class BucketSpec:
    """How an output's elements are grouped into buckets for the bias gate."""


@dataclass(frozen=True, init=False)
class Axes(BucketSpec):
    """Buckets named by the index along these output axes: ``Axes(-1)`` is one bucket per
    feature channel, ``Axes(1)`` per head of a (B, H, S, D) output, ``Axes(2, 3)`` per position x
    frequency pair. ``Axes()`` makes one bucket of the whole output."""

    axes: tuple[int, ...]

    def __init__(self, *axes: int):
        for a in axes:
            if not isinstance(a, int) or isinstance(a, bool):
                raise CaseError(f"Axes: axes must be ints, got {a!r}")
        object.__setattr__(self, "axes", tuple(axes))

    def resolve(self, ndim: int, where: str) -> tuple[int, ...]:
        """The axes as non-negative indices of an ``ndim``-dimensional output."""
        out = []
        for a in self.axes:
            if not -ndim <= a < ndim:
                raise CaseError(f"{where}: Axes{self.axes} does not fit an output with {ndim} dimensions")
            out.append(a % ndim)
        if len(set(out)) != len(out):
            raise CaseError(f"{where}: Axes{self.axes} names an axis twice")
        return tuple(out)

    def describe(self):
        return {"kind": "Axes", "axes": list(self.axes)}


@dataclass(frozen=True, eq=False)
class Labels(BucketSpec):
    """Data-dependent buckets: ``fn(inputs, weights, ref_output)`` returns an integer tensor
    broadcastable to the output (e.g. the expert each token was routed to). Negative labels
    exclude elements. ``count`` fixes the number of buckets; otherwise it grows as labels appear."""

    fn: Callable[[Mapping[str, torch.Tensor], Mapping[str, torch.Tensor], torch.Tensor], torch.Tensor]
    count: int | None = None
    name: str = "label"

    def __post_init__(self):
        if not callable(self.fn):
            raise CaseError(f"Labels: fn must be callable, got {type(self.fn).__name__}")
        if self.count is not None and (not isinstance(self.count, int) or self.count < 1):
            raise CaseError(f"Labels: count must be an int >= 1, got {self.count!r}")

    def describe(self):
        return {"kind": "Labels", "name": self.name, "count": self.count}


# --- the case ---------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False, kw_only=True)
class Case:
    """One kernel pair to certify.

    ref, prod: callables taking the inputs and weights as keyword arguments and returning a
    tensor or a tuple of tensors. oracle: optional float64 math definition of ref (called with
    float64 copies of the same probe values, not in real mode, so roundings that belong to the
    model definition can be kept); default: ref evaluated in real mode. prod_math: optional real
    definition of prod for the algebra gate when prod cannot run in real mode (Triton, CUDA).
    buckets: one spec for every output, or a sequence with one spec per output.
    independent_leading_axis: declare that ref, prod and the oracle treat a new leading axis
    independently: called with every input stacked along a new axis 0 (weights unchanged), they
    return each output stacked the same way, slice ``i`` computed from slice ``i`` of the inputs
    alone (row-wise norms, activations, RoPE, attention written with negative axes). The runner
    then evaluates several replicates per kernel call (batch size from ``certify(batch_memory=...)``);
    each replicate still draws from its own seed and is reduced on its own slice, so the
    certificate is the one an unbatched run gives, up to the kernels' own batch dependence.
    """

    name: str
    ref: Callable[..., Any]
    prod: Callable[..., Any]
    inputs: Mapping[str, Probe]
    weights: Mapping[str, Probe] = field(default_factory=dict)
    buckets: BucketSpec | Sequence[BucketSpec] = field(default_factory=lambda: Axes(-1))
    dtype: torch.dtype = torch.bfloat16
    oracle: Callable[..., Any] | None = None
    prod_math: Callable[..., Any] | None = None
    output_names: Sequence[str] | None = None
    description: str = ""
    independent_leading_axis: bool = False

    def __post_init__(self):
        where = f"case {self.name!r}" if isinstance(self.name, str) else "case"
        if not isinstance(self.name, str) or not self.name.strip():
            raise CaseError(f"{where}: name must be a non-empty string, got {self.name!r}")
        for role in ("ref", "prod"):
            if not callable(getattr(self, role)):
                raise CaseError(f"{where}: {role} must be callable, got {type(getattr(self, role)).__name__}")
        for role in ("oracle", "prod_math"):
            value = getattr(self, role)
            if value is not None and not callable(value):
                raise CaseError(f"{where}: {role} must be callable or None, got {type(value).__name__}")
        if self.dtype not in _FLOATING:
            names = ", ".join(str(d) for d in _FLOATING)
            raise CaseError(f"{where}: dtype must be one of {names}, got {self.dtype!r}")
        for group in ("inputs", "weights"):
            probes = getattr(self, group)
            if not isinstance(probes, Mapping):
                raise CaseError(f"{where}: {group} must be a dict of name -> probe, got {type(probes).__name__}")
            for key, probe in probes.items():
                if not isinstance(key, str) or not key.isidentifier():
                    raise CaseError(f"{where}: {group} key {key!r} must be a valid argument name")
                if not isinstance(probe, Probe):
                    raise CaseError(
                        f"{where}: {group}[{key!r}] must be a kcert probe (Gaussian, Uniform, Integers, "
                        f"Fixed, Custom), got {type(probe).__name__}"
                    )
        if not self.inputs:
            raise CaseError(f"{where}: inputs must declare at least one probe (they are redrawn per replicate)")
        clash = set(self.inputs) & set(self.weights)
        if clash:
            raise CaseError(f"{where}: names {sorted(clash)} appear in both inputs and weights")
        specs = self.buckets if isinstance(self.buckets, (list, tuple)) else (self.buckets,)
        for spec in specs:
            if not isinstance(spec, BucketSpec):
                raise CaseError(
                    f"{where}: buckets must be kcert.Axes(...) or kcert.Labels(fn) (or one per output), got {spec!r}"
                )
        if not isinstance(self.independent_leading_axis, bool):
            raise CaseError(
                f"{where}: independent_leading_axis must be True or False, got {self.independent_leading_axis!r}"
            )
        if self.output_names is not None and not all(isinstance(n, str) for n in self.output_names):
            raise CaseError(f"{where}: output_names must be strings, got {self.output_names!r}")

    def bucket_spec(self, output_index: int, n_outputs: int) -> BucketSpec:
        if isinstance(self.buckets, (list, tuple)):
            if len(self.buckets) != n_outputs:
                raise CaseError(
                    f"case {self.name!r}: buckets gives {len(self.buckets)} specs but the kernels return "
                    f"{n_outputs} outputs"
                )
            return self.buckets[output_index]
        return self.buckets

    def output_name(self, index: int, n_outputs: int) -> str:
        if self.output_names is not None:
            if len(self.output_names) != n_outputs:
                raise CaseError(
                    f"case {self.name!r}: output_names has {len(self.output_names)} names but the kernels "
                    f"return {n_outputs} outputs"
                )
            return self.output_names[index]
        return "output" if n_outputs == 1 else f"output[{index}]"

    def describe(self) -> dict:
        return {
            "name": self.name,
            "dtype": str(self.dtype).removeprefix("torch."),
            "inputs": {k: p.describe() for k, p in self.inputs.items()},
            "weights": {k: p.describe() for k, p in self.weights.items()},
            "oracle": "given" if self.oracle is not None else "ref in real mode",
            "description": self.description,
        }
