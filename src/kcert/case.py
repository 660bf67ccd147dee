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
    # a value kept in its own dtype that the precision ladder still hands to a finer rung, upcast (exact: every
    # rung and the oracle see the same real values): a model module's recorded activations and weights, which
    # a kernel computes from at its inputs' precision (docs/method.md, "The precision ladder")
    follows_ladder_rungs: bool = False

    def sample(self, generator: torch.Generator, device: torch.device, precision: torch.dtype):
        raise NotImplementedError

    def widened(self, factor: float) -> Probe:
        """The same probe with a wider spread (used by the algebra gate's identity test)."""
        return self

    def scaled(self, factor: float) -> Probe:
        """The same probe with every floating value multiplied by ``factor`` (the algebra gate's
        small-magnitude points, where an eps or an offset dominates); integer and fixed probes are
        returned unchanged."""
        return self

    def describe(self) -> dict:
        raise NotImplementedError


@dataclass(frozen=True)
class Gaussian(Probe):
    """Independent N(shift, std**2) entries.

    The default shift of 0 is symmetric: docs/method.md (Gate 2) recommends shift=0.1 so
    multiplicative defects of odd kernels stay visible. Draws are rounded to the case dtype; the
    oracle gets an exact float64 copy of the same values.

    Parameters
    ----------
    shape : int or tuple of int
        The shape of one draw; an int is a one-dimensional shape. Sizes must be non-negative.
    shift : float, default 0.0
        The mean of every entry (finite).
    std : float, default 1.0
        The standard deviation of every entry (finite, > 0).

    Raises
    ------
    kcert.CaseError
        If ``shape`` is not a tuple of non-negative ints, or ``shift`` or ``std`` is out of range.

    See Also
    --------
    kcert.Uniform, kcert.Integers, kcert.Fixed, kcert.Custom : the other probes.

    Examples
    --------
    >>> import kcert
    >>> probe = kcert.Gaussian((2, 3), shift=0.1)
    >>> probe.shape
    (2, 3)
    >>> probe.describe()
    {'kind': 'Gaussian', 'shape': [2, 3], 'shift': 0.1, 'std': 1.0}
    >>> kcert.Gaussian(8, std=0.02).shape
    (8,)
    """

    shape: tuple[int, ...]
    shift: float = 0.0
    std: float = 1.0

    def __post_init__(self):
        object.__setattr__(self, "shape", _shape(self.shape, "Gaussian"))
        object.__setattr__(self, "shift", _finite(self.shift, "shift", "Gaussian"))
        object.__setattr__(self, "std", _finite(self.std, "std", "Gaussian", positive=True))

    def sample(self, generator, device, precision):
        x = torch.randn(self.shape, generator=generator, device=device, dtype=precision)
        if self.std != 1.0:  # x * 1.0 is x, bit for bit: a pass saved (docs/benchmarks.md, the probe draw)
            x.mul_(self.std)
        return x.add_(self.shift)  # kept for a shift of 0: x + 0.0 turns a -0.0 into +0.0

    def widened(self, factor):
        return Gaussian(self.shape, shift=self.shift * factor, std=self.std * factor)

    def scaled(self, factor):
        return self.widened(factor)

    def describe(self):
        return {"kind": "Gaussian", "shape": list(self.shape), "shift": self.shift, "std": self.std}


@dataclass(frozen=True)
class Uniform(Probe):
    """Independent U(low, high) entries.

    Draws are rounded to the case dtype; the oracle gets an exact float64 copy of the same values.

    Parameters
    ----------
    shape : int or tuple of int
        The shape of one draw; an int is a one-dimensional shape. Sizes must be non-negative.
    low, high : float, default -1.0 and 1.0
        The bounds of every entry (finite, ``low < high``).

    Raises
    ------
    kcert.CaseError
        If ``shape`` is not a tuple of non-negative ints, or the bounds are not finite with ``low < high``.

    Examples
    --------
    >>> import kcert
    >>> kcert.Uniform((2, 3), low=0.0, high=2.0).describe()
    {'kind': 'Uniform', 'shape': [2, 3], 'low': 0.0, 'high': 2.0}
    >>> kcert.Uniform((4,), low=1.0, high=1.0)
    Traceback (most recent call last):
        ...
    kcert.errors.CaseError: Uniform: low must be < high, got low=1.0, high=1.0
    """

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
        if self.high - self.low != 1.0:  # x * 1.0 and x + 0.0 (x >= 0) are x, bit for bit: passes saved
            x.mul_(self.high - self.low)
        return x.add_(self.low) if self.low != 0.0 else x

    def widened(self, factor):
        mid, half = (self.low + self.high) / 2, (self.high - self.low) / 2
        return Uniform(self.shape, mid - half * factor, mid + half * factor)

    def scaled(self, factor):
        return Uniform(self.shape, self.low * factor, self.high * factor)

    def describe(self):
        return {"kind": "Uniform", "shape": list(self.shape), "low": self.low, "high": self.high}


