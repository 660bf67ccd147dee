"""The compiled one-pass reduction (kcert.execution.fused) against the torch paths: same sums to
float64 round-off, the same exact extremes and ULP counts, numbers independent of threads and
lanes, and a clean fallback where it does not apply."""

import itertools

import numpy as np
import pytest
import torch
from sample_kernels import REDUCTION_LAYOUTS

import kcert
from kcert.execution import fused
from kcert.execution.outputs import (
    bucket_labels,
    make_layout,
    summarize,
)
from kcert.stats import bitwise as S

pytestmark = pytest.mark.skipif(not fused.available(), reason="numba is not installed (pip install 'kcert[fast]')")


def _outputs(shape, ref_dtype=torch.bfloat16, prod_dtype=None, seed=3):
    g = torch.Generator().manual_seed(seed)
    exact = torch.randn(shape, generator=g, dtype=torch.float64) + 0.1
    r = exact.to(ref_dtype)
    p = (exact * (1 + 1e-2 * torch.randn(shape, generator=g, dtype=torch.float64))).to(prod_dtype or ref_dtype)
    return r, p, exact


def _labels(spec, r):
    return bucket_labels(spec, {}, {}, r, "test") if isinstance(spec, kcert.Labels) else None


LAYOUTS = REDUCTION_LAYOUTS + [  # the torch chunks' layouts (tests/sample_kernels.py), and:
    ((3, 2, 5, 7, 11, 13), kcert.Axes(0, 2, 4)),  # six alternating groups
    ((5, 1, 7), kcert.Axes(1)),  # a size-1 bucket axis
]


@pytest.mark.parametrize("oracle", [True, False])
@pytest.mark.parametrize("shape, spec", LAYOUTS)
def test_compiled_reduction_equals_the_torch_paths(shape, spec, oracle):
    r, p, o = _outputs(shape)
    o = o if oracle else None
    layout = make_layout(0, "out", r, p, spec, "test")
    labels = _labels(spec, r)
    count = spec.count if isinstance(spec, kcert.Labels) else None
    direct = fused.FusedReducer().reduce(r, p, o, layout.bucket_axes, labels, count, layout.bitwise_comparable)
    assert direct is not fused.NOT_APPLICABLE and direct is not fused.NONFINITE  # the compiled path ran
    compiled = summarize(layout, r, p, o, labels)
    chunked = summarize(layout, r, p, o, labels, path="chunked")  # the torch chunks
    masked = summarize(layout, r, p, o, labels, path="masked")
    for other in (chunked, masked):
        assert compiled.sums.shape == other.sums.shape
        scale = np.abs(other.sums).max(axis=1, keepdims=True)
        assert (np.abs(compiled.sums - other.sums) <= 1e-12 * scale).all()
        np.testing.assert_array_equal(compiled.present, other.present)
        np.testing.assert_array_equal(compiled.oracle_present, other.oracle_present)
        np.testing.assert_array_equal(compiled.ulp_histogram, other.ulp_histogram)
        np.testing.assert_array_equal([compiled.e_prod, compiled.e_ref, compiled.peak],
                                      [other.e_prod, other.e_ref, other.peak])
    assert np.abs(compiled.sums).max() > 0 and compiled.ulp_histogram.sum() == r.numel()


@pytest.mark.parametrize("ref_dtype, prod_dtype", [
    (torch.float16, None), (torch.float32, None), (torch.float64, None),
    (torch.bfloat16, torch.float32),  # different formats: no L0, both decoded
    (torch.float16, torch.bfloat16),
])
def test_every_format_decodes_exactly(ref_dtype, prod_dtype):
    r, p, o = _outputs((64, 96), ref_dtype, prod_dtype)
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    compiled = summarize(layout, r, p, o, None)
    masked = summarize(layout, r, p, o, None, path="masked")
    scale = np.abs(masked.sums).max(axis=1, keepdims=True)
    assert (np.abs(compiled.sums - masked.sums) <= 1e-12 * scale).all()
    assert [compiled.e_prod, compiled.e_ref, compiled.peak] == [masked.e_prod, masked.e_ref, masked.peak]
    np.testing.assert_array_equal(compiled.ulp_histogram, masked.ulp_histogram)
    assert bool(compiled.ulp_histogram.sum() == r.numel()) == layout.bitwise_comparable


