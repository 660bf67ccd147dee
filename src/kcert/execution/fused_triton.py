"""The per-replicate reduction of :mod:`kcert.execution.fused` as one Triton kernel, for outputs on
a CUDA device (``certify(..., device="cuda")``); the torch path's dozen eager passes per chunk were
the accelerator's reduction before.

Same numbers as the CPU kernel, bit for bit: both follow one :class:`~kcert.execution.fused.Plan`.
Every accumulator position receives its elements in the order of the plan's segment table, each
lane from zero, with the float64 arithmetic of ``fused._element`` operation for operation (exact
decoding, ``d * sign(ref)`` as a negation or a zero); the lanes' accumulators are added in lane
order (elementwise, as numpy does) and the fold over the segment width, the scatter to buckets and
the finiteness check are :func:`kcert.execution.fused.finish`, the very code of the CPU path. The
extremes and the ULP counts are exact whatever the order. The parallelism is over (lane, block of
:data:`BLOCK` accumulator positions): a program walks, in table order, the segments of its lane
that touch its block, keeping its block's sums in registers. A layout with few accumulator
positions (RMSNorm bucketed by a 1024-wide channel axis: 8 programs) therefore runs on few of a
GPU's cores; splitting the segment walk further would change the order of the additions, and the
numbers would no longer be the CPU path's (docs/benchmarks.md, "The accelerator's reduction").

Decoding is integer arithmetic on the bit patterns (sign, exponent and mantissa placed into
float64's fields; subnormals as the mantissa times a power of two, exact in float64), never a
conversion through float32 that a GPU may flush to zero.

Tested on the CPU with Triton's interpreter (``TRITON_INTERPRET=1`` set before this module is
imported; ``tests/test_fused_triton.py``) against the CPU kernel, and compiled (not run) for an
sm_90 target, whose PTX holds no fused multiply-add and no flush-to-zero. Not yet run on a GPU.
"""

from __future__ import annotations

import numpy as np
import torch

from ..stats.bitwise import N_BINS, SATURATED_BIN

try:  # triton comes with torch's CUDA wheels, or with kcert[opaque]
    import triton
    import triton.language as tl
except Exception:  # pragma: no cover - not installed
    triton = None

BLOCK = 128  # accumulator positions per program
BINS = 32  # N_BINS rounded up to a power of two (tl.histogram's bins)
# (exponent bits, mantissa bits, total bits) of each format; float64 is read by a bit cast
_FORMATS = {torch.bfloat16: (8, 7, 16), torch.float16: (5, 10, 16), torch.float32: (8, 23, 32),
            torch.float64: (11, 52, 64)}
_SAME_WIDTH_INT = {16: torch.int16, 32: torch.int32, 64: torch.int64}


def available() -> bool:
    """Whether triton is importable (the kernel itself needs a CUDA device, or the interpreter)."""
    return triton is not None