@dataclass(frozen=True)
class Integers(Probe):
    """Independent integers in [low, high): token ids, positions, labels. Kept as int64.

    Integer draws are not rounded to the case dtype; ref, prod and the oracle get the same tensor.

    Parameters
    ----------
    shape : int or tuple of int
        The shape of one draw; an int is a one-dimensional shape. Sizes must be non-negative.
    low, high : int, default 0 and 2
        The half-open range ``[low, high)`` of every entry (ints, ``low < high``).

    Raises
    ------
    kcert.CaseError
        If ``shape`` is not a tuple of non-negative ints, or ``low`` and ``high`` are not ints with
        ``low < high``.

    Examples
    --------
    >>> import torch, kcert
    >>> tokens = kcert.Integers((4,), high=10)
    >>> tokens.describe()
    {'kind': 'Integers', 'shape': [4], 'low': 0, 'high': 10}
    >>> tokens.sample(torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32).dtype
    torch.int64
    """

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

    ref and prod get it as it is; the oracle gets an exact float64 copy when it is floating. The
    same value is used for every replicate. :func:`kcert.gradients` does not differentiate a Fixed
    probe unless it is named in ``wrt``.

    Parameters
    ----------
    value : torch.Tensor
        The tensor, moved to the run's device.

    Attributes
    ----------
    shape : tuple of int
        The shape of ``value``.

    Raises
    ------
    kcert.CaseError
        If ``value`` is not a ``torch.Tensor``.

    Examples
    --------
    >>> import torch, kcert
    >>> positions = kcert.Fixed(torch.arange(4))
    >>> positions.shape
    (4,)
    >>> positions.describe()
    {'kind': 'Fixed', 'shape': [4], 'dtype': 'int64'}
    """

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
    """Any distribution: ``fn(generator, device)`` returns a tensor.

    Floating results are rounded to the case dtype like Gaussian draws; integer results are kept
    as they are. ``description`` is recorded in the report.

    Parameters
    ----------
    fn : callable
        ``fn(generator, device) -> torch.Tensor``: one draw, made with the ``torch.Generator`` given
        (seeded from the run's seed, and the replicate for an input, so a draw is reproducible) on
        ``device``.
    description : str, default "custom"
        What the distribution is, as the report shows it.
    shape : tuple of int or None, default None
        The shape of a draw, when known (a shape sweep reads it, and :func:`kcert.gradients` checks a
        cotangent probe against it); it is not checked against the draws.

    Raises
    ------
    kcert.CaseError
        When a draw is made, if ``fn`` does not return a tensor.

    Examples
    --------
    >>> import torch, kcert
    >>> def heavy_tailed(generator, device):
    ...     return torch.randn(8, generator=generator, device=device) ** 3
    >>> probe = kcert.Custom(heavy_tailed, "N(0, 1) cubed", shape=(8,))
    >>> probe.describe()
    {'kind': 'Custom', 'description': 'N(0, 1) cubed'}
    >>> probe.sample(torch.Generator().manual_seed(0), torch.device("cpu"), torch.float32).shape
    torch.Size([8])
    """

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

    def scaled(self, factor):
        """Floating draws multiplied by ``factor``, as :meth:`widened`."""
        return self.widened(factor)

    def describe(self):
        return {"kind": "Custom", "description": self.description}


# --- buckets ----------------------------------------------------------------------------------


class BucketSpec:
    """How an output's elements are grouped into buckets for the bias gate."""


@dataclass(frozen=True, init=False)
class Axes(BucketSpec):
    """Buckets named by the index along these output axes.

    ``Axes(-1)`` is one bucket per feature channel, ``Axes(1)`` per head of a (B, H, S, D) output,
    ``Axes(2, 3)`` per position x frequency pair. ``Axes()`` makes one bucket of the whole output.
    The bias gate tests each bucket's mean difference between prod and ref (docs/method.md).

    Parameters
    ----------
    *axes : int
        Output axes, negative counting from the last. Each must fit the output it buckets, once.

    Raises
    ------
    kcert.CaseError
        If an axis is not an int; when the case runs, if an axis does not fit the output's number
        of dimensions or is named twice.

    See Also
    --------
    kcert.Labels : data-dependent buckets.

    Examples
    --------
    >>> import kcert
    >>> kcert.Axes(-1)
    Axes(axes=(-1,))
    >>> kcert.Axes(-1).resolve(4, "output")  # the axes of a 4-dimensional output
    (3,)
    >>> kcert.Axes().describe()  # one bucket of the whole output
    {'kind': 'Axes', 'axes': []}
    """

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
    """Data-dependent buckets: ``fn(inputs, weights, ref_output)`` returns an integer tensor.

    The labels are broadcastable to the output (e.g. the expert each token was routed to).
    Negative labels exclude elements.

    Parameters
    ----------
    fn : callable
        ``fn(inputs, weights, ref_output) -> torch.Tensor``: the inputs and weights as dicts of name
        -> tensor, and ref's output; returns one integer label per element (broadcastable).
    count : int or None, default None
        Fixes the number of buckets (>= 1); otherwise it grows as labels appear.
    name : str, default "label"
        What a label is, as the report shows it (e.g. "expert").

    Raises
    ------
    kcert.CaseError
        If ``fn`` is not callable or ``count`` is not None or an int >= 1.

    See Also
    --------
    kcert.Axes : buckets named by output axes.

    Examples
    --------
    >>> import kcert
    >>> def routed_expert(inputs, weights, ref_output):
    ...     return inputs["expert"].unsqueeze(-1)  # (tokens, 1): one label per token row
    >>> kcert.Labels(routed_expert, count=4, name="expert").describe()
    {'kind': 'Labels', 'name': 'expert', 'count': 4}
    """

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

    kcert draws the ``inputs`` afresh for every replicate and the ``weights`` once per run, calls
    ``ref`` and ``prod`` on the same values (floating draws rounded to ``dtype``) and the oracle on
    exact float64 copies, then runs the three gates on the outputs (docs/method.md). Certify a case
    with :func:`kcert.certify` or :func:`kcert.assert_certified`, or define it at module level in a
    case file for ``kcert certify FILE``.

    Parameters
    ----------
    name : str
        The case's name (non-empty), as the reports and ``kcert certify --case NAME`` use it.
    ref, prod : callable
        Callables taking the inputs and weights as keyword arguments and returning a tensor or a
        tuple of tensors.
    inputs : dict of str -> probe
        At least one probe (:class:`kcert.Gaussian`, :class:`kcert.Uniform`, :class:`kcert.Integers`,
        :class:`kcert.Fixed`, :class:`kcert.Custom`) per argument name, redrawn for every replicate.
    weights : dict of str -> probe, default {}
        Probes drawn once per run and shared by ref, prod and the oracle. A name cannot be both an
        input and a weight.
    buckets : kcert.Axes or kcert.Labels, or a sequence of them, default ``kcert.Axes(-1)``
        One spec for every output, or a sequence with one spec per output.
    dtype : torch.dtype, default torch.bfloat16
        The working precision (float64, float32, float16 or bfloat16): floating draws are rounded to it.
    oracle : callable or None, default None
        Optional float64 math definition of ref (called with float64 copies of the same probe
        values, not in real mode, so roundings that belong to the model definition can be kept);
        default: ref evaluated in real mode.
    prod_math : callable or None, default None
        Optional real definition of prod for the algebra gate when prod cannot run in real mode
        (Triton, CUDA).
    output_names : sequence of str or None, default None
        One name per output, as the reports show it; default ``"output"``, or ``"output[i]"`` when
        the kernels return several outputs.
    description : str, default ""
        Free text recorded in the report.
    independent_leading_axis : bool, default False
        Declare that ref, prod and the oracle treat a new leading axis independently: called with
        every input stacked along a new axis 0 (weights unchanged), they return each output stacked
        the same way, slice ``i`` computed from slice ``i`` of the inputs alone (row-wise norms,
        activations, RoPE, attention written with negative axes). The runner then evaluates several
        replicates per kernel call (batch size from ``certify(batch_memory=...)``); each replicate
        still draws from its own seed and is reduced on its own slice, so the certificate is the one
        an unbatched run gives, up to the kernels' own batch dependence.
    dtypes_may_differ : bool, default False
        Declare that prod may return another dtype than ref (a float32 output where ref returns
        bf16); without it a differing output dtype is an interface change and the bias gate WARNs.
    prod_precisions : sequence of torch.dtype or None, default None
        The precisions the algebra gate's precision ladder tries prod at when prod cannot run in
        real mode (default: the working dtype, float32 and float64; each is tried, and a precision
        prod refuses is left out).
    accept_untested_algebra : bool, default False
        When no algebra test can run (an opaque prod at one precision), let the verdict rest on the
        bias and variance gates instead of WARN; the certificate states the limit (docs/verdicts.md).
    training_dtype : torch.dtype or None, default None
        The precision the training that consumes the outputs runs at (default: the case dtype when
        it is bf16 or float16, else bf16); harm is judged in ULPs of the coarser of each output's
        own format and this one, so a float32 output of a bf16 training is judged in bf16 ULPs.
    shapes : bool, sequence or None, default None
        A shape sweep (docs/kernelbench.md): the algebra gate and a short bias/variance run at other
        shapes, after the full run at the declared ones; a FAIL at any of them FAILs the
        certificate. ``True`` derives the shapes from the probes (non-powers of two, a size-1
        leading axis, row lengths past the block sizes 64/128/256); or a sequence whose items are
        ``{probe name: shape}`` (Gaussian, Uniform and Integers probes can be resized; sizes not
        named stay) or whole ``kcert.Case`` variants (other kernels or probes at another size, e.g.
        a module rebuilt at another width). Default None: no sweep.

    Attributes
    ----------
    training_format : str
        The name of the precision harm is judged for (``training_dtype`` or its default).

    Raises
    ------
    kcert.CaseError
        If the declaration is malformed: a kernel that is not callable, a dtype kcert does not
        know, a probe or bucket spec of the wrong kind, a name in both inputs and weights, a shape
        sweep that names an unknown or non-resizable probe. A number of bucket specs or output
        names that does not match the kernels' outputs is reported when the case runs.

    See Also
    --------
    kcert.certify, kcert.assert_certified : certify a case.
    kcert.gradients : the case of a case's gradients.

    Examples
    --------
    A reference that forms the gain ``(1 + w)`` in bf16, and a rewrite that commutes the addition
    (tiny shapes and 64 replicates, so that the example runs in a second; the default is 1024):

    >>> import torch, kcert
    >>> def ref(x, w):
    ...     return x * (1 + w)
    >>> def prod(x, w):
    ...     return x * (w + 1)
    >>> case = kcert.Case(
    ...     name="gain",
    ...     ref=ref,
    ...     prod=prod,
    ...     inputs={"x": kcert.Gaussian((4, 16), shift=0.1)},  # redrawn for every replicate
    ...     weights={"w": kcert.Gaussian((16,), std=0.02)},  # drawn once, shared
    ...     buckets=kcert.Axes(-1),  # one bucket per channel
    ...     dtype=torch.bfloat16,
    ... )
    >>> case.training_format
    'bfloat16'
    >>> print(kcert.certify(case, replicates=64).verdict)
    PASS
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
    dtypes_may_differ: bool = False
    prod_precisions: Sequence[torch.dtype] | None = None
    accept_untested_algebra: bool = False
    training_dtype: torch.dtype | None = None
    shapes: bool | Sequence[Mapping[str, Sequence[int]] | Case] | None = None

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
        if not isinstance(self.dtypes_may_differ, bool):
            raise CaseError(f"{where}: dtypes_may_differ must be True or False, got {self.dtypes_may_differ!r}")
        if not isinstance(self.independent_leading_axis, bool):
            raise CaseError(
                f"{where}: independent_leading_axis must be True or False, got {self.independent_leading_axis!r}"
            )
        if self.prod_precisions is not None:
            try:
                precisions = tuple(self.prod_precisions)
            except TypeError:
                precisions = (self.prod_precisions,)
            if not precisions or any(d not in _FLOATING for d in precisions):
                names = ", ".join(str(d) for d in _FLOATING)
                raise CaseError(f"{where}: prod_precisions must be a non-empty sequence of {names}, "
                                f"got {self.prod_precisions!r}")
            object.__setattr__(self, "prod_precisions", precisions)
        if not isinstance(self.accept_untested_algebra, bool):
            raise CaseError(
                f"{where}: accept_untested_algebra must be True or False, got {self.accept_untested_algebra!r}"
            )
        if self.training_dtype is not None and self.training_dtype not in _FLOATING:
            names = ", ".join(str(d) for d in _FLOATING)
            raise CaseError(f"{where}: training_dtype must be None or one of {names}, got {self.training_dtype!r}")
        if self.output_names is not None and not all(isinstance(n, str) for n in self.output_names):
            raise CaseError(f"{where}: output_names must be strings, got {self.output_names!r}")
        object.__setattr__(self, "shapes", self._checked_shapes(where))

    def _checked_shapes(self, where: str):
        """``shapes`` as None, True, or a tuple of ``{probe name: shape}`` dicts and ``Case`` variants."""
        shapes = self.shapes
        if shapes is None or shapes is False:
            return None
        if shapes is True:
            return True
        if isinstance(shapes, (str, bytes, Mapping)) or not isinstance(shapes, Sequence):
            raise CaseError(f"{where}: shapes must be None, True or a sequence of {{probe name: shape}} dicts or "
                            f"kcert.Case variants, got {type(shapes).__name__}")
        if not shapes:
            raise CaseError(f"{where}: shapes is an empty sequence; give None for no shape sweep")
        probes = {**self.inputs, **self.weights}
        out = []
        for i, item in enumerate(shapes):
            at = f"{where}: shapes[{i}]"
            if isinstance(item, Case):
                if item.shapes is not None:
                    raise CaseError(f"{at}: a shape variant cannot declare a shape sweep of its own")
                out.append(item)
                continue
            if not isinstance(item, Mapping) or not item:
                raise CaseError(f"{at} must be a non-empty {{probe name: shape}} dict or a kcert.Case, got {item!r}")
            sized = {}
            for name, shape in item.items():
                probe = probes.get(name)
                if probe is None:
                    raise CaseError(f"{at} names {name!r}, which is not an input or weight of the case "
                                    f"(they are {sorted(probes)})")
                if not isinstance(probe, (Gaussian, Uniform, Integers)):
                    raise CaseError(f"{at}: {name!r} is a {type(probe).__name__} probe, which cannot be drawn at "
                                    "another shape; give a kcert.Case variant instead")
                sized[name] = _shape(shape, f"{at}[{name!r}]")
            out.append(sized)
        return tuple(out)

    @property
    def training_format(self) -> str:
        """The precision the training that consumes the outputs runs at: ``training_dtype``, or by
        default the case's dtype when it is a 16-bit format, else bfloat16 (kcert judges harm for
        bf16 mixed-precision training unless told otherwise). Each output's harm unit is one ULP of
        the coarser of its own format and this one (docs/method.md, "The harm scale")."""
        dtype = self.training_dtype
        if dtype is None:
            dtype = self.dtype if self.dtype in (torch.bfloat16, torch.float16) else torch.bfloat16
        return str(dtype).removeprefix("torch.")

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
            "training_dtype": self.training_format,
            "description": self.description,
        }


def check_probe_sizes(case: Case) -> None:
    """A drawn probe with no elements leaves the kernels nothing to compute (and crashes deep inside)."""
    for group in ("inputs", "weights"):
        for name, probe in getattr(case, group).items():
            shape = getattr(probe, "shape", None)
            if isinstance(probe, (Gaussian, Uniform, Integers)) and 0 in tuple(shape):
                raise CaseError(f"case {case.name!r}: {group}[{name!r}] is {type(probe).__name__} of shape "
                                f"{tuple(shape)}, which has no elements; give every size >= 1")
