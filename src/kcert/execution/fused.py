"""The per-replicate reduction as one compiled pass over the elements (CPU, numba; optional).

:mod:`kcert.execution.outputs` reduces an output with about a dozen eager torch passes per chunk.
On the CPU those passes cost 7-10 ns per element, a quarter to a half of what evaluating ref, prod
and the float64 oracle costs for light kernels such as RoPE or RMSNorm (docs/benchmarks.md). Here
every element is read once from memory, in cache-sized segments: decoded to float64 in registers
(bfloat16 by a bit shift into float32's bits, float16 in integer arithmetic), differenced, added to
its accumulator position's five sums and folded into the running maxima; then, while the same
segments are still in the L1 cache, L0 counts its ULP distance in integer arithmetic on the bit
patterns (16-bit lanes for 16-bit formats), binning the few beyond 2 ULPs one by one. Up to
:data:`GROUP` consecutive segments with one accumulator window are swept together, so each
accumulator is loaded and stored once per group (docs/benchmarks.md has the figures).

Determinism: the order of the additions is a segment table (:func:`segment_table`,
:func:`label_runs`) fixed by the output's shape and buckets; the table is cut into ``lanes``
(:func:`lanes_for`, a function of the shape and the accumulator size), each lane sums into its
own accumulators and the lanes are added in order. Grouping (:func:`group_segments`) keeps, at
every accumulator position, the order of the table's additions: the sums are those of a walk
through the table, bit for bit (``tests/test_fused.py`` checks them against one in numpy). The lanes may run on any number of threads
(the kernel releases the GIL): the numbers never depend on the thread count, the batch size or the
process. The table, the lanes and the finish are a :class:`Plan` (:meth:`FusedReducer.plan`,
:func:`finish`), which the accelerator's kernel (:mod:`kcert.execution.fused_triton`, one Triton
kernel for outputs on a CUDA device) follows too: its numbers are these, bit for bit. They differ
from the torch path's by float64 round-off (sums) and not at all (extremes, ULP counts); the
certificate names the path (``provenance.environment.reduction``).

Install with ``pip install "kcert[fast]"``. Without numba (or, on a CUDA device, triton), on
another device, for integer outputs,
when a summed innermost axis group would need more accumulators than there are elements, or
when the contiguous runs are too short to amortize a segment (many runs under 16 elements),
:meth:`FusedReducer.reduce` returns ``NOT_APPLICABLE`` and the torch path runs; ``KCERT_NO_FUSED=1``
forces that path.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import torch

from ..stats.bitwise import N_BINS, SATURATED_BIN

try:  # numba is an optional extra: kcert[fast]
    import numba
except Exception:  # pragma: no cover - not installed, or broken (e.g. a local module shadows one it imports)
    numba = None

NOT_APPLICABLE = "not applicable"
NONFINITE = "non-finite"
WIDTH = 1024  # elements per innermost segment: a group's accumulator window stays in the L1/L2 caches
LANE_MIN_ELEMENTS = 1 << 20  # a lane must amortize its own accumulators and their final addition
MAX_LANES = 16
LANE_MEMORY = 64 * 2**20  # bytes of the lanes' accumulators together, at most
MIN_SEGMENT, MANY_SEGMENTS = 16, 4096  # each segment costs ~100 cycles of set-up: shorter ones go to torch
MIN_RUN = 32  # label runs shorter than this on average: accumulate by position and scatter instead
ACC_MEMORY = 16 * 2**20  # bytes of one lane's accumulators for a summed innermost axis group
_DISABLE_ENV = "KCERT_NO_FUSED"  # set to 1 to force the torch path (comparisons, debugging)

# How each format reaches the kernel: as the array type that selects its decoding and its bit
# pattern (numba compiles one kernel per pair of types met).
_VALUES = {torch.bfloat16: np.uint16, torch.float16: np.int16, torch.float32: np.float32, torch.float64: np.float64}
GROUP = 4  # segments of one accumulator window swept together: its accumulators loaded and stored once


def available() -> bool:
    return numba is not None and os.environ.get(_DISABLE_ENV, "") in ("", "0")


def kernel_for(device: torch.device) -> str:
    """Which per-replicate reduction runs for outputs on ``device`` (the certificate's
    ``provenance.environment.reduction``): "compiled (numba)" on the CPU, "compiled (triton)" on a
    CUDA device (:mod:`kcert.execution.fused_triton`), else "torch"."""
    if os.environ.get(_DISABLE_ENV, "") not in ("", "0"):
        return "torch"
    if device.type == "cpu":
        return "compiled (numba)" if numba is not None else "torch"
    if device.type == "cuda":
        from . import fused_triton  # imports triton: only for a CUDA run
        return "compiled (triton)" if fused_triton.available() else "torch"
    return "torch"


if numba is not None:
    from numba.extending import overload

    def _decode(value):
        """float64 of one element, exactly (typed by :data:`_VALUES`)."""

    @overload(_decode)
    def _decode_impl(value):
        if value == numba.types.uint16:  # bfloat16: the upper half of a float32
            return lambda value: np.float64(np.uint32(np.uint32(value) << np.uint32(16)).view(np.float32))
        if value == numba.types.int16:  # float16, in integer arithmetic (vectorizes; numba has no float16)
            def half(value):
                u = np.uint64(np.uint16(value))
                e = (u >> np.uint64(10)) & np.uint64(31)
                m = u & np.uint64(1023)
                sign = u >> np.uint64(15)
                wide = np.uint64(2047) if e == np.uint64(31) else e + np.uint64(1008)
                normal = np.uint64((sign << np.uint64(63)) | (wide << np.uint64(52)) | (m << np.uint64(42))).view(np.float64)
                small = np.float64(m) * 2.0 ** -24  # zero and subnormals: m units of 2^-24
                small = -small if sign else small
                return small if e == np.uint64(0) else normal

            return half
        return lambda value: np.float64(value)

    def _bits(value):
        """The bit pattern of one element as a signed integer of its width (typed by :data:`_VALUES`)."""

    @overload(_bits)
    def _bits_impl(value):
        if value == numba.types.uint16:
            return lambda value: np.int16(value)
        if value == numba.types.float32:
            return lambda value: np.float32(value).view(np.int32)
        if value == numba.types.float64:
            return lambda value: np.float64(value).view(np.int64)
        return lambda value: value

    def _distance(ref_value, prod_value):
        """Exact ULP distance of two finite values of one format."""

    @overload(_distance)
    def _distance_impl(ref_value, prod_value):
        # The difference of totalOrder keys (stats/bitwise.ordered_keys), in the narrowest integers
        # that hold it exactly: int32 for 16-bit formats, int64 for float32; for float64, int64
        # keys of opposite sign whose difference overflows saturate.
        if ref_value.bitwidth == 16:
            def narrow(ref_value, prod_value):
                kr = np.int32(_bits(ref_value))
                kp = np.int32(_bits(prod_value))
                kr ^= (kr >> np.int32(31)) & np.int32(0x7FFF)
                kp ^= (kp >> np.int32(31)) & np.int32(0x7FFF)
                return abs(kp - kr)

            return narrow
        if ref_value.bitwidth == 32:
            def middle(ref_value, prod_value):
                kr = np.int64(_bits(ref_value))
                kp = np.int64(_bits(prod_value))
                kr ^= (kr >> 63) & np.int64(0x7FFFFFFF)
                kp ^= (kp >> 63) & np.int64(0x7FFFFFFF)
                return abs(kp - kr)

            return middle

        def wide(ref_value, prod_value):
            kr = np.int64(_bits(ref_value))
            kp = np.int64(_bits(prod_value))
            kr ^= (kr >> 63) & np.int64(0x7FFFFFFFFFFFFFFF)
            kp ^= (kp >> 63) & np.int64(0x7FFFFFFFFFFFFFFF)
            d = kp - kr
            wrapped = ((kp ^ kr) < 0) & ((d ^ kp) < 0)
            return np.iinfo(np.int64).max if wrapped else abs(d)

        return wide

    @numba.njit(cache=True)
    def _sign_bit(x):
        return np.float64(x).view(np.int64) & np.int64(-0x8000000000000000)

    @numba.njit(cache=True)
    def _flip(x, sign_bit):
        """``x`` with its sign bit xor-ed with ``sign_bit``: ``x * sign(r)`` for r != 0, exactly."""
        return np.int64(np.float64(x).view(np.int64) ^ sign_bit).view(np.float64)

    # One element's contribution, in registers: the five rows of ``outputs._fill_rows`` added to
    # A0..A4 and |prod - oracle|, |ref - oracle|, |oracle| folded into P0..P2 (selects, not max():
    # they vectorize). The float64 arithmetic is that of the torch rows, operation for operation,
    # except ``d * sign(ref)``, written as a sign flip and a zero where ref is zero: the same sums
    # bit for bit (an accumulator starts at +0 and so is never -0, and adding a zero of either sign
    # to it changes nothing; a non-finite d makes the raw row's sum non-finite in both), in fewer
    # instructions than a sign and a product (7% of the sweep).
    # (The ULP counts live in their own loop, _count4: in this one their integer lanes were four
    # wide like the float64 ones and pushed the accumulators out of the registers; 1 ns per element.)
    @numba.njit(cache=True)
    def _element(rv, pv, o, A0, A1, A2, A3, A4, P0, P1, P2):
        r = _decode(rv)
        p = _decode(pv)
        sign = _sign_bit(r)
        d = p - r
        ro = r - o
        A0 += d
        A1 += _flip(d, sign) if r != 0 else 0.0
        A2 += ro
        A3 += _flip(ro, sign) if r != 0 else 0.0
        A4 += abs(r)
        x = abs(p - o)
        y = abs(r - o)
        z = abs(o)
        P0 = x if x > P0 else P0
        P1 = y if y > P1 else P1
        P2 = z if z > P2 else P2
        return A0, A1, A2, A3, A4, P0, P1, P2

    @numba.njit(cache=True)
    def _element_no_oracle(rv, pv, A0, A1, A2):
        r = _decode(rv)
        p = _decode(pv)
        d = p - r
        A0 += d
        A1 += _flip(d, _sign_bit(r)) if r != 0 else 0.0
        A2 += abs(r)
        return A0, A1, A2

    # The sweeps index slices from 0 (``x[offset + t]`` puts numba's negative-index wraparound, a
    # branch, in every access, which kept LLVM from vectorizing) and each compiles to SIMD code
    # (checked with ``inspect_asm``). A sweep of four segments of one window adds, at every
    # position, their elements in table order: the sums of four one-segment sweeps, with a quarter
    # of the accumulator traffic. ref's and prod's values are also their bit patterns (no second
    # view of them: with one, LLVM's run-time alias checks outgrew its limit and the four-segment
    # sweep stayed scalar).

    @numba.njit(cache=True, nogil=True)
    def _sweep4(acc, a, pk, rv, pv, ov, e, n):
        acc0, acc1, acc2 = acc[0, a:a + n], acc[1, a:a + n], acc[2, a:a + n]
        acc3, acc4 = acc[3, a:a + n], acc[4, a:a + n]
        pk0, pk1, pk2 = pk[0, :n], pk[1, :n], pk[2, :n]
        r0, r1, r2, r3 = rv[e[0]:e[0] + n], rv[e[1]:e[1] + n], rv[e[2]:e[2] + n], rv[e[3]:e[3] + n]
        p0, p1, p2, p3 = pv[e[0]:e[0] + n], pv[e[1]:e[1] + n], pv[e[2]:e[2] + n], pv[e[3]:e[3] + n]
        o0, o1, o2, o3 = ov[e[0]:e[0] + n], ov[e[1]:e[1] + n], ov[e[2]:e[2] + n], ov[e[3]:e[3] + n]
        for t in range(n):
            A0, A1, A2, A3, A4, P0, P1, P2 = acc0[t], acc1[t], acc2[t], acc3[t], acc4[t], pk0[t], pk1[t], pk2[t]
            A0, A1, A2, A3, A4, P0, P1, P2 = _element(
                r0[t], p0[t], o0[t], A0, A1, A2, A3, A4, P0, P1, P2)
            A0, A1, A2, A3, A4, P0, P1, P2 = _element(
                r1[t], p1[t], o1[t], A0, A1, A2, A3, A4, P0, P1, P2)
            A0, A1, A2, A3, A4, P0, P1, P2 = _element(
                r2[t], p2[t], o2[t], A0, A1, A2, A3, A4, P0, P1, P2)
            A0, A1, A2, A3, A4, P0, P1, P2 = _element(
                r3[t], p3[t], o3[t], A0, A1, A2, A3, A4, P0, P1, P2)
            acc0[t], acc1[t], acc2[t], acc3[t], acc4[t], pk0[t], pk1[t], pk2[t] = A0, A1, A2, A3, A4, P0, P1, P2

    @numba.njit(cache=True, nogil=True)
    def _sweep1(acc, a, pk, rv, pv, ov, e, n):
        acc0, acc1, acc2 = acc[0, a:a + n], acc[1, a:a + n], acc[2, a:a + n]
        acc3, acc4 = acc[3, a:a + n], acc[4, a:a + n]
        pk0, pk1, pk2 = pk[0, :n], pk[1, :n], pk[2, :n]
        r0, p0, o0 = rv[e:e + n], pv[e:e + n], ov[e:e + n]
        for t in range(n):
            A0, A1, A2, A3, A4, P0, P1, P2 = _element(
                r0[t], p0[t], o0[t], acc0[t], acc1[t], acc2[t], acc3[t], acc4[t], pk0[t], pk1[t],
                pk2[t])
            acc0[t], acc1[t], acc2[t], acc3[t], acc4[t], pk0[t], pk1[t], pk2[t] = A0, A1, A2, A3, A4, P0, P1, P2

    @numba.njit(cache=True, nogil=True)
    def _sweep4_no_oracle(acc, a, rv, pv, e, n):
        acc0, acc1, acc2 = acc[0, a:a + n], acc[1, a:a + n], acc[2, a:a + n]
        r0, r1, r2, r3 = rv[e[0]:e[0] + n], rv[e[1]:e[1] + n], rv[e[2]:e[2] + n], rv[e[3]:e[3] + n]
        p0, p1, p2, p3 = pv[e[0]:e[0] + n], pv[e[1]:e[1] + n], pv[e[2]:e[2] + n], pv[e[3]:e[3] + n]
        for t in range(n):
            A0, A1, A2 = acc0[t], acc1[t], acc2[t]
            A0, A1, A2 = _element_no_oracle(r0[t], p0[t], A0, A1, A2)
            A0, A1, A2 = _element_no_oracle(r1[t], p1[t], A0, A1, A2)
            A0, A1, A2 = _element_no_oracle(r2[t], p2[t], A0, A1, A2)
            A0, A1, A2 = _element_no_oracle(r3[t], p3[t], A0, A1, A2)
            acc0[t], acc1[t], acc2[t] = A0, A1, A2

    @numba.njit(cache=True, nogil=True)
    def _sweep1_no_oracle(acc, a, rv, pv, e, n):
        acc0, acc1, acc2 = acc[0, a:a + n], acc[1, a:a + n], acc[2, a:a + n]
        r0, p0 = rv[e:e + n], pv[e:e + n]
        for t in range(n):
            A0, A1, A2 = _element_no_oracle(r0[t], p0[t], acc0[t], acc1[t], acc2[t])
            acc0[t], acc1[t], acc2[t] = A0, A1, A2


    def _near(ref_value, prod_value):
        """min(ULP distance, 3) of two finite values of one format."""

    @overload(_near)
    def _near_impl(ref_value, prod_value):
        if ref_value.bitwidth == 16:
            # 16-bit keys differ by less than 2^16 and, for finite values, their difference taken
            # modulo 2^16 is small only when the true one is (the largest finite keys' difference,
            # 65279 for bfloat16 and 63487 for float16, wraps to 257 and 2049): 16-bit lanes
            # suffice. Non-finite values never reach the counts: they make a sum non-finite and
            # the masked path redoes the replicate.
            def narrow(ref_value, prod_value):
                r = np.int16(ref_value)
                p = np.int16(prod_value)
                kr = np.int16(r ^ ((r >> np.int16(15)) & np.int16(0x7FFF)))
                kp = np.int16(p ^ ((p >> np.int16(15)) & np.int16(0x7FFF)))
                w = np.int16(kp - kr)
                a = np.uint16(w if w >= 0 else -w)
                return a if a < np.uint16(3) else np.uint16(3)

            return narrow

        def exact(ref_value, prod_value):
            d = _distance(ref_value, prod_value)
            return np.uint16(d if d < 3 else 3)

        return exact

    @numba.njit(cache=True, nogil=True)
    def _flush(c):
        """The sum of the counters ``c``, which are reset to zero."""
        total = 0
        for t in range(c.size):
            total += np.int64(c[t])
            c[t] = 0
        return total

    @numba.njit(cache=True, nogil=True)
    def _count4(rv, pv, e, n, c0, c1):
        """L0 of four segments: per-position counts of distances 0 and 1; returns the largest min(d, 3)."""
        r0, r1, r2, r3 = rv[e[0]:e[0] + n], rv[e[1]:e[1] + n], rv[e[2]:e[2] + n], rv[e[3]:e[3] + n]
        p0, p1, p2, p3 = pv[e[0]:e[0] + n], pv[e[1]:e[1] + n], pv[e[2]:e[2] + n], pv[e[3]:e[3] + n]
        z0 = c0[:n]
        z1 = c1[:n]
        top = np.uint16(0)
        for t in range(n):
            m0 = _near(r0[t], p0[t])
            m1 = _near(r1[t], p1[t])
            m2 = _near(r2[t], p2[t])
            m3 = _near(r3[t], p3[t])
            z0[t] += np.uint16((m0 == 0) + (m1 == 0) + (m2 == 0) + (m3 == 0))
            z1[t] += np.uint16((m0 == 1) + (m1 == 1) + (m2 == 1) + (m3 == 1))
            m = max(max(m0, m1), max(m2, m3))
            top = m if m > top else top
        return top

    @numba.njit(cache=True, nogil=True)
    def _count1(rv, pv, e, n, c0, c1):
        """L0 of one segment, as :func:`_count4`."""
        r0, p0 = rv[e:e + n], pv[e:e + n]
        z0 = c0[:n]
        z1 = c1[:n]
        top = np.uint16(0)
        for t in range(n):
            m = _near(r0[t], p0[t])
            z0[t] += np.uint16(m == 0)
            z1[t] += np.uint16(m == 1)
            top = m if m > top else top
        return top

    @numba.njit(cache=True, nogil=True)
    def _far(rv, pv, histogram):
        """Bin the distances beyond 2 of one segment: k = 2 + the binary exponent of d - 1, read
        off its float64 (exact below 2^53; beyond, the bins saturate anyway); returns how many."""
        far = 0
        for t in range(rv.size):
            d = np.int64(_distance(rv[t], pv[t]))
            if d > 2:
                k = (np.float64(d - 1).view(np.int64) >> 52) - 1021
                histogram[SATURATED_BIN if k > SATURATED_BIN else k] += 1
                far += 1
        return far

    @numba.njit(cache=True, nogil=True)
    def _lane(groups, rv, pv, ov, compare, acc, peaks, histogram):
        """Reduce one lane's groups (:func:`group_segments`: accumulator offset, length, k, then k
        element offsets), in order. Element ``offset + t`` of a group adds its rows to
        ``acc[:, acc_offset + t]`` and its |prod - oracle|, |ref - oracle|, |oracle| to the running
        maxima ``peaks[:, t]``; an empty ``ov`` means no oracle (three rows). When ``compare`` (ref
        and prod of one format), L0 counts distances 0 and 1 per position in 16-bit counters
        (flushed before they could overflow), bins those beyond 2 one by one and takes the count
        of 2 as the rest."""
        has_oracle = ov.size == rv.size
        width = peaks.shape[1]
        c0 = np.zeros(width, np.uint16)
        c1 = np.zeros(width, np.uint16)
        elements = 0
        far = 0
        h0 = 0
        h1 = 0
        since_flush = 0
        for i in range(groups.shape[0]):
            a = groups[i, 0]
            n = groups[i, 1]
            k = groups[i, 2]
            elements += k * n
            top = np.uint16(0)
            if k == GROUP:
                e = groups[i, 3:3 + GROUP]
                if has_oracle:
                    _sweep4(acc, a, peaks, rv, pv, ov, e, n)
                else:
                    _sweep4_no_oracle(acc, a, rv, pv, e, n)
                if compare:
                    top = _count4(rv, pv, e, n, c0, c1)
            else:
                for j in range(k):
                    e1 = groups[i, 3 + j]
                    if has_oracle:
                        _sweep1(acc, a, peaks, rv, pv, ov, e1, n)
                    else:
                        _sweep1_no_oracle(acc, a, rv, pv, e1, n)
                    if compare:
                        m = _count1(rv, pv, e1, n, c0, c1)
                        top = m if m > top else top
            if top > 2:  # the few distances beyond 2 ULPs, binned one by one
                for j in range(k):
                    e1 = groups[i, 3 + j]
                    far += _far(rv[e1:e1 + n], pv[e1:e1 + n], histogram)
            since_flush += 1
            if since_flush == 65535 // GROUP:  # before a uint16 counter could overflow
                h0 += _flush(c0)
                h1 += _flush(c1)
                since_flush = 0
        if compare:
            h0 += _flush(c0)
            h1 += _flush(c1)
            histogram[0] += h0
            histogram[1] += h1
            histogram[2] += elements - h0 - h1 - far
    @numba.njit(cache=True, nogil=True)
    def _scatter(acc, labels, g):
        """Per row, the sums of ``acc`` over the positions of each label (negative: dropped), in
        position order; one pass (numpy's bincount per row took 0.6 ns per RoPE element)."""
        out = np.zeros((acc.shape[0], g))
        for j in range(acc.shape[0]):
            row = acc[j]
            dest = out[j]
            for i in range(labels.size):
                b = labels[i]
                if b >= 0:
                    dest[b] += row[i]
        return out


def merge_axis_groups(shape, kept: tuple[bool, ...]) -> list[tuple[int, bool]]:
    """Adjacent axes of one kind merged, size-1 axes dropped: [(size, kept), ...] (at least one).
    Shared with the torch path's ``outputs._reduce``."""
    groups: list[list] = []
    for size, k in zip(shape, kept):
        if size == 1:
            continue
        if groups and groups[-1][1] == k:
            groups[-1][0] *= size
        else:
            groups.append([size, k])
    return [(s, k) for s, k in groups] or [(1, True)]


def compact_labels(labels: torch.Tensor) -> tuple[tuple[bool, ...], torch.Tensor]:
    """(kept, compact): the axes along which broadcast labels vary (a broadcast axis has stride 0
    and is summed densely, before any scatter) and the labels narrowed to index 0 along the others.
    Shared with the torch path (``outputs._summarize_finite``)."""
    shape = tuple(labels.shape)
    kept = tuple(not (shape[a] > 1 and labels.stride(a) == 0) for a in range(len(shape)))
    compact = labels
    for a, k in enumerate(kept):
        if not k:
            compact = compact.narrow(a, 0, 1)
    return kept, compact


def segment_table(groups: list[tuple[int, bool]], width: int) -> np.ndarray:
    """The order in which the kernel visits the elements: (element offset, accumulator offset,
    length) per contiguous segment of at most ``width`` elements of the innermost group, in
    memory order. With a kept innermost group the accumulator position is the kept groups'
    C-order index; with a summed one it is that index times ``width`` plus the offset in the
    segment, summed over ``width`` by the caller. (Visiting the summed outer groups innermost, to
    keep a large accumulator in the cache, measured no faster on RoPE's 5 MB of them.)"""
    inner, inner_kept = groups[-1]
    outer = groups[:-1]
    kept_size = math.prod(s for s, k in groups if k)
    element = np.zeros(1, np.int64)
    accumulator = np.zeros(1, np.int64)
    memory_step, acc_step = math.prod(s for s, _ in groups), kept_size
    for size, kept in outer:
        memory_step //= size
        if kept:
            acc_step //= size
        index = np.arange(size, dtype=np.int64)
        element = (element[:, None] + index * memory_step).reshape(-1)
        accumulator = (accumulator[:, None] + index * (acc_step if kept else 0)).reshape(-1)
    if not inner_kept:
        accumulator = accumulator * width
    starts = np.arange(0, inner, width, dtype=np.int64)
    element = (element[:, None] + starts).reshape(-1)
    accumulator = (accumulator[:, None] + (starts if inner_kept else 0 * starts)).reshape(-1)
    length = np.tile(np.minimum(width, inner - starts), len(element) // len(starts))
    return np.stack([element, accumulator, length], axis=1)


def label_runs(segments: np.ndarray, labels: np.ndarray, g: int) -> np.ndarray:
    """``segments`` (accumulator offsets = compact label positions) split where the labels stop
    counting up by one, with accumulator offsets in label space: the label at the run's start,
    or ``g`` for a run of excluded (negative) labels. RoPE's block*head_dim + dim labels make runs
    of head_dim, so its accumulators shrink from every position (5 MB) to every label (20 kB)."""
    follows = np.ones(labels.size, bool)
    follows[0] = False
    previous, current = labels[:-1], labels[1:]
    follows[1:] = ((current >= 0) & (previous >= 0) & (current == previous + 1)) | ((current < 0) & (previous < 0))
    starts = np.flatnonzero(~follows)
    element, first, length = segments[:, 0], segments[:, 1], segments[:, 2]
    lo = np.searchsorted(starts, first, side="right")
    hi = np.searchsorted(starts, first + length, side="left")
    pieces = hi - lo + 1
    row = np.repeat(np.arange(len(segments)), pieces)
    within = np.arange(row.size) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    begin = np.where(within == 0, first[row], starts[np.minimum(lo[row] + within - 1, starts.size - 1)])
    end = np.append(begin[1:], 0)
    last = np.cumsum(pieces) - 1
    end[last] = first + length
    values = labels[begin]
    return np.stack([element[row] + begin - first[row], np.where(values >= 0, values, g), end - begin], axis=1)


def lanes_for(segments: int, numel: int, acc_bytes: int) -> int:
    """Lanes of an output: a function of its shape and accumulator size only (never of threads)."""
    by_size = numel // LANE_MIN_ELEMENTS
    by_memory = LANE_MEMORY // max(1, acc_bytes)
    return int(max(1, min(MAX_LANES, by_size, by_memory, segments)))


def group_segments(segments: np.ndarray, bounds: list[int], size: int = GROUP) -> tuple[np.ndarray, list[int]]:
    """The segments of each lane (``segments[bounds[i]:bounds[i + 1]]``) as groups of up to
    ``size`` consecutive segments with one accumulator window (offset and length): rows
    (accumulator offset, length, k, then the k element offsets, padded with -1), and the lanes'
    bounds in those rows. Only consecutive segments are grouped, so every accumulator position
    receives its elements in table order: the sums of a walk through the table, bit for bit."""
    m = len(segments)
    lane = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    window = segments[:, 1:]
    new_run = np.ones(m, bool)
    new_run[1:] = (window[1:] != window[:-1]).any(axis=1) | (lane[1:] != lane[:-1])
    position = np.arange(m)
    rank = position - np.maximum.accumulate(np.where(new_run, position, 0))
    starts = new_run | (rank % size == 0)
    group = np.cumsum(starts) - 1
    first = np.flatnonzero(starts)
    table = np.full((len(first), 3 + size), -1, np.int64)
    table[:, :2] = window[first]
    table[:, 2] = np.bincount(group, minlength=len(first))
    table[group, 3 + position - first[group]] = segments[:, 0]
    return table, np.searchsorted(first, bounds).tolist()


_SAME_WIDTH_INT = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _as_array(t: torch.Tensor, dtype) -> np.ndarray:
    """``t``'s memory, flat, as a numpy array of ``dtype`` (a view when ``t`` is contiguous)."""
    flat = t.contiguous().reshape(-1)
    if flat.dtype in (torch.float32, torch.float64) and np.dtype(dtype).kind == "f":
        return flat.numpy()
    return flat.view(_SAME_WIDTH_INT[flat.element_size()]).numpy().view(dtype)


class FusedReducer:
    """Runs :func:`_lane` over an output's lanes, on up to ``torch.get_num_threads()`` threads;
    keeps the segment tables of the layouts it has seen."""

    def __init__(self):
        self._pool: ThreadPoolExecutor | None = None
        self._pool_size = 0
        self._pid = os.getpid()
        self._tables: dict[tuple, np.ndarray] = {}
        self._runs: dict[tuple, tuple] = {}  # layout -> (labels, their run table or None, misses)

    def _map(self, fn, items: list) -> None:
        threads = min(len(items), torch.get_num_threads())
        if threads <= 1:
            for item in items:
                fn(item)
            return
        if self._pool is None or self._pool_size != threads or self._pid != os.getpid():  # a forked child
            self._pool = ThreadPoolExecutor(threads, thread_name_prefix="kcert-reduce")
            self._pool_size, self._pid = threads, os.getpid()
        for _ in self._pool.map(fn, items):
            pass

    def _segments(self, groups: list[tuple[int, bool]], width: int) -> tuple[np.ndarray, dict]:
        """The segment table of a layout, and its groupings by lane bounds (:func:`group_segments`)."""
        key = (tuple(groups), width)
        entry = self._tables.get(key)
        if entry is None:
            entry = self._tables[key] = (segment_table(groups, width), {})
        return entry

    def _label_segments(self, groups, width: int, segments: np.ndarray, labels: np.ndarray, g: int,
                        numel: int) -> tuple[np.ndarray, dict] | None:
        """The segments split into label runs (:func:`label_runs`) when they average at least
        :data:`MIN_RUN` elements, with their groupings, else None. Labels usually repeat from one
        replicate to the next (RoPE's) or never make runs (per-element labels): the last labels of
        a layout and their table are kept, so each costs one comparison."""
        key = (tuple(groups), width, g)
        cached = self._runs.get(key)
        if cached is not None and np.array_equal(cached[0], labels):
            return cached[1]
        if cached is not None and cached[1] is None and cached[2] >= 3:
            return None  # three different label sets without runs: stop looking
        runs = label_runs(segments, labels, g)
        useful = (runs, {}) if len(runs) * MIN_RUN <= numel else None
        misses = cached[2] + 1 if cached is not None and useful is None else 0
        self._runs[key] = (labels.copy(), useful, misses)
        return useful

    def reduce(self, ref_out: torch.Tensor, prod_out: torch.Tensor, oracle_out: torch.Tensor | None,
               bucket_axes: tuple[int, ...], labels: torch.Tensor | None, label_count: int | None,
               compare: bool, backend: str = "auto"):
        """``(sums (rows, G), counts (2, G), (e_prod, e_ref, peak) or None, histogram)`` with the
        rows of ``outputs._fill_rows`` (5 with an oracle, else 3); ``NONFINITE`` when a value is
        inf or nan (the caller's masked path handles it); ``NOT_APPLICABLE`` when this path
        cannot run (see the module docstring). ``backend``: "auto" runs the numba kernel on the CPU
        and the Triton one (:mod:`kcert.execution.fused_triton`) on a CUDA device; "triton" forces
        the Triton kernel (on CPU tensors it needs ``TRITON_INTERPRET=1``: the tests' way)."""
        cpu = ref_out.device.type == "cpu"
        use_triton = backend == "triton" or (backend == "auto" and ref_out.device.type == "cuda")
        if use_triton:
            from . import fused_triton  # imports triton: only when a kernel is to run there
            usable = fused_triton.available() and os.environ.get(_DISABLE_ENV, "") in ("", "0")
        else:
            usable = available() and cpu
        if not usable or ref_out.dtype not in _VALUES or prod_out.dtype not in _VALUES or ref_out.numel() == 0:
            return NOT_APPLICABLE
        plan = self.plan(ref_out, oracle_out is not None, bucket_axes, labels, label_count)
        if plan is NOT_APPLICABLE:
            return NOT_APPLICABLE
        if use_triton:
            total, peak, histogram = fused_triton.reduce(plan, ref_out, prod_out, oracle_out, compare)
        else:
            total, peak, histogram = self._reduce_cpu(plan, ref_out, prod_out, oracle_out, compare)
        return finish(plan, total, peak, histogram, oracle_out is not None)

    def plan(self, ref_out: torch.Tensor, has_oracle: bool, bucket_axes: tuple[int, ...],
             labels: torch.Tensor | None, label_count: int | None) -> Plan | str:
        """The :class:`Plan` of an output (its segment table, accumulators and lanes), or
        ``NOT_APPLICABLE`` (see the module docstring). A function of the shape, the buckets and
        the labels only: both kernels follow it, so both give the same numbers."""
        shape = tuple(ref_out.shape)
        numel = ref_out.numel()
        if labels is None:
            kept = tuple(a in bucket_axes for a in range(len(shape)))
        else:  # accumulate over the compact label positions: the broadcast axes are summed
            kept, compact = compact_labels(labels)
        groups = merge_axis_groups(shape, kept)
        positions = math.prod(s for s, k in groups if k)
        inner, inner_kept = groups[-1]
        rows = 5 if has_oracle else 3
        width = min(inner, WIDTH)
        if not inner_kept:  # positions b * width + t: bounded memory, summed over width below
            width = max(1, min(width, ACC_MEMORY // (8 * rows * positions)))
        acc_size = positions if inner_kept else positions * width
        if 8 * rows * acc_size > ACC_MEMORY and acc_size > numel:
            return NOT_APPLICABLE  # more accumulators than elements: the torch path scatters instead
        segments, groupings = self._segments(groups, width)
        if len(segments) > MANY_SEGMENTS and numel < MIN_SEGMENT * len(segments):
            return NOT_APPLICABLE  # short innermost runs (e.g. (N, 2) bucketed by the last axis): torch is faster
        by_runs = False
        flat, g = None, positions
        if labels is not None:
            flat = compact.contiguous().reshape(-1).cpu().numpy()
            g = max(int(flat.max()) + 1, label_count or 0)
            runs = self._label_segments(groups, width, segments, flat, g, numel) if inner_kept else None
            if runs is not None:  # accumulate in label space; [g, g + width) takes the excluded elements
                (segments, groupings), acc_size, by_runs = runs, g + width, True
        lanes = lanes_for(len(segments), numel, 8 * rows * acc_size)
        bounds = tuple(len(segments) * i // lanes for i in range(lanes + 1))
        return Plan(numel, rows, width, positions, inner_kept, acc_size, segments, bounds, groupings, flat, g,
                    by_runs)

    def _reduce_cpu(self, plan: Plan, ref_out, prod_out, oracle_out, compare: bool):
        """The numba kernel over the plan's lanes: (lane sums added in lane order, peaks, histogram)."""
        acc = np.zeros((plan.lanes, plan.rows, plan.acc_size))
        peaks = np.zeros((plan.lanes, 3, plan.width))
        histogram = np.zeros((plan.lanes, N_BINS), np.int64)
        ref = _as_array(ref_out, _VALUES[ref_out.dtype])
        prod = _as_array(prod_out, _VALUES[prod_out.dtype])
        oracle = (oracle_out.to(torch.float64).contiguous().reshape(-1).numpy() if oracle_out is not None
                  else np.zeros(0, np.float64))
        grouping = plan.groupings.get(plan.bounds)
        if grouping is None:
            grouping = plan.groupings[plan.bounds] = group_segments(plan.segments, list(plan.bounds))
        table, group_bounds = grouping

        def run(i):
            _lane(table[group_bounds[i]:group_bounds[i + 1]], ref, prod, oracle, bool(compare), acc[i], peaks[i],
                  histogram[i])

        self._map(run, list(range(plan.lanes)))
        total = acc[0]
        for i in range(1, plan.lanes):  # in lane order: the numbers do not depend on the threads
            total = total + acc[i]
        return total, peaks.max(axis=(0, 2)), histogram.sum(0)


@dataclass(frozen=True)
class Plan:
    """How one output is reduced (:meth:`FusedReducer.plan`): ``segments`` (element offset,
    accumulator offset, length) in the order of the additions, cut into lanes at ``bounds``; each
    lane sums into its own ``(rows, acc_size)`` accumulators, which are added in lane order; with a
    summed innermost group the accumulators are then folded over ``width``; with labels
    (``labels``, flat, over the compact positions) they are in label space (``by_runs``) or
    scattered to the ``g`` buckets."""

    numel: int
    rows: int
    width: int
    positions: int
    inner_kept: bool
    acc_size: int
    segments: np.ndarray
    bounds: tuple[int, ...]
    groupings: dict  # the CPU kernel's groups of segments by bounds (group_segments), cached per layout
    labels: np.ndarray | None
    g: int
    by_runs: bool

    @property
    def lanes(self) -> int:
        return len(self.bounds) - 1


def finish(plan: Plan, total: np.ndarray, peak: np.ndarray, histogram: np.ndarray, has_oracle: bool):
    """``FusedReducer.reduce``'s result from the lanes' summed accumulators ``total`` (rows,
    acc_size), the maxima ``peak`` (3,) and the ULP ``histogram``: the same code for both kernels."""
    if not plan.inner_kept:
        total = total.reshape(plan.rows, plan.positions, plan.width).sum(-1)
    with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: exactly what is checked
        finite = np.isfinite(total.sum()) and np.isfinite(peak).all()
    if not finite:
        return NONFINITE
    numel, flat, g = plan.numel, plan.labels, plan.g
    if flat is None:
        counts = np.broadcast_to(np.float64(numel / g), (2, g))
    else:
        if plan.by_runs:
            total = total[:, :g]
        elif numba is not None:
            total = _scatter(total, flat, g)
        else:  # the Triton kernel without numba: np.add.at adds in position order too, unbuffered
            out = np.zeros((total.shape[0], g + 1))
            np.add.at(out, (slice(None), np.where(flat >= 0, flat, g)), total)
            total = out[:, :g]
        counts = np.bincount(flat[flat >= 0], minlength=g).astype(np.float64) * (numel // flat.size)
        counts = np.broadcast_to(counts, (2, g))
    return total, counts, (tuple(float(v) for v in peak) if has_oracle else None), histogram
