"""The per-replicate reduction as one compiled pass over the elements (CPU, numba; optional).

:mod:`kcert.execution.outputs` reduces an output with about a dozen eager torch passes per chunk.
On the CPU those passes cost 7-10 ns per element, a quarter to a half of what evaluating ref, prod
and the float64 oracle costs for light kernels such as RoPE or RMSNorm (docs/benchmarks.md). Here
every element is read once, in cache-sized segments: decoded to float64 (bfloat16 by a bit shift,
float16 through a 65536-entry table), differenced, added to its accumulator position's five sums,
folded into the running maxima and, for L0, binned by its ULP distance: 3.2-4.5 ns per element (benchmarks/reduction.py).

Determinism: the order of the additions is a segment table (:func:`segment_table`,
:func:`label_runs`) fixed by the output's shape and buckets; the table is cut into ``lanes``
(:func:`lanes_for`, a function of the shape and the accumulator size), each lane sums into its
own accumulators and the lanes are added in order. The lanes may run on any number of threads
(the kernel releases the GIL): the numbers never depend on the thread count, the batch size or the
process. They differ from the torch path's by float64 round-off (sums) and not at all (extremes,
ULP counts); the certificate names the path (``provenance.environment.reduction``).

Install with ``pip install "kcert[fast]"``. Without numba, on another device, for integer outputs,
when a summed innermost axis group would need more accumulators than there are elements, or
when the contiguous runs are too short to amortize a segment (many runs under 16 elements),
:meth:`FusedReducer.reduce` returns ``NOT_APPLICABLE`` and the torch path runs; ``KCERT_NO_FUSED=1``
forces that path.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import torch

from ..stats.bitwise import N_BINS, SATURATED_BIN

try:  # numba is an optional extra: kcert[fast]
    import numba
except Exception:  # pragma: no cover - not installed, or broken (e.g. a local module shadows one it imports)
    numba = None

NOT_APPLICABLE = "not applicable"
NONFINITE = "non-finite"
WIDTH = 1024  # elements per innermost segment: the kernel's scratch rows stay in the L1 cache
LANE_MIN_ELEMENTS = 1 << 20  # a lane must amortize its own accumulators and their final addition
MAX_LANES = 16
LANE_MEMORY = 64 * 2**20  # bytes of the lanes' accumulators together, at most
MIN_SEGMENT, MANY_SEGMENTS = 16, 4096  # each segment costs ~100 cycles of set-up: shorter ones go to torch
MIN_RUN = 32  # label runs shorter than this on average: accumulate by position and scatter instead
ACC_MEMORY = 16 * 2**20  # bytes of one lane's accumulators for a summed innermost axis group
_DISABLE_ENV = "KCERT_NO_FUSED"  # set to 1 to force the torch path (comparisons, debugging)

_BITS = {torch.bfloat16: np.int16, torch.float16: np.int16, torch.float32: np.int32, torch.float64: np.int64}
_VALUES = {torch.bfloat16: np.uint16, torch.float16: np.uint16, torch.float32: np.float32, torch.float64: np.float64}
_TABLES: dict[torch.dtype, np.ndarray] = {}
_NO_TABLE = np.zeros(1, np.float64)


def available() -> bool:
    return numba is not None and os.environ.get(_DISABLE_ENV, "") in ("", "0")


BF16_SHIFT, TABLE, DIRECT = 0, 1, 2  # how the kernel decodes a side's values into float64


def _mode(dtype: torch.dtype) -> int:
    return {torch.bfloat16: BF16_SHIFT, torch.float16: TABLE}.get(dtype, DIRECT)


def _table(dtype: torch.dtype) -> np.ndarray:
    """float64 value of every float16 bit pattern (exact: each is a float64): numba has no float16
    arithmetic on the CPU. bfloat16 needs none (its bits are float32's upper half)."""
    if _mode(dtype) != TABLE:
        return _NO_TABLE
    table = _TABLES.get(dtype)
    if table is None:
        codes = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
        values = codes.view(dtype).to(torch.float64).numpy()
        table = _TABLES[dtype] = np.roll(values, -(2**15)).copy()  # index = unsigned bit pattern
    return table


if numba is not None:

    @numba.njit(cache=True, nogil=True, inline="always")
    def _decode(values, mode, table, out, u32, f32):
        """out[:n] = float64 of values (n of them); bfloat16 by a shift into float32's bits."""
        n = values.size
        if mode == 0:
            for t in range(n):
                u32[t] = np.uint32(values[t]) << 16
            for t in range(n):
                out[t] = np.float64(f32[t])
        elif mode == 1:
            for t in range(n):
                out[t] = table[np.int64(values[t])]
        else:
            for t in range(n):
                out[t] = np.float64(values[t])

    # The loops below index slices from 0 (never ``x[offset + t]``: numba's negative-index
    # wraparound then puts a branch in every access, which kept LLVM from vectorizing them) and
    # write the sign and the maxima as selects; each compiles to SIMD code (checked with
    # ``_lane.inspect_asm``: 14 ns per element before, 3.4 after, on the RMSNorm benchmark).

    @numba.njit(cache=True, nogil=True)
    def _lane(segments, ref, ref_mode, ref_table, prod, prod_mode, prod_table, oracle, ref_bits, prod_bits,
              compare, acc, peaks, histogram):
        """Reduce the segments ``segments`` (rows: element offset, accumulator offset, length),
        each a contiguous run of elements, in order.

        Element ``offset + t`` adds its rows to ``acc[:, acc_offset + t]`` and its |prod - oracle|,
        |ref - oracle|, |oracle| to the running maxima ``peaks[:, t]``: elementwise updates, so the
        loops vectorize and no sum runs through a register; the order of the additions is fixed
        by the segment table, which depends on the output's shape and buckets alone."""
        width = peaks.shape[1]
        has_oracle = oracle.size == ref.size
        r64 = np.empty(width)
        p64 = np.empty(width)
        u32 = np.empty(width, np.uint32)
        f32 = u32.view(np.float32)
        distances = np.empty(width, np.int64)
        below = np.empty(1, np.float64)  # float64(d - 1) is exact below 2^53; beyond, d saturates anyway
        exponent = below.view(np.int64)
        magnitude = (np.int64(1) << (8 * ref_bits.itemsize - 1)) - 1
        big = np.iinfo(np.int64).max
        h0 = 0
        h1 = 0
        h2 = 0
        for i in range(segments.shape[0]):
            e = segments[i, 0]
            a = segments[i, 1]
            n = segments[i, 2]
            _decode(ref[e:e + n], ref_mode, ref_table, r64, u32, f32)
            _decode(prod[e:e + n], prod_mode, prod_table, p64, u32, f32)
            acc0 = acc[0, a:a + n]
            acc1 = acc[1, a:a + n]
            acc2 = acc[2, a:a + n]
            if has_oracle:
                acc3 = acc[3, a:a + n]
                acc4 = acc[4, a:a + n]
                o64 = oracle[e:e + n]
                for t in range(n):
                    r = r64[t]
                    o = o64[t]
                    s = 1.0 if r > 0 else 0.0
                    s = -1.0 if r < 0 else s
                    d = p64[t] - r
                    ro = r - o
                    acc0[t] += d
                    acc1[t] += d * s
                    acc2[t] += ro
                    acc3[t] += ro * s
                    acc4[t] += abs(r)
                peak0 = peaks[0]
                peak1 = peaks[1]
                peak2 = peaks[2]
                for t in range(n):
                    o = o64[t]
                    x = abs(p64[t] - o)
                    y = abs(r64[t] - o)
                    z = abs(o)
                    c0 = peak0[t]
                    c1 = peak1[t]
                    c2 = peak2[t]
                    peak0[t] = x if x > c0 else c0
                    peak1[t] = y if y > c1 else c1
                    peak2[t] = z if z > c2 else c2
            else:
                for t in range(n):
                    r = r64[t]
                    s = 1.0 if r > 0 else 0.0
                    s = -1.0 if r < 0 else s
                    d = p64[t] - r
                    acc0[t] += d
                    acc1[t] += d * s
                    acc2[t] += abs(r)
            if compare:
                rb = ref_bits[e:e + n]
                pb = prod_bits[e:e + n]
                far = 0
                for t in range(n):  # ULP distances in totalOrder keys, and counts of 0, 1, 2
                    kr = np.int64(rb[t])
                    kp = np.int64(pb[t])
                    kr ^= (kr >> 63) & magnitude
                    kp ^= (kp >> 63) & magnitude
                    dist = kp - kr
                    wrapped = ((kp ^ kr) < 0) & ((dist ^ kp) < 0)  # int64 keys of opposite sign
                    dist = big if wrapped else abs(dist)
                    distances[t] = dist
                    h0 += dist == 0
                    h1 += dist == 1
                    h2 += dist == 2
                    far += dist > 2
                if far:  # the rest, few: bin k = 2 + the binary exponent of d - 1 (read off its float64)
                    for t in range(n):
                        d = distances[t]
                        if d > 2:
                            below[0] = np.float64(d - 1)
                            k = (exponent[0] >> 52) - 1021
                            histogram[SATURATED_BIN if k > SATURATED_BIN else k] += 1
        histogram[0] += h0
        histogram[1] += h1
        histogram[2] += h2


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

    def _segments(self, groups: list[tuple[int, bool]], width: int) -> np.ndarray:
        key = (tuple(groups), width)
        table = self._tables.get(key)
        if table is None:
            table = self._tables[key] = segment_table(groups, width)
        return table

    def _label_segments(self, groups, width: int, segments: np.ndarray, labels: np.ndarray, g: int,
                        numel: int) -> np.ndarray | None:
        """The segments split into label runs (:func:`label_runs`) when they average at least
        :data:`MIN_RUN` elements, else None. Labels usually repeat from one replicate to the next
        (RoPE's) or never make runs (per-element labels): the last labels of a layout and their
        table are kept, so each costs one comparison."""
        key = (tuple(groups), width, g)
        cached = self._runs.get(key)
        if cached is not None and np.array_equal(cached[0], labels):
            return cached[1]
        if cached is not None and cached[1] is None and cached[2] >= 3:
            return None  # three different label sets without runs: stop looking
        runs = label_runs(segments, labels, g)
        useful = runs if len(runs) * MIN_RUN <= numel else None
        misses = cached[2] + 1 if cached is not None and useful is None else 0
        self._runs[key] = (labels.copy(), useful, misses)
        return useful

    def reduce(self, ref_out: torch.Tensor, prod_out: torch.Tensor, oracle_out: torch.Tensor | None,
               bucket_axes: tuple[int, ...], labels: torch.Tensor | None, label_count: int | None,
               compare: bool):
        """``(sums (rows, G), counts (2, G), (e_prod, e_ref, peak) or None, histogram)`` with the
        rows of ``outputs._fill_rows`` (5 with an oracle, else 3); ``NONFINITE`` when a value is
        inf or nan (the caller's masked path handles it); ``NOT_APPLICABLE`` when this path
        cannot run (see the module docstring)."""
        if not available() or ref_out.device.type != "cpu" or ref_out.dtype not in _BITS \
                or prod_out.dtype not in _BITS or ref_out.numel() == 0:
            return NOT_APPLICABLE
        shape = tuple(ref_out.shape)
        numel = ref_out.numel()
        if labels is None:
            kept = tuple(a in bucket_axes for a in range(len(shape)))
        else:  # accumulate over the compact label positions: the broadcast axes are summed
            kept, compact = compact_labels(labels)
        groups = merge_axis_groups(shape, kept)
        positions = math.prod(s for s, k in groups if k)
        inner, inner_kept = groups[-1]
        rows = 5 if oracle_out is not None else 3
        width = min(inner, WIDTH)
        if not inner_kept:  # positions b * width + t: bounded memory, summed over width below
            width = max(1, min(width, ACC_MEMORY // (8 * rows * positions)))
        acc_size = positions if inner_kept else positions * width
        if 8 * rows * acc_size > ACC_MEMORY and acc_size > numel:
            return NOT_APPLICABLE  # more accumulators than elements: the torch path scatters instead
        segments = self._segments(groups, width)
        if len(segments) > MANY_SEGMENTS and numel < MIN_SEGMENT * len(segments):
            return NOT_APPLICABLE  # short innermost runs (e.g. (N, 2) bucketed by the last axis): torch is faster
        by_runs = False
        if labels is not None:
            flat = compact.contiguous().reshape(-1).numpy()
            g = max(int(flat.max()) + 1, label_count or 0)
            runs = self._label_segments(groups, width, segments, flat, g, numel) if inner_kept else None
            if runs is not None:  # accumulate in label space; [g, g + width) takes the excluded elements
                segments, acc_size, by_runs = runs, g + width, True
        lanes = lanes_for(len(segments), numel, 8 * rows * acc_size)
        acc = np.zeros((lanes, rows, acc_size))
        peaks = np.zeros((lanes, 3, width))
        histogram = np.zeros((lanes, N_BINS), np.int64)
        ref = _as_array(ref_out, _VALUES[ref_out.dtype])
        prod = _as_array(prod_out, _VALUES[prod_out.dtype])
        no_bits = np.zeros(1, np.int64)
        ref_bits = _as_array(ref_out, _BITS[ref_out.dtype]) if compare else no_bits
        prod_bits = _as_array(prod_out, _BITS[prod_out.dtype]) if compare else no_bits
        oracle = (oracle_out.to(torch.float64).contiguous().reshape(-1).numpy() if oracle_out is not None
                  else np.zeros(0, np.float64))
        args = (ref, _mode(ref_out.dtype), _table(ref_out.dtype), prod, _mode(prod_out.dtype), _table(prod_out.dtype),
                oracle, ref_bits, prod_bits, bool(compare))
        bounds = [len(segments) * i // lanes for i in range(lanes + 1)]

        def run(i):
            _lane(segments[bounds[i]:bounds[i + 1]], *args, acc[i], peaks[i], histogram[i])

        self._map(run, list(range(lanes)))
        total = acc[0]
        for i in range(1, lanes):  # in lane order: the numbers do not depend on the threads
            total = total + acc[i]
        if not inner_kept:
            total = total.reshape(rows, positions, width).sum(-1)
        peak = peaks.max(axis=(0, 2))
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: exactly what is checked
            finite = np.isfinite(total.sum()) and np.isfinite(peak).all()
        if not finite:
            return NONFINITE
        if labels is None:
            g = positions
            counts = np.full((2, g), numel / g)
        else:
            total = total[:, :g] if by_runs else _scatter(total, flat, g)
            counts = np.bincount(flat[flat >= 0], minlength=g).astype(np.float64) * (numel // flat.size)
            counts = np.broadcast_to(counts, (2, g))
        return total, counts, (tuple(float(v) for v in peak) if oracle_out is not None else None), histogram.sum(0)