def _walk(segments, width, positions, inner_kept, r, p, o):
    """The sums the compiled kernel must give, bit for bit: the segment table walked in numpy, one
    segment at a time, in lanes added in order (fused.lanes_for), folded like FusedReducer.reduce."""
    rows = 5 if o is not None else 3
    acc_size = positions if inner_kept else positions * width
    r64, p64 = r.double().reshape(-1).numpy(), p.double().reshape(-1).numpy()
    o64 = o.reshape(-1).numpy() if o is not None else None
    lanes = fused.lanes_for(len(segments), r.numel(), 8 * rows * acc_size)
    bounds = [len(segments) * i // lanes for i in range(lanes + 1)]
    total = None
    for lane in range(lanes):
        acc = np.zeros((rows, acc_size))
        for e, a, n in segments[bounds[lane]:bounds[lane + 1]]:
            x, y = r64[e:e + n], p64[e:e + n]
            sign, d = np.sign(x), y - x
            rows_of = [d, d * sign] + ([x - o64[e:e + n], (x - o64[e:e + n]) * sign] if o is not None else []) + [abs(x)]
            for j, row in enumerate(rows_of):
                acc[j, a:a + n] += row
        total = acc if total is None else total + acc
    return total if inner_kept else total.reshape(rows, positions, width).sum(-1)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("shape, axes", [
    ((64, 8, 512), (2,)),  # one window: groups of four segments
    ((5, 3, 1300), (2,)),  # 15 rows of two segments (1024 + 276) whose windows alternate: one per group
    ((7, 3000), (0,)),  # summed innermost group: a window per bucket, the last segment shorter (groups of 2, 1)
    ((4, 1024, 640), (2,)),  # two lanes
])
@pytest.mark.parametrize("oracle", [True, False])
def test_compiled_sums_are_the_segment_walk_bit_for_bit(shape, axes, dtype, oracle):
    """The accumulators are defined by the order of the segment table (checkpoints and resumed runs
    depend on it): the kernel's grouping of segments must not change a bit of them."""
    r, p, o = _outputs(shape, dtype)
    r.view(-1)[::5] = 0  # sign(0): the sign-aligned rows add zeros there
    o = o if oracle else None
    reducer = fused.FusedReducer()
    sums, _, peaks, histogram = reducer.reduce(r, p, o, axes, None, None, True)
    [((groups, width), (segments, _))] = reducer._tables.items()
    positions = int(np.prod([size for size, kept in groups if kept]))
    np.testing.assert_array_equal(sums, _walk(segments, width, positions, groups[-1][1], r, p, o))
    np.testing.assert_array_equal(histogram, S.ulp_histogram(_bits(r), _bits(p)))
    if oracle:
        r64, p64 = r.double(), p.double()
        assert peaks == (float((p64 - o).abs().max()), float((r64 - o).abs().max()), float(o.abs().max()))


def _bits(x):
    return x.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]).numpy()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_ulp_bins_match_the_numpy_reference_at_every_distance(dtype):
    """Distances 0 .. far beyond 2^16, both signs, +-0, and (float64) pairs whose key difference
    overflows int64: the saturated bin."""
    g = torch.Generator().manual_seed(5)
    r = torch.randn(4096, generator=g, dtype=torch.float64).to(dtype)
    steps = torch.tensor([0, 1, 2, 3, 4, 5, 8, 9, 100, 2**15, 2**16, 2**16 + 1, 2**20], dtype=torch.int64)
    bits = torch.from_numpy(_bits(r).astype(np.int64))
    moved = bits + steps[torch.arange(4096) % len(steps)]
    width = r.element_size() * 8
    moved = torch.clamp(moved, -(2 ** (width - 1)), 2 ** (width - 1) - 1)
    p = moved.to({16: torch.int16, 32: torch.int32, 64: torch.int64}[width]).view(dtype)
    p = torch.where(torch.isfinite(p), p, r)  # stepping may reach inf/nan patterns: keep those finite
    r[0], p[0] = 0.0, -0.0
    if dtype == torch.float64:
        r[1], p[1] = 1e300, -1e300  # keys of opposite sign whose difference overflows int64
    layout = make_layout(0, "out", r, p, kcert.Axes(), "test")
    compiled = summarize(layout, r, p, r.double(), None)
    np.testing.assert_array_equal(compiled.ulp_histogram, S.ulp_histogram(_bits(r), _bits(p)))
    assert compiled.ulp_histogram[3:S.SATURATED_BIN + 1].sum() > 0


