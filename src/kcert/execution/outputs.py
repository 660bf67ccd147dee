"""Per-replicate reduction of one output to per-bucket summaries (torch side of the pipeline).

For every replicate the full outputs are reduced at once to O(buckets) numbers and O(1) error
norms, so no output is ever stored across replicates.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from ..case import Axes, BucketSpec, Labels
from ..errors import CaseError, KernelError

# Rows of the per-bucket summary, in this order.
ROWS = ("raw", "sign_aligned", "prod_raw", "prod_sign_aligned", "ref_raw", "ref_sign_aligned", "magnitude")
N_ROWS = len(ROWS)


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

def make_layout(index: int, name: str, ref_out: torch.Tensor, prod_out: torch.Tensor, spec: BucketSpec,
                where: str) -> OutputLayout:
    if not ref_out.is_floating_point():
        raise KernelError(f"{where}: {name} of ref has dtype {ref_out.dtype}; only floating outputs can be certified")
    if isinstance(spec, Axes):
        axes = spec.resolve(ref_out.dim(), f"{where}, {name}")
        bucket_shape = tuple(ref_out.shape[a] for a in axes)
    else:
        axes, bucket_shape = (), ()
    return OutputLayout(index, name, tuple(ref_out.shape), ref_out.dtype, prod_out.dtype, spec, axes, bucket_shape)


@dataclass(frozen=True)
class ReplicateSummary:
    sums: np.ndarray  # (N_ROWS, G) per-bucket means of each row
    present: np.ndarray  # (G,) bucket had at least one finite element in this replicate
    oracle_present: np.ndarray  # (G,)
    e_prod: float
    e_ref: float
    peak: float  # max |oracle| (finite): the output's peak scale for eps
    nonfinite_prod: int  # elements where prod is non-finite and disagrees with a finite ref
    nonfinite_ref: int  # elements where ref is non-finite and prod is finite


def _error(a: torch.Tensor, oracle: torch.Tensor) -> torch.Tensor:
    """Elementwise |a - oracle|; identical values (same infinities, both nan) count as 0, any other
    disagreement involving a non-finite value as inf."""
    same = (a == oracle) | (torch.isnan(a) & torch.isnan(oracle))
    err = (a - oracle).abs()
    err = torch.where(same, torch.zeros((), dtype=err.dtype, device=err.device), err)
    return torch.nan_to_num(err, nan=float("inf"))


def summarize(layout: OutputLayout, ref_out: torch.Tensor, prod_out: torch.Tensor, oracle_out: torch.Tensor | None,
              labels: torch.Tensor | None) -> ReplicateSummary:
    r = ref_out.to(torch.float64)
    p = prod_out.to(torch.float64)
    o = oracle_out.to(torch.float64) if oracle_out is not None else None
    sign = torch.sign(r)
    all_finite = bool(torch.isfinite(r).all()) and bool(torch.isfinite(p).all()) and (
        o is None or bool(torch.isfinite(o).all()))
    if all_finite:
        # the common case: no masks, one pass per row (identical numbers to the general path)
        nonfinite_ref = nonfinite_prod = 0
        if o is not None:
            diffs = torch.stack([p - r, p - o, r - o])
            e_prod = float(diffs[1].abs().max()) if o.numel() else 0.0
            e_ref = float(diffs[2].abs().max()) if o.numel() else 0.0
            peak = float(o.abs().max()) if o.numel() else 0.0
        else:
            d = p - r
            diffs = torch.stack([d, torch.zeros_like(d), torch.zeros_like(d)])
            e_prod = e_ref = peak = float("nan")
        aligned = diffs * sign
        stacked = torch.stack([diffs[0], aligned[0], diffs[1], aligned[1], diffs[2], aligned[2], r.abs()])
        masks = None
    else:
        finite_r, finite_p = torch.isfinite(r), torch.isfinite(p)
        finite = finite_r & finite_p
        disagree = ~((p == r) | (torch.isnan(p) & torch.isnan(r))) & ~finite
        nonfinite_ref = int((disagree & finite_p).sum())
        nonfinite_prod = int((disagree & ~finite_p).sum())
        zero = torch.zeros((), dtype=torch.float64, device=r.device)
        d = torch.where(finite, p - r, zero)
        rows = [d, d * sign]
        if o is not None:
            ofinite = finite & torch.isfinite(o)
            po = torch.where(ofinite, p - o, zero)
            ro = torch.where(ofinite, r - o, zero)
            rows += [po, po * sign, ro, ro * sign]
            e_prod = float(_error(p, o).max()) if o.numel() else 0.0
            e_ref = float(_error(r, o).max()) if o.numel() else 0.0
            fo = o[torch.isfinite(o)]
            peak = float(fo.abs().max()) if fo.numel() else 0.0
        else:
            ofinite = finite
            rows += [zero.expand_as(d)] * 4
            e_prod = e_ref = peak = float("nan")
        rows.append(torch.where(finite, r.abs(), zero))
        stacked = torch.stack(rows)  # (N_ROWS, *shape)
        masks = torch.stack([finite, ofinite]).to(torch.float64)

    if labels is None:
        perm = (0,) + tuple(a + 1 for a in layout.bucket_axes) + tuple(
            a + 1 for a in range(len(layout.shape)) if a not in layout.bucket_axes
        )
        g = int(np.prod(layout.bucket_shape))
        sums = stacked.permute(perm).reshape(N_ROWS, g, -1).sum(-1)
        if masks is None:  # every element counts: each bucket holds numel / g of them
            counts = torch.full((2, g), r.numel() / max(g, 1), dtype=torch.float64)
        else:
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
        if masks is None:
            counts += torch.bincount(idx, minlength=g).to(torch.float64)
        else:
            counts.index_add_(1, idx, masks.reshape(2, -1)[:, keep])
    sums = sums.cpu().numpy()
    counts = counts.cpu().numpy()
    with np.errstate(invalid="ignore", divide="ignore"):
        means = np.empty_like(sums)
        means[:2] = sums[:2] / counts[0]
        means[2:6] = sums[2:6] / counts[1]
        means[6] = sums[6] / counts[0]
    return ReplicateSummary(
        sums=np.nan_to_num(means),
        present=counts[0] > 0,
        oracle_present=counts[1] > 0,
        e_prod=e_prod,
        e_ref=e_ref,
        peak=peak,
        nonfinite_prod=nonfinite_prod,
        nonfinite_ref=nonfinite_ref,
    )


def bucket_labels(spec: Labels, inputs, weights, ref_out: torch.Tensor, where: str) -> torch.Tensor:
    """Evaluate a Labels spec and broadcast it to the output's shape."""
    try:
        labels = spec.fn(inputs, weights, ref_out)
    except Exception as exc:  # noqa: BLE001 - reported with its origin
        raise KernelError(f"{where}: the Labels function raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(labels, torch.Tensor) or labels.is_floating_point() or labels.is_complex():
        raise CaseError(f"{where}: the Labels function must return an integer tensor, got {labels!r:.80}")
    try:
        labels = torch.broadcast_to(labels, ref_out.shape)
    except RuntimeError:
        raise CaseError(
            f"{where}: labels of shape {tuple(labels.shape)} do not broadcast to the output shape {tuple(ref_out.shape)}"
        ) from None
    if spec.count is not None and labels.numel() and int(labels.max()) >= spec.count:
        raise CaseError(f"{where}: label {int(labels.max())} is out of range for Labels(count={spec.count})")
    return labels.to(torch.int64)