def schedule(segments: np.ndarray, bounds: tuple[int, ...], acc_size: int, block: int = BLOCK):
    """The programs of a plan: ``(programs, starts, entries)``; program ``i`` is (lane, first
    position) and walks ``entries[starts[i]:starts[i + 1]]`` (element offset, accumulator offset,
    length: the segments of its lane that touch positions [first, first + block)), in table order."""
    lane = np.repeat(np.arange(len(bounds) - 1), np.diff(bounds))
    first = segments[:, 1] // block
    count = (segments[:, 1] + segments[:, 2] - 1) // block - first + 1
    row = np.repeat(np.arange(len(segments)), count)
    blocks = first[row] + np.arange(row.size) - np.repeat(np.cumsum(count) - count, count)
    per_lane = -(-acc_size // block)
    key = lane[row] * per_lane + blocks
    order = np.argsort(key, kind="stable")  # stable: within a program, the table's order
    key, row = key[order], row[order]
    programs, starts = np.unique(key, return_index=True)
    programs = np.stack([programs // per_lane, (programs % per_lane) * block], axis=1)
    return programs, np.append(starts, len(key)), segments[row]


if triton is not None:

    @triton.jit
    def _decode(bits, E: tl.constexpr, M: tl.constexpr, W: tl.constexpr):
        """float64 of the bit patterns of a format with E exponent and M mantissa bits in W bits."""
        if W == 64:  # (if/else, not an early return: the compiler builds code after a static return too)
            value = bits.to(tl.float64, bitcast=True)
        else:
            u = bits.to(tl.int64) & ((1 << W) - 1)
            exponent = (u >> M) & ((1 << E) - 1)
            mantissa = u & ((1 << M) - 1)
            bias: tl.constexpr = (1 << (E - 1)) - 1
            top: tl.constexpr = (1 << E) - 1
            wide = tl.where(exponent == top, 2047, exponent + (1023 - bias))
            normal = ((wide << 52) | (mantissa << (52 - M))).to(tl.float64, bitcast=True)
            # a subnormal is mantissa units of 2^(1 - bias - M), a normal float64: the product is exact
            unit = tl.full([1], (1024 - bias - M) << 52, tl.int64).to(tl.float64, bitcast=True)
            value = tl.where(exponent == 0, mantissa.to(tl.float64) * unit, normal)
            value = tl.where((u >> (W - 1)) != 0, -value, value)
        return value

    @triton.jit
    def _ulp_bin(rb, pb, W: tl.constexpr, SATURATED: tl.constexpr):
        """L0's bin of the ULP distance of two bit patterns of one format (stats/bitwise): 0, 1,
        then 2 + the binary exponent of d - 1, saturated; a float64 key difference that overflows
        int64 saturates too (fused._distance)."""
        kr = rb.to(tl.int64)  # sign-extended
        kp = pb.to(tl.int64)
        kr = kr ^ ((kr >> 63) & ((1 << (W - 1)) - 1))
        kp = kp ^ ((kp >> 63) & ((1 << (W - 1)) - 1))
        d = kp - kr
        if W == 64:
            wrapped = ((kp ^ kr) < 0) & ((d ^ kp) < 0)
            d = tl.where(wrapped, 0x7FFFFFFFFFFFFFFF, tl.abs(d))
        else:
            d = tl.abs(d)
        k = ((d - 1).to(tl.float64).to(tl.int64, bitcast=True) >> 52) - 1021
        k = tl.minimum(k, SATURATED)
        return tl.where(d == 0, 0, tl.where(d == 1, 1, k))

    @triton.jit
    def _kernel(ref_ptr, prod_ptr, oracle_ptr, programs_ptr, starts_ptr, entries_ptr, acc_ptr, peaks_ptr, hist_ptr,
                acc_size, RE: tl.constexpr, RM: tl.constexpr, RW: tl.constexpr, PE: tl.constexpr,
                PM: tl.constexpr, PW: tl.constexpr, HAS_ORACLE: tl.constexpr, COMPARE: tl.constexpr,
                BLOCK: tl.constexpr, BINS: tl.constexpr, SATURATED: tl.constexpr):
        pid = tl.program_id(0)
        lane = tl.load(programs_ptr + 2 * pid)
        position = tl.load(programs_ptr + 2 * pid + 1) + tl.arange(0, BLOCK)
        j = tl.load(starts_ptr + pid)
        last = tl.load(starts_ptr + pid + 1)
        zero = tl.zeros([BLOCK], tl.float64)
        a0, a1, a2, a3, a4 = zero, zero, zero, zero, zero
        p0, p1, p2 = zero, zero, zero
        near0 = tl.zeros([BLOCK], tl.int64)  # per position: distances 0, 1 and 2
        near1 = tl.zeros([BLOCK], tl.int64)
        near2 = tl.zeros([BLOCK], tl.int64)
        far = tl.zeros([BINS], tl.int64)  # the few beyond 2, by bin
        bins = tl.arange(0, BINS)
        while j < last:  # (a while loop: the interpreter's range() refuses loaded bounds under numpy 2.4)
            element = tl.load(entries_ptr + 3 * j)
            offset = tl.load(entries_ptr + 3 * j + 1)
            length = tl.load(entries_ptr + 3 * j + 2)
            t = position - offset
            m = (t >= 0) & (t < length)
            index = element + t
            rb = tl.load(ref_ptr + index, mask=m, other=0)
            pb = tl.load(prod_ptr + index, mask=m, other=0)
            r = _decode(rb, RE, RM, RW)
            p = _decode(pb, PE, PM, PW)
            d = p - r
            a0 = tl.where(m, a0 + d, a0)
            a1 = tl.where(m, a1 + tl.where(r != 0, tl.where(r < 0, -d, d), 0.0), a1)
            if HAS_ORACLE:
                o = tl.load(oracle_ptr + index, mask=m, other=0.0)
                ro = r - o
                a2 = tl.where(m, a2 + ro, a2)
                a3 = tl.where(m, a3 + tl.where(r != 0, tl.where(r < 0, -ro, ro), 0.0), a3)
                a4 = tl.where(m, a4 + tl.abs(r), a4)
                x = tl.abs(p - o)
                y = tl.abs(r - o)
                z = tl.abs(o)
                p0 = tl.where(m & (x > p0), x, p0)  # selects, as the CPU kernel: a nan never replaces
                p1 = tl.where(m & (y > p1), y, p1)
                p2 = tl.where(m & (z > p2), z, p2)
            else:
                a2 = tl.where(m, a2 + tl.abs(r), a2)
            if COMPARE:  # (tl.histogram: the interpreter of triton 3.6 fails on its int64 counts)
                k = tl.where(m, _ulp_bin(rb, pb, RW, SATURATED), -1)
                near0 += (k == 0).to(tl.int64)
                near1 += (k == 1).to(tl.int64)
                near2 += (k == 2).to(tl.int64)
                if tl.max(k, axis=0) > 2:
                    far += tl.sum((k[:, None] == bins[None, :]).to(tl.int64), axis=0)
            j += 1
        inside = position < acc_size
        out = acc_ptr + lane * (5 if HAS_ORACLE else 3) * acc_size + position
        tl.store(out, a0, mask=inside)
        tl.store(out + acc_size, a1, mask=inside)
        tl.store(out + 2 * acc_size, a2, mask=inside)
        if HAS_ORACLE:
            tl.store(out + 3 * acc_size, a3, mask=inside)
            tl.store(out + 4 * acc_size, a4, mask=inside)
            tl.store(peaks_ptr + 3 * pid, tl.max(p0, axis=0))
            tl.store(peaks_ptr + 3 * pid + 1, tl.max(p1, axis=0))
            tl.store(peaks_ptr + 3 * pid + 2, tl.max(p2, axis=0))
        if COMPARE:
            counts = tl.where(bins == 0, tl.sum(near0, axis=0), tl.where(bins == 1, tl.sum(near1, axis=0), far))
            counts = tl.where(bins == 2, tl.sum(near2, axis=0), counts)
            tl.store(hist_ptr + BINS * pid + bins, counts)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t``'s memory, flat, as integers of its width (what the kernel decodes)."""
    return t.contiguous().reshape(-1).view(_SAME_WIDTH_INT[_FORMATS[t.dtype][2]])


def reduce(plan, ref_out: torch.Tensor, prod_out: torch.Tensor, oracle_out: torch.Tensor | None, compare: bool):
    """``(total, peak, histogram)`` of ``plan`` (:class:`kcert.execution.fused.Plan`) as numpy arrays: the
    lanes' accumulators added in lane order (rows, acc_size), the three maxima and the ULP counts,
    for :func:`kcert.execution.fused.finish`."""
    device = ref_out.device
    key = ("triton", BLOCK, plan.bounds, str(device))
    cached = plan.groupings.get(key)  # the plan's cache: one schedule per layout, bounds and device
    if cached is None:
        host = schedule(plan.segments, plan.bounds, plan.acc_size)
        cached = plan.groupings[key] = tuple(torch.from_numpy(np.ascontiguousarray(a, np.int64)).to(device)
                                             for a in host)
    programs, starts, entries = cached
    count = programs.shape[0]
    has_oracle = oracle_out is not None
    oracle = (oracle_out.to(torch.float64).contiguous().reshape(-1) if has_oracle
              else torch.zeros(1, dtype=torch.float64, device=device))
    acc = torch.zeros(plan.lanes, plan.rows, plan.acc_size, dtype=torch.float64, device=device)
    peaks = torch.zeros(count, 3, dtype=torch.float64, device=device)
    hist = torch.zeros(count, BINS, dtype=torch.int64, device=device)
    re, rm, rw = _FORMATS[ref_out.dtype]
    pe, pm, pw = _FORMATS[prod_out.dtype]
    _kernel[(count,)](_bits(ref_out), _bits(prod_out), oracle, programs, starts, entries, acc, peaks, hist,
                      plan.acc_size, re, rm, rw, pe, pm, pw, has_oracle, bool(compare), BLOCK, BINS, SATURATED_BIN)
    total = acc[0]
    for i in range(1, plan.lanes):  # in lane order, elementwise: numpy's additions on the CPU path
        total = total + acc[i]
    return total.cpu().numpy(), peaks.amax(0).cpu().numpy(), hist.sum(0)[:N_BINS].cpu().numpy()
