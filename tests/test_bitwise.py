"""L0, the bitwise layer: exact ULP-distance counts, the growth test of |z| with R, and that it is
informational (never a verdict), survives checkpoints and sharding bit for bit."""

import dataclasses
import json

import numpy as np
import pytest
import torch
from sample_kernels import rms_bf16_case, rmsnorm_ref, run_ranks

import kcert
from kcert.catalog import norms as N
from kcert.certificate import BitwiseResult
from kcert.execution import bitwise as torch_bitwise
from kcert.execution.outputs import make_layout, summarize
from kcert.report.jsonio import to_dict
from kcert.stats import bitwise as S
from kcert.stats.moments import MomentAccumulator
from kcert.verdict import Verdict

_INT = {2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits(t: torch.Tensor) -> np.ndarray:
    return t.view(_INT[t.element_size()]).numpy()


# --- the distance and its bins -----------------------------------------------------------------

def test_bins_follow_the_documented_edges():
    d = np.array([0, 1, 2, 3, 4, 5, 8, 9, 16, 17, 2**15, 2**15 + 1, 2**16, 2**16 + 1, 2**40], np.uint64)
    assert S.ulp_bins(d).tolist() == [0, 1, 2, 3, 3, 4, 4, 5, 5, 6, 16, 17, 17, 18, 18]
    assert [S.BIN_LABELS[k] for k in (0, 1, 2, 3, 4, 17, 18, 19)] == [
        "0", "1", "2", "3-4", "5-8", "32769-65536", "> 65536", "non-finite"]


def test_distance_counts_steps_of_total_order():
    values = torch.tensor([-0.0, 0.0, 1.0, 1.0, -1.0, float(torch.finfo(torch.bfloat16).tiny)], dtype=torch.bfloat16)
    other = torch.tensor([0.0, 0.0, 1.0078125, 0.99609375, 1.0, -float(torch.finfo(torch.bfloat16).tiny)],
                         dtype=torch.bfloat16)
    d = S.ulp_distance(bits(values), bits(other))
    # -0/+0 adjacent; one step up and down from 1; -1 to +1 crosses 2 x 0x3F80 + 1 patterns; +-tiny
    assert d.tolist() == [1, 0, 1, 1, 2 * 0x3F80 + 1, 2 * 0x0080 + 1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
def test_torch_histograms_equal_the_numpy_reference(dtype):
    g = torch.Generator().manual_seed(1)
    r = (3 * torch.randn(4000, generator=g, dtype=torch.float64)).to(dtype)
    spread = torch.logspace(-12, 0, 4000, dtype=torch.float64)
    p = (r.double() * (1 + spread * torch.randn(4000, generator=g, dtype=torch.float64))).to(dtype)
    p[:25] = -p[:25]  # sign flips: opposite-signed keys
    fast = torch_bitwise.histogram_finite(r, p, torch_bitwise.scratch_for(r)).numpy()
    np.testing.assert_array_equal(fast, S.ulp_histogram(bits(r), bits(p)))
    assert fast.sum() == 4000 and fast[1:].sum() > 0
    r[3], p[3] = float("nan"), float("nan")  # same bits: equal
    p[4], r[5] = float("inf"), float("-inf")  # differ and non-finite
    nonfinite = (~(torch.isfinite(r) & torch.isfinite(p))).numpy()
    full = torch_bitwise.histogram(r, p).numpy()
    np.testing.assert_array_equal(full, S.ulp_histogram(bits(r), bits(p), nonfinite))
    assert full[S.NONFINITE_BIN] == 2


def test_fast_and_masked_reductions_count_the_same():
    g = torch.Generator().manual_seed(3)
    r = torch.randn((8, 300, 520), generator=g).to(torch.bfloat16)
    p = (r.float() * (1 + 1e-2 * torch.randn(r.shape, generator=g))).to(torch.bfloat16)
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    fast, masked = summarize(layout, r, p, r.double(), None), summarize(layout, r, p, r.double(), None, path="masked")
    np.testing.assert_array_equal(fast.ulp_histogram, masked.ulp_histogram)
    assert fast.ulp_histogram.sum() == r.numel() and fast.ulp_histogram[2:].sum() > 0


# --- through certify ------------------------------------------------------------------------

def _rms(prod, shape=(4, 64)):
    return dataclasses.replace(rms_bf16_case(prod), inputs={"x": kcert.Gaussian(shape, shift=0.1)})


def test_identical_kernels_are_bitwise_identical():
    cert = kcert.certify(_rms(rmsnorm_ref), replicates=64, algebra_points=1, algebra_proof=False)
    b = cert.bitwise[0]
    assert b.fraction_equal == 1.0 and b.elements == 64 * 4 * 64
    assert b.ulp_histogram[0] == b.elements and b.ulp_histogram[1:].sum() == 0
    assert b.classification == S.IDENTICAL and b.growth is None and "R >= 256" in b.reason


def _bumped(steps: dict[int, int]):
    """ref with the bit patterns of whole columns moved by a known number of steps."""

    def prod(x, w):
        y = rmsnorm_ref(x, w).clone()
        keys = y.view(torch.int16)
        for column, k in steps.items():
            keys[..., column] += k  # within a binade and away from inf: exactly k ULPs, either sign
        return y

    return prod


def test_known_ulp_differences_are_counted_exactly():
    cert = kcert.certify(_rms(_bumped({3: 1, 10: 1, 20: 2, 40: 5})), replicates=64, max_replicates=64,
                         algebra_points=1, algebra_proof=False)
    h = cert.bitwise[0].ulp_histogram
    rows = 64 * 4  # replicates x rows per output
    assert h[1] == 2 * rows and h[2] == rows and h[4] == rows  # 1 ULP (two columns), 2 ULP, 5-8 ULP
    assert h[0] == rows * (64 - 4) and h.sum() == rows * 64
    assert cert.bitwise[0].max_distance == "5-8"


@pytest.fixture(scope="module")
def te1132():
    torch.set_num_threads(1)
    case = N.RMSNORM.case("te1132_small", N.rms_norm_hf, gains_kind="llama_narrow", shape=(2, 16, 256))
    return kcert.certify(case, replicates=256, max_replicates=256, algebra_points=1, algebra_proof=False)


def test_te1132_double_rounding_grows_like_a_coherent_bias(te1132):
    """HF double rounding vs TE single rounding: sub-ULP differences (every pair within 1 ULP), yet a
    coherent bias on the gain-0.99609375 channels whose |z| doubles from R/4 to R."""
    b = te1132.bitwise[0]
    assert 0.5 < b.fraction_equal < 0.95
    assert b.ulp_histogram[1] > 0 and b.ulp_histogram[2:].sum() == 0
    g = b.growth
    assert g.early_replicates == 64 and g.expected == 2.0 and g.significant >= 10
    assert 1.7 < b.median_growth < 2.3 and b.classification == S.COHERENT


def test_l0_never_changes_the_verdict(te1132):
    assert te1132.verdict == Verdict.FAIL  # the bias gate's, as before L0 existed
    assert set(te1132.gates) == {"algebra", "bias", "variance"}
    assert dataclasses.replace(te1132, bitwise=()).verdict == te1132.verdict
    # an L0 that cries "coherent bias" on a passing certificate leaves it passing
    passing = kcert.certify(_rms(rmsnorm_ref), replicates=100, algebra_points=1, algebra_proof=False)
    loud = dataclasses.replace(passing, bitwise=(dataclasses.replace(te1132.bitwise[0], output="output"),))
    assert passing.verdict == loud.verdict == Verdict.PASS
    data = to_dict(te1132)
    assert "bitwise" not in data["gates"] and data["bitwise"][0]["classification"] == S.COHERENT
    json.dumps(data, allow_nan=False)


def test_a_summation_order_difference_does_not_grow():
    """float32 x @ w against the same products summed in reverse order: only the arrangement differs."""
    case = kcert.Case(name="sum_order", ref=lambda x, w: x @ w,
                      prod=lambda x, w: (x[..., :, None] * w).flip(-2).sum(-2),
                      inputs={"x": kcert.Gaussian((16, 128), shift=0.1)}, weights={"w": kcert.Gaussian((128, 16))},
                      buckets=kcert.Axes(-1), dtype=torch.float32)
    cert = kcert.certify(case, replicates=256, max_replicates=256, algebra_points=1, algebra_proof=False)
    b = cert.bitwise[0]
    assert b.fraction_equal < 0.5 and b.ulp_histogram[3:].sum() > 0  # spread over several ULPs
    assert b.classification == S.NO_GROWTH and b.growth.significant == 0


# --- the growth statistics alone ---------------------------------------------------------------

def _moments(values: np.ndarray) -> MomentAccumulator:
    m = MomentAccumulator.zeros(values.shape[1])
    m.add(values)
    return m


def test_growth_separates_a_coherent_bias_from_a_transient_one():
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((1024, 50))
    coherent = noise + 0.5  # z ~ 0.5 sqrt(n)
    transient = noise.copy()
    transient[:256] += 1.0  # an effect in the first quarter only: |z| at R stays where it was
    for values, grows in ((coherent, True), (transient, False)):
        test = S.growth_test({"raw": _moments(values[:256])}, {"raw": _moments(values)}, 256, 1024, 5.0)
        assert test.expected == 2.0 and test.significant == 50
        assert test.grows is grows
        assert (abs(test.median_growth - 2.0) < 0.2) if grows else (test.median_growth < 1.0)


def test_growth_of_noiseless_and_new_buckets():
    const = MomentAccumulator(np.array([4, 4]), np.array([1e-3, 0.0]), np.zeros(2))
    final = MomentAccumulator(np.array([16, 16, 16]), np.array([1e-3, 0.0, 0.0]), np.zeros(3))
    test = S.growth_test({"raw": const}, {"raw": final}, 4, 16, 5.0)
    assert test.significant == 1 and test.median_growth == 2.0  # a bias with no noise grows as expected
    assert test.z_early[0].shape == (3,) and np.isnan(test.z_early[0][2])
    with pytest.raises(ValueError, match="early_replicates"):
        S.growth_test({"raw": const}, {"raw": final}, 16, 16, 5.0)


def test_classify():
    h = np.zeros(S.N_BINS, np.int64)
    h[0] = 10
    assert S.classify(h, None) == S.IDENTICAL
    h[1] = 1
    assert S.classify(h, None) == S.UNDETERMINED
    assert S.classify(h, None, comparable=False) == S.NOT_COMPARED


# --- checkpoints and shards ------------------------------------------------------------------

R, SEED = 256, 5


def _l0(cert) -> list:
    return to_dict(cert)["bitwise"]


@pytest.fixture(scope="module")
def uninterrupted():
    torch.set_num_threads(1)
    cert = kcert.certify(rms_bf16_case(), R, seed=SEED, max_replicates=R, algebra_points=1, algebra_proof=False)
    assert cert.bitwise[0].growth is not None and cert.bitwise[0].ulp_histogram[1:].sum() > 0
    return cert


def test_resumed_run_has_the_same_l0(tmp_path, uninterrupted):
    path = tmp_path / "run.npz"

    def stop(done, planned):
        if done == 200:  # after the early snapshots at 64 and 128 replicates were folded
            raise KeyboardInterrupt

    kwargs = {"seed": SEED, "max_replicates": R, "algebra_points": 1, "algebra_proof": False, "checkpoint": path}
    with pytest.raises(KeyboardInterrupt):
        kcert.certify(rms_bf16_case(), R, progress=stop, **kwargs)
    with np.load(path, allow_pickle=False) as data:
        assert json.loads(str(data["meta"]))["early"] == [1, 2]
        assert "prefix.0.ulp_histogram" in data.files
    resumed = kcert.certify(rms_bf16_case(), R, resume=True, **kwargs)
    assert _l0(resumed) == _l0(uninterrupted)


def test_two_shards_give_the_one_process_l0(monkeypatch, uninterrupted):
    results = run_ranks(monkeypatch, 2, replicates=R, max_replicates=R, seed=SEED, algebra_points=1,
                        algebra_proof=False)
    for cert in results:
        assert not isinstance(cert, BaseException), cert
        assert _l0(cert) == _l0(uninterrupted)


def test_result_properties_without_elements():
    empty = BitwiseResult("out", "bfloat16", 0, np.zeros(S.N_BINS, np.int64), S.NOT_COMPARED)
    assert empty.fraction_equal is None and empty.max_distance is None and empty.significant == 0