def test_ulp_counters_flush_before_they_overflow():
    """16384 groups of four 16-element segments on one window: each position counts 65536
    distances of 0, more than its 16-bit counter holds, so the counts must be flushed on the way."""
    r = torch.randn(1 << 16, 16, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16)
    p = r.clone()
    p.view(torch.int16)[::1000, 0] += 1  # one ULP apart (away from zero) in 66 rows of position 0
    reducer = fused.FusedReducer()
    _, _, _, histogram = reducer.reduce(r, p, None, (1,), None, None, True)
    [(_, (segments, _))] = reducer._tables.items()
    assert len(segments) == 1 << 16 and fused.lanes_for(len(segments), r.numel(), 8 * 3 * 16) == 1
    np.testing.assert_array_equal(histogram, S.ulp_histogram(_bits(r), _bits(p)))
    assert histogram[1] == 66 and histogram[0] == r.numel() - 66


def test_numbers_do_not_depend_on_threads_or_lanes():
    """Lanes are fixed by the shape; any number of threads runs them and the sums are bitwise equal."""
    r, p, o = _outputs((4, 1024, 640))  # 2.6 M elements: two lanes
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    assert fused.lanes_for(len(fused.segment_table([(4096, False), (640, True)], 640)), r.numel(), 8 * 5 * 640) == 2
    before = torch.get_num_threads()
    try:
        results = []
        for threads in (1, 2):
            torch.set_num_threads(threads)
            results.append(summarize(layout, r, p, o, None))
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(results[0].sums, results[1].sums)
    np.testing.assert_array_equal(results[0].ulp_histogram, results[1].ulp_histogram)


@pytest.mark.parametrize("groups, width", [
    ([(6, False), (10, True)], 4),
    ([(3, True), (4, False), (10, False)], 4),  # summed innermost, folded over width
    ([(2, True), (3, False), (5, True), (7, False)], 3),
    ([(1, True)], 1),
])
def test_segment_table_visits_every_element_once_at_its_accumulator(groups, width):
    """Brute force over the multi-index: element offset, accumulator position and coverage."""
    table = fused.segment_table(groups, width)
    seen = {}
    for element, acc, length in table:
        for t in range(length):
            seen[int(element + t)] = int(acc + t)
    sizes = [s for s, _ in groups]
    kept = [k for _, k in groups]
    assert sorted(seen) == list(range(int(np.prod(sizes))))
    for flat, index in enumerate(itertools.product(*(range(s) for s in sizes))):
        bucket = 0
        for i, k, s in zip(index, kept, sizes):
            if k:
                bucket = bucket * s + i
        expected = bucket if kept[-1] else bucket * width + index[-1] % width
        assert seen[flat] == expected, (flat, index)


