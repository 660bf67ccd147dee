"""ULP-distance histograms of prod against ref, in integer arithmetic on the outputs' bits (the
torch side of L0; the bins and the numpy reference are in :mod:`kcert.stats.bitwise`).

Keys are computed in the output's own width (int16 for bf16/fp16); only the difference needs
one more bit, so it is taken one width up (int32 for 16-bit outputs, int64 for float32; float64
outputs use int64 and saturate the rare pairs whose difference overflows)."""

from __future__ import annotations

import torch

from ..stats.bitwise import N_BINS, NONFINITE_BIN, SATURATED_BIN

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_WIDE = {1: torch.int16, 2: torch.int32, 4: torch.int64, 8: torch.int64}
_FLOAT32_BIAS = 127  # exponent bias of float32: the bins are read off the exponent of d - 0.5


def comparable(ref_dtype: torch.dtype, prod_dtype: torch.dtype) -> bool:
    """Bits can be compared only between outputs of one floating format."""
    return ref_dtype == prod_dtype and ref_dtype.is_floating_point and torch.finfo(ref_dtype).bits // 8 in _BITS


def key_dtypes(dtype: torch.dtype) -> tuple[torch.dtype, torch.dtype]:
    """(keys, differences): the integer types of one floating format's keys and of their differences."""
    size = torch.finfo(dtype).bits // 8
    return _BITS[size], _WIDE[size]


def _keys(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """totalOrder keys of ``x``'s bit patterns into ``out`` (same integer width)."""
    bits = x.view(_BITS[x.element_size()])
    torch.bitwise_right_shift(bits, 8 * x.element_size() - 1, out=out)
    out.bitwise_and_(torch.iinfo(out.dtype).max)
    return out.bitwise_xor_(bits)


def _distances(ref: torch.Tensor, prod: torch.Tensor, scratch) -> torch.Tensor:
    """|key(prod) - key(ref)| in the wide integer type (``scratch``: two key buffers and one wide)."""
    kr, kp, d = scratch
    _keys(ref, kr)
    _keys(prod, kp)
    d.copy_(kp)
    d.sub_(kr)
    if ref.element_size() == 8:  # int64 keys: a difference of opposite-signed keys may wrap
        overflow = ((kp ^ kr) < 0) & ((d ^ kp) < 0)
        d.masked_fill_(overflow, torch.iinfo(torch.int64).max)
    return d.abs_()


def _all_bins(d: torch.Tensor) -> torch.Tensor:
    """Histogram (N_BINS) of non-negative distances, read off the float32 exponent of d - 0.5: bin
    k + 1 holds (2^(k-1), 2^k], whose d - 0.5 lie in [2^(k-1), 2^k); d = 0 gives -0.5, a negative
    bit pattern that the clamp puts in bin 0. Exact for every d (float32 rounds only far above
    2^TOP, in the saturated bin)."""
    e = torch.bitwise_right_shift((d.to(torch.float32) - 0.5).view(torch.int32), 23)
    low = _FLOAT32_BIAS - 2  # exponent of 0.5 (d = 1) is bias - 1: bin 1
    e.clamp_(low, low + SATURATED_BIN)
    counts = torch.bincount(e.reshape(-1), minlength=low + SATURATED_BIN + 1)[low:]
    return torch.cat([counts, torch.zeros(N_BINS - counts.numel(), dtype=torch.int64, device=d.device)])


def _histogram(d: torch.Tensor) -> torch.Tensor:
    """Histogram of non-negative distances. A CPU bincount of every distance costs more than the
    rest of L0 (1.2 ns per element here), so when no distance exceeds 1 (the common case of
    equal or one-ULP pairs) two counts replace it. On an accelerator every distance is binned at
    once, with no host synchronisation."""
    if d.device.type == "cpu" and (d.numel() == 0 or int(d.max()) <= 1):
        nonzero = int(torch.count_nonzero(d))
        out = torch.zeros(N_BINS, dtype=torch.int64)
        out[0], out[1] = d.numel() - nonzero, nonzero
        return out
    return _all_bins(d)


def histogram_finite(ref: torch.Tensor, prod: torch.Tensor, scratch) -> torch.Tensor:
    """ULP-distance histogram of one chunk without inf or nan (``scratch``: see :func:`scratch_for`)."""
    return _histogram(_distances(ref, prod, scratch))


def scratch_for(x: torch.Tensor) -> list[torch.Tensor]:
    """Fresh buffers for :func:`histogram_finite` (the runner reuses a workspace's instead)."""
    keys, wide = key_dtypes(x.dtype)
    return [torch.empty(x.shape, dtype=t, device=x.device) for t in (keys, keys, wide)]


def histogram(ref: torch.Tensor, prod: torch.Tensor) -> torch.Tensor:
    """ULP-distance histogram of any two outputs of one format: pairs that are not bitwise equal and
    involve inf or nan are counted in the non-finite bin (equal bits, nan payloads included, are
    distance 0, so bin 0 always counts the bitwise-equal elements)."""
    d = _distances(ref, prod, scratch_for(ref))
    nonfinite = ~(torch.isfinite(ref) & torch.isfinite(prod)) & (d != 0)
    out = _histogram(d.masked_fill(nonfinite, 0))
    moved = int(nonfinite.sum())
    out[0] -= moved
    out[NONFINITE_BIN] = moved
    return out
