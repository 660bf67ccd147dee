"""Per-replicate reduction of one output to per-bucket summaries (torch side of the pipeline).

For every replicate the full outputs are reduced at once to O(buckets) numbers and O(1) error
norms, so no output is ever stored across replicates. Three paths give the same numbers (sums to
float64 round-off, extremes and ULP counts exactly): the compiled single pass of
:mod:`kcert.execution.fused` (numba on the CPU, Triton on a CUDA device: the same numbers, bit for
bit), chunked torch passes otherwise, and the masked path when a value is inf or nan.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from ..case import Axes, BucketSpec, Labels
from ..errors import CaseError, KernelError, ParameterError
from ..stats.bitwise import N_BINS
from . import bitwise, fused
from .accumulator import N_ROWS, ORACLE_ROWS, ROWS, ReplicateSummary
from .layout import OutputLayout

# The reduction's paths (summarize's ``path``): "auto" picks the fastest that applies.
PATHS = ("auto", "compiled", "chunked", "masked")


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def _kind(t: torch.Tensor) -> str:
    return "a complex" if t.is_complex() else "a boolean" if t.dtype == torch.bool else "an integer"


def check_interface(name: str, ref_out: torch.Tensor, prod_out: torch.Tensor, device: torch.device,
                    where: str) -> None:
    """Refuse, before any arithmetic, outputs that are an interface mismatch rather than a numerical
    difference: ref's output not floating, prod's not floating where ref's is (an integer, boolean or
    complex result), either side on another device than the run's (a ``meta`` tensor holds no values
    at all) or not a dense tensor. Called once, on the first replicate's outputs; later replicates
    are held to the layout it fixes (:func:`check_consistent`)."""
    for role, t in (("ref", ref_out), ("prod", prod_out)):
        if t.layout != torch.strided:
            raise KernelError(f"{where}: {name} of {role} is a {t.layout} tensor; return a dense (strided) tensor, "
                              "e.g. .to_dense()")
        if t.device != device and not (t.device.type == device.type and device.index is None):
            hint = ("a meta tensor has a shape but no values: the kernel allocated its result on the meta device"
                    if t.device.type == "meta" else f"move the result with .to({str(device)!r}) or run with --device "
                                                    f"{t.device.type}")
            raise KernelError(f"{where}: {name} of {role} is on device {t.device}, but the run's inputs are on "
                              f"{device}; {role} must return its result on the device of its inputs ({hint})")
    if not ref_out.is_floating_point():
        raise KernelError(f"{where}: {name} of ref has dtype {_dtype(ref_out)}; only floating outputs can be "
                          "certified (an integer result such as an argmax or a mask is compared for equality, not "
                          "statistically: leave it out of the case's outputs or certify the floating values it "
                          "is computed from)")
    if not prod_out.is_floating_point():
        raise KernelError(f"{where}: {name} of prod has dtype {_dtype(prod_out)} where ref's is {_dtype(ref_out)}: "
                          f"an interface mismatch (prod returns {_kind(prod_out)} tensor), not a numerical "
                          "difference, so it is not judged; make prod return a floating tensor like ref's")


def check_consistent(layout: OutputLayout, role: str, t: torch.Tensor, device: torch.device, where: str) -> None:
    """A later replicate's output must keep the first replicate's shape, dtype and device."""
    if tuple(t.shape) != layout.shape:
        raise KernelError(f"{where}: {layout.name} of {role} has shape {tuple(t.shape)}, expected {layout.shape}"
                          + (" (the shape of ref)" if role == "prod" else " (its shape at replicate 0)"))
    dtype = layout.prod_dtype if role == "prod" else layout.dtype
    if t.dtype != dtype:
        raise KernelError(f"{where}: {layout.name} of {role} has dtype {_dtype(t)}, at replicate 0 "
                          f"{str(dtype).removeprefix('torch.')}; a kernel must return one dtype for every draw")
    if t.device.type != device.type or t.layout != torch.strided:
        raise KernelError(f"{where}: {layout.name} of {role} is a {t.layout} tensor on device {t.device}; the run's "
                          f"outputs are dense tensors on {device}")


def make_layout(index: int, name: str, ref_out: torch.Tensor, prod_out: torch.Tensor, spec: BucketSpec,
                where: str, device: torch.device | None = None) -> OutputLayout:
    check_interface(name, ref_out, prod_out, ref_out.device if device is None else device, where)
    if ref_out.numel() == 0:
        raise KernelError(f"{where}: {name} of ref has shape {tuple(ref_out.shape)}, no elements: there is nothing "
                          "to compare; check the probe shapes")
    if isinstance(spec, Axes):
        axes = spec.resolve(ref_out.dim(), f"{where}, {name}")
        bucket_shape = tuple(ref_out.shape[a] for a in axes)
    else:
        axes, bucket_shape = (), ()
    return OutputLayout(index, name, tuple(ref_out.shape), ref_out.dtype, prod_out.dtype, spec, axes, bucket_shape)


def _error(a: torch.Tensor, oracle: torch.Tensor) -> torch.Tensor:
    """Elementwise |a - oracle|; identical values (same infinities, both nan) count as 0, any other
    disagreement involving a non-finite value as inf."""
    same = (a == oracle) | (torch.isnan(a) & torch.isnan(oracle))
    err = (a - oracle).abs()
    err = torch.where(same, torch.zeros((), dtype=err.dtype, device=err.device), err)
    return torch.nan_to_num(err, nan=float("inf"), posinf=float("inf"))  # (posinf defaults to the largest finite)


# Elements per chunk of the fast reduction. Its ~9 float64 scratch rows (4.5 MiB at 2^16) stay in
# the L2/L3 caches: at 2^18 they did not, and every pass ran at memory speed (2x slower measured).
CHUNK = 1 << 16


class Workspace:
    """Scratch buffers reused across replicates. A fresh 100 MB float64 temporary costs more in
    page faults than the arithmetic done in it, so the fast reduction works chunk by chunk in
    buffers that live as long as the runner."""

    def __init__(self):
        self._buffers: dict[tuple, torch.Tensor] = {}
        self.fused = fused.FusedReducer()

    def get(self, key: str, shape: tuple[int, ...], device: torch.device,
            dtype: torch.dtype = torch.float64) -> torch.Tensor:
        numel = math.prod(shape)
        buf = self._buffers.get((key, device, dtype))
        if buf is None or buf.numel() < numel:
            buf = self._buffers[(key, device, dtype)] = torch.empty(max(numel, 1), dtype=dtype, device=device)
        return buf[:numel].view(shape)


def summarize(layout: OutputLayout, ref_out: torch.Tensor, prod_out: torch.Tensor, oracle_out: torch.Tensor | None,
              labels: torch.Tensor | None, workspace: Workspace | None = None, path: str = "auto") -> ReplicateSummary:
    """Reduce one replicate's outputs to per-bucket means of the :data:`ROWS` and the error norms.

    The fast paths (the compiled one-pass reduction of :mod:`kcert.execution.fused` where it
    applies, else chunked torch passes) assume every value is finite and check it afterwards on
    their results (a non-finite element makes a sum or an extreme non-finite); only then is the
    masked path run. ``path`` forces one path ("compiled", "chunked" or "masked"; a fast path still
    hands non-finite values to the masked one): the paths must agree, and tests check that they do."""
    if path not in PATHS:
        raise ParameterError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    if path == "masked":
        return _summarize_masked(layout, ref_out, prod_out, oracle_out, labels)
    ws = workspace or Workspace()
    if path != "chunked":
        compiled = ws.fused.reduce(ref_out, prod_out, oracle_out, layout.bucket_axes, labels,
                                   layout.spec.count if isinstance(layout.spec, Labels) else None,
                                   layout.bitwise_comparable)
        if compiled is fused.NONFINITE:
            return _summarize_masked(layout, ref_out, prod_out, oracle_out, labels)
        if compiled is not fused.NOT_APPLICABLE:
            sums, counts, peaks, histogram = compiled
            e_prod, e_ref, peak = peaks if peaks is not None else (float("nan"),) * 3
            return _finish(_all_rows(sums), counts, e_prod, e_ref, peak, 0, 0, histogram)
        if path == "compiled":
            raise ParameterError("path='compiled': the compiled reduction does not apply here (numba missing on the "
                                 "CPU or triton on a CUDA device, another device, or an unsupported layout)")
    fast = _summarize_finite(layout, ref_out, prod_out, oracle_out, labels, ws)
    return fast if fast is not None else _summarize_masked(layout, ref_out, prod_out, oracle_out, labels)


def _chunks(shape: tuple[int, ...], order: tuple[int, ...], target: int = CHUNK):
    """Narrowing specs ``[(axis, start, length), ...]`` that tile ``shape`` in chunks of about
    ``target`` elements: taking the axes in ``order``, single indices along the first ones,
    slices along one axis, whole extents of the rest. Deterministic in ``shape`` and ``order``, so
    every replicate sums in the same order."""
    n = len(shape)
    if n == 0 or math.prod(shape) == 0:
        yield []
        return
    sizes = [shape[a] for a in order]
    c = next(i for i in range(n) if math.prod(sizes[i + 1:]) <= target)
    step = max(1, target // math.prod(sizes[c + 1:]))
    for lead in itertools.product(*(range(s) for s in sizes[:c])):
        for start in range(0, sizes[c], step):
            yield [(order[i], j, 1) for i, j in enumerate(lead)] + [(order[c], start, min(step, sizes[c] - start))]


def _chunk_order(shape: tuple[int, ...], keep: tuple[bool, ...]) -> tuple[int, ...]:
    """Natural axis order, unless its chunks would sum few elements per bucket (each chunk's
    bucket sums are added into the total, so that must stay small against the chunk): then
    chunk along the bucket axes and keep the summed axes whole."""
    natural = tuple(range(len(shape)))
    spec = next(_chunks(shape, natural))
    chunk = [shape[a] for a in natural]
    for axis, _, length in spec:
        chunk[axis] = length
    kept = math.prod(c for c, k in zip(chunk, keep) if k)
    if math.prod(chunk) >= 8 * kept or all(keep):
        return natural
    return tuple(a for a in natural if keep[a]) + tuple(a for a in natural if not keep[a])


def _narrow(t: torch.Tensor, spec, offset: int = 0, only=None) -> torch.Tensor:
    for axis, start, length in spec:
        if only is None or only[axis]:
            t = t.narrow(axis + offset, start, length)
    return t


def _reduce(x: torch.Tensor, keep: tuple[bool, ...]) -> torch.Tensor:
    """Sum the contiguous ``x`` of shape ``(K, *shape)`` over the axes where ``keep`` is False;
    returns ``(K, prod of kept sizes)``. Adjacent axes of one kind are merged so that every step
    is a contiguous reduction of the last axis or a matrix-vector product (both memory speed)."""
    groups = [list(g) for g in fused.merge_axis_groups(x.shape[1:], keep)]
    y = x.reshape(x.shape[0], *(s for s, _ in groups))
    while any(not kept for _, kept in groups):
        if not groups[-1][1]:
            y = y.sum(-1)
            groups.pop()
        else:  # (..., M, G): a matrix-vector product is fastest for long M and wide G
            m, g = groups[-2][0], groups[-1][0]
            if m >= 16 and g >= 512:
                y = torch.matmul(torch.ones(m, dtype=y.dtype, device=y.device), y)
            else:
                y = y.sum(-2)
            groups.pop(-2)
        if len(groups) >= 2 and groups[-1][1] and groups[-2][1]:
            groups[-2:] = [[groups[-2][0] * groups[-1][0], True]]
            y = y.reshape(y.shape[0], *(s for s, _ in groups))
    return y.reshape(x.shape[0], -1)


def _fill_rows(w: torch.Tensor, r: torch.Tensor, p: torch.Tensor, o: torch.Tensor | None, scratch) -> list:
    """Write the computed rows of one chunk into ``w``: with an oracle (5, *chunk) ``d = prod - ref``,
    ``d * sign(ref)``, ``ref - oracle``, ``(ref - oracle) * sign(ref)``, ``|ref|``; without one (3,
    *chunk) ``d``, ``d * sign(ref)``, ``|ref|``. ``prod - oracle`` is not summed: its bucket sums are
    those of ``d`` plus those of ``ref - oracle`` (:func:`_all_rows`). Returns the chunk's extremes
    ``[min, max]`` of prod - oracle, ref - oracle and oracle (empty without oracle)."""
    r64, p64, sign = scratch
    r64.copy_(r)
    p64.copy_(p)
    torch.sign(r64, out=sign)
    torch.sub(p64, r64, out=w[0])
    torch.mul(w[0], sign, out=w[1])
    torch.abs(r64, out=w[-1])
    if o is None:
        return []
    torch.sub(r64, o, out=w[2])
    torch.mul(w[2], sign, out=w[3])
    torch.sub(p64, o, out=sign)  # the sign is used up: prod - oracle, needed for its extremes only
    return [torch.aminmax(sign), torch.aminmax(w[2]), torch.aminmax(o)]


def _all_rows(sums):
    """The :data:`ROWS` from the bucket sums of the computed rows (see :func:`_fill_rows`), a numpy
    array or a tensor like ``sums``: the sums of prod - oracle are those of (prod - ref) + (ref -
    oracle), equal to float64 round-off."""
    xp = np if isinstance(sums, np.ndarray) else torch  # the compiled path's sums stay in numpy
    if sums.shape[0] == 3:
        d, signed, magnitude = sums
        zero = xp.zeros_like(d)
        rows = {"raw": d, "sign_aligned": signed, "magnitude": magnitude} | {row: zero for row in ORACLE_ROWS}
    else:
        d, signed, ref_d, ref_signed, magnitude = sums
        rows = {"raw": d, "sign_aligned": signed, "prod_raw": d + ref_d, "prod_sign_aligned": signed + ref_signed,
                "ref_raw": ref_d, "ref_sign_aligned": ref_signed, "magnitude": magnitude}
    return xp.stack([rows[row] for row in ROWS])


def _summarize_finite(layout, ref_out, prod_out, oracle_out, labels, ws: Workspace) -> ReplicateSummary | None:
    """Chunked single-sweep reduction for outputs without inf/nan; None when one shows up."""
    shape = tuple(ref_out.shape)
    n = len(shape)
    device = ref_out.device
    o_full = oracle_out.to(torch.float64) if oracle_out is not None else None
    k = 5 if o_full is not None else 3  # rows computed per element
    if labels is None:
        keep = tuple(a in layout.bucket_axes for a in range(n))
        g = int(np.prod(layout.bucket_shape))
    else:
        # axes where the labels are broadcast (stride 0) are summed densely before the scatter
        keep, compact = fused.compact_labels(labels)
        flat = compact.reshape(-1)
        lo, hi = (int(v) for v in torch.aminmax(flat)) if flat.numel() else (0, -1)
        g = max(hi + 1, layout.spec.count or 0)
        if lo < 0:  # excluded elements go to a trash bucket g, dropped at the end
            flat = torch.where(flat >= 0, flat, g)
    total = ws.get("total", (k, *(s if kept else 1 for s, kept in zip(shape, keep))), device).zero_()
    compare = layout.bitwise_comparable
    histogram = torch.zeros(N_BINS, dtype=torch.int64, device=device)
    extremes = []
    for spec in _chunks(shape, _chunk_order(shape, keep)):
        r, p = _narrow(ref_out, spec), _narrow(prod_out, spec)
        o = _narrow(o_full, spec) if o_full is not None else None
        cshape = tuple(r.shape)
        w = ws.get("rows", (k, *cshape), device)
        scratch = [ws.get(name, cshape, device) for name in ("ref", "prod", "sign")]
        extremes.append(_fill_rows(w, r, p, o, scratch))
        part = _reduce(w, keep).view(k, *(s if kept else 1 for s, kept in zip(cshape, keep)))
        _narrow(total, spec, offset=1, only=keep).add_(part)
        if compare:
            histogram += bitwise.histogram_finite(r, p, _bit_scratch(ws, r))
    sums = total.reshape(k, -1)
    if labels is None:
        counts = torch.full((2, g), ref_out.numel() / max(g, 1), dtype=torch.float64)
    else:
        dense = math.prod(s for s, kept in zip(shape, keep) if not kept)
        scattered = torch.zeros(k, g + 1, dtype=torch.float64, device=device)
        scattered.index_add_(1, flat, sums)
        sums = scattered[:, :g]
        counts = (torch.bincount(flat, minlength=g + 1)[:g].to(torch.float64) * dense).expand(2, g)
    checks = [sums.sum()] + [v for chunk in extremes for pair in chunk for v in pair]
    if not bool(torch.isfinite(torch.stack(checks)).all()):
        return None
    if oracle_out is not None:
        mins = [min(float(c[j][0]) for c in extremes) for j in range(3)]
        maxs = [max(float(c[j][1]) for c in extremes) for j in range(3)]
        e_prod, e_ref, peak = (max(-lo, hi, 0.0) for lo, hi in zip(mins, maxs))
    else:
        e_prod = e_ref = peak = float("nan")
    return _finish(_all_rows(sums), counts, e_prod, e_ref, peak, 0, 0, histogram)


def _bit_scratch(ws: Workspace, x: torch.Tensor) -> list[torch.Tensor]:
    """Buffers of :func:`kcert.execution.bitwise.histogram_finite` for chunks like ``x``."""
    keys, wide = bitwise.key_dtypes(x.dtype)
    shape = tuple(x.shape)
    return [ws.get("key_ref", shape, x.device, keys), ws.get("key_prod", shape, x.device, keys),
            ws.get("ulp_distance", shape, x.device, wide)]


def _numpy(x) -> np.ndarray:
    return x.cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# Which row of a path's counts (elements where prod and ref are finite, or the oracle too) divides each row.
_COUNT_OF_ROW = np.array([1 if row in ORACLE_ROWS else 0 for row in ROWS])


def _finish(sums, counts, e_prod, e_ref, peak, nonfinite_prod, nonfinite_ref, histogram):
    sums = _numpy(sums)
    counts = _numpy(counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts[_COUNT_OF_ROW]
    if not np.isfinite(means).all():  # an empty bucket (0 / 0) or a non-finite sum
        means = np.nan_to_num(means)
    return ReplicateSummary(
        sums=means,
        present=counts[0] > 0,
        oracle_present=counts[1] > 0,
        e_prod=e_prod,
        e_ref=e_ref,
        peak=peak,
        nonfinite_prod=nonfinite_prod,
        nonfinite_ref=nonfinite_ref,
        ulp_histogram=_numpy(histogram),
    )


def _summarize_masked(layout: OutputLayout, ref_out: torch.Tensor, prod_out: torch.Tensor,
                      oracle_out: torch.Tensor | None, labels: torch.Tensor | None) -> ReplicateSummary:
    """The general path: masks non-finite elements out of the sums and counts them."""
    r = ref_out.to(torch.float64)
    p = prod_out.to(torch.float64)
    o = oracle_out.to(torch.float64) if oracle_out is not None else None
    sign = torch.sign(r)
    finite_r, finite_p = torch.isfinite(r), torch.isfinite(p)
    finite = finite_r & finite_p
    disagree = ~((p == r) | (torch.isnan(p) & torch.isnan(r))) & ~finite
    nonfinite_ref = int((disagree & finite_p).sum())
    nonfinite_prod = int((disagree & ~finite_p).sum())
    zero = torch.zeros((), dtype=torch.float64, device=r.device)
    d = torch.where(finite, p - r, zero)
    rows = {"raw": d, "sign_aligned": d * sign}
    if o is not None:
        ofinite = finite & torch.isfinite(o)
        po = torch.where(ofinite, p - o, zero)
        ro = torch.where(ofinite, r - o, zero)
        rows |= {"prod_raw": po, "prod_sign_aligned": po * sign, "ref_raw": ro, "ref_sign_aligned": ro * sign}
        e_prod = float(_error(p, o).max()) if o.numel() else 0.0
        e_ref = float(_error(r, o).max()) if o.numel() else 0.0
        fo = o[torch.isfinite(o)]
        peak = float(fo.abs().max()) if fo.numel() else 0.0
    else:
        ofinite = finite
        rows |= {row: zero.expand_as(d) for row in ORACLE_ROWS}
        e_prod = e_ref = peak = float("nan")
    rows["magnitude"] = torch.where(finite, r.abs(), zero)
    stacked = torch.stack([rows[row] for row in ROWS])  # (N_ROWS, *shape)
    masks = torch.stack([finite, ofinite]).to(torch.float64)

    if labels is None:
        perm = (0,) + tuple(a + 1 for a in layout.bucket_axes) + tuple(
            a + 1 for a in range(len(layout.shape)) if a not in layout.bucket_axes
        )
        g = int(np.prod(layout.bucket_shape))
        sums = stacked.permute(perm).reshape(N_ROWS, g, -1).sum(-1)
        counts = masks.permute(perm).reshape(2, g, -1).sum(-1)
    else:
        flat = labels.reshape(-1)
        keep = flat >= 0
        idx = flat[keep]
        g = int(idx.max()) + 1 if idx.numel() else 0
        g = max(g, layout.spec.count or 0)
        sums = torch.zeros(N_ROWS, g, dtype=torch.float64, device=r.device)
        sums.index_add_(1, idx, stacked.reshape(N_ROWS, -1)[:, keep])
        counts = torch.zeros(2, g, dtype=torch.float64, device=r.device)
        counts.index_add_(1, idx, masks.reshape(2, -1)[:, keep])
    histogram = bitwise.histogram(ref_out, prod_out) if layout.bitwise_comparable else \
        torch.zeros(N_BINS, dtype=torch.int64)
    return _finish(sums, counts, e_prod, e_ref, peak, nonfinite_prod, nonfinite_ref, histogram)


def bucket_labels(spec: Labels, inputs, weights, ref_out: torch.Tensor, where: str) -> torch.Tensor:
    """Evaluate a Labels spec and broadcast it to the output's shape."""
    try:
        labels = spec.fn(inputs, weights, ref_out)
    except Exception as exc:
        raise KernelError(f"{where}: the Labels function raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.is_complex():
        raise CaseError(f"{where}: the Labels function must return an integer tensor, got {labels!r:.80}")
    try:
        # int64 first, then broadcast: the broadcast axes keep stride 0, which summarize sums densely
        broadcast = torch.broadcast_to(labels.to(torch.int64), ref_out.shape)
    except RuntimeError:
        raise CaseError(
            f"{where}: labels of shape {tuple(labels.shape)} do not broadcast to the output shape {tuple(ref_out.shape)}"
        ) from None
    if spec.count is not None and broadcast.numel() and int(labels.max()) >= spec.count:
        raise CaseError(f"{where}: label {int(labels.max())} is out of range for Labels(count={spec.count})")
    return broadcast
