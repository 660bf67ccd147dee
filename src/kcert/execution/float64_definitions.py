"""Float64 definitions of operators that have no float64 kernel, for real mode.

Real mode runs every op in float64; an operator with no float64 kernel would raise there, and its module
would get no oracle. Where the operator's meaning in exact arithmetic is a composition of float64 ops, it is
computed from that composition instead (docs/adapters.md, "Kernels real mode cannot follow").
"""

from __future__ import annotations

import torch

# Grouped matrix products (mixture-of-experts layers: transformers' experts call torch._grouped_mm) have no
# float64 kernel ("Expected mat_a to be Float32, BFloat16 or Float16"): in float64 real mode they are computed
# from their definition, one torch.mm per group, which is what they mean in exact arithmetic.
_GROUPED_MM = frozenset(
    f for f in (getattr(torch, "_grouped_mm", None), getattr(torch.ops.aten, "_grouped_mm", None),
                getattr(getattr(torch.ops.aten, "_grouped_mm", None), "default", None)) if f is not None
)


def grouped_mm_float64(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """``torch._grouped_mm`` by its definition, for the layouts mixture-of-experts layers use: a 2D ``mat_a``
    whose rows are grouped by ``offs`` times a 3D ``mat_b`` (one matrix per group; rows past ``offs[-1]`` are
    zero), two 3D operands (a batched product), and two 2D operands whose shared dimension is grouped by
    ``offs`` (one product per group, stacked). None for anything else (the operator then runs, and raises
    as it would)."""
    if bias is not None or not (isinstance(mat_a, torch.Tensor) and isinstance(mat_b, torch.Tensor)):
        return None
    if mat_a.dtype is not torch.float64 or mat_b.dtype is not torch.float64:
        return None
    if mat_a.dim() == 3 and mat_b.dim() == 3 and offs is None:
        return torch.bmm(mat_a, mat_b)
    if offs is None:
        return None
    ends = [int(e) for e in offs.tolist()]
    starts = [0] + ends[:-1]
    if mat_a.dim() == 2 and mat_b.dim() == 3 and len(ends) == mat_b.shape[0]:
        out = torch.zeros(mat_a.shape[0], mat_b.shape[2], dtype=torch.float64, device=mat_a.device)
        for g, (start, end) in enumerate(zip(starts, ends)):
            if end > start:
                out[start:end] = torch.mm(mat_a[start:end], mat_b[g])
        return out
    if mat_a.dim() == 2 and mat_b.dim() == 2:
        return torch.stack([torch.mm(mat_a[:, start:end], mat_b[start:end]) for start, end in zip(starts, ends)])
    return None


# Each operator real mode computes from its definition -> that definition (None where the call's layout is
# not one the definition covers).
DEFINITIONS = {func: grouped_mm_float64 for func in _GROUPED_MM}