def test_non_finite_values_and_the_switch_fall_back():
    r, p, o = _outputs((64, 128))
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    reducer = fused.FusedReducer()
    p.view(-1)[5] = float("inf")
    assert reducer.reduce(r, p, o, layout.bucket_axes, None, None, True) is fused.NONFINITE
    s = summarize(layout, r, p, o, None)
    assert s.nonfinite_prod == 1 and s.e_prod == float("inf")
    p.view(-1)[5] = 1.0
    assert reducer.reduce(r.to(torch.int32), p, o, (), None, None, False) is fused.NOT_APPLICABLE


def test_the_environment_switch_forces_the_torch_path(monkeypatch):
    monkeypatch.setenv("KCERT_NO_FUSED", "1")
    assert not fused.available()
    r, p, o = _outputs((8, 16))
    assert fused.FusedReducer().reduce(r, p, o, (1,), None, None, True) is fused.NOT_APPLICABLE


def test_certificates_through_either_path_agree(monkeypatch):
    """End to end: the same case certified with the compiled reduction and with the torch one gives
    the same verdicts, ULP histograms and error norms, and bias means equal to round-off."""
    from sample_kernels import rmsnorm_builtin

    from kcert.catalog import norms as N

    case = N.RMSNORM.case("rms_paths", rmsnorm_builtin, shape=(2, 16, 128))
    compiled = kcert.certify(case, replicates=64, algebra_proof=False)
    monkeypatch.setenv("KCERT_NO_FUSED", "1")
    torch_path = kcert.certify(case, replicates=64, algebra_proof=False)
    assert compiled.provenance.environment["reduction"] == "compiled (numba)"
    assert torch_path.provenance.environment["reduction"] == "torch"
    assert compiled.verdict == torch_path.verdict
    for a, b in zip(compiled.bias, torch_path.bias):
        assert a.verdict == b.verdict
        for row, (count, mean, std) in a.moments.items():
            other = b.moments[row]
            np.testing.assert_array_equal(count, other[0])
            np.testing.assert_allclose(mean, other[1], rtol=1e-9, atol=1e-12 * np.abs(other[1]).max())
    for a, b in zip(compiled.variance, torch_path.variance):
        np.testing.assert_array_equal(a.amplification, b.amplification)  # maxima are exact on both paths
    for a, b in zip(compiled.bitwise, torch_path.bitwise):
        np.testing.assert_array_equal(a.ulp_histogram, b.ulp_histogram)


def test_label_runs_map_every_element_to_its_label():
    """Segments split where the labels stop counting up; excluded runs go to the trash at g."""
    labels = np.array([4, 5, 6, 0, 1, -1, -1, 2, 3, 7, 7, 8], np.int64)
    segments = fused.segment_table([(3, False), (12, True)], 5)  # three passes over 12 positions
    runs = fused.label_runs(segments, labels, 9)
    assert runs[:, 2].sum() == 36
    for element, acc, length in runs:
        position = element % 12
        for t in range(length):
            expected = labels[position + t]
            assert (acc + t == expected) if expected >= 0 else (acc == 9 and labels[position:position + length] < 0).all()
    # the RoPE-like layout of the suite takes this path (its labels count up along head_dim)
    reducer = fused.FusedReducer()
    shape, spec = LAYOUTS[5]  # labels counting up along head_dim
    r, p, o = _outputs(shape)
    reducer.reduce(r, p, o, (), _labels(spec, r), spec.count, True)
    assert [entry[1] is not None for entry in reducer._runs.values()] == [True]


def test_short_innermost_runs_go_to_the_torch_path():
    r, p, o = _outputs((20000, 2))
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    assert fused.FusedReducer().reduce(r, p, o, layout.bucket_axes, None, None, True) is fused.NOT_APPLICABLE
    s, masked = summarize(layout, r, p, o, None), summarize(layout, r, p, o, None, path="masked")
    np.testing.assert_allclose(s.sums, masked.sums, rtol=1e-12, atol=1e-15)
