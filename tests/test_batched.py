"""Batched replicates (Case.independent_leading_axis) give the certificate of an unbatched run, and
the chunked fast reduction of an output equals the masked general path to float64 round-off."""

import dataclasses

import numpy as np
import pytest
import torch
from sample_kernels import REDUCTION_LAYOUTS, rmsnorm_builtin, stable_report

import kcert
from kcert.catalog import norms as N
from kcert.errors import CaseError, KernelError, ParameterError
from kcert.execution.outputs import (
    bucket_labels,
    make_layout,
    summarize,
)
from kcert.execution.runner import DEFAULT_BATCH_MEMORY, Runner


def rms_case(**changes) -> kcert.Case:
    """Rows of an RMSNorm are independent: a leading axis of replicates changes nothing."""
    case = N.RMSNORM.case("rms_batched", rmsnorm_builtin, shape=(2, 16, 128))
    return dataclasses.replace(case, **changes)


@pytest.fixture(scope="module")
def unbatched():
    torch.set_num_threads(1)
    return kcert.certify(rms_case(), replicates=100, max_replicates=100, seed=7, algebra_points=2)


@pytest.mark.parametrize("batch_memory", [None, 600_000])
def test_batched_certificate_equals_unbatched(unbatched, batch_memory):
    calls = []

    def counting(x, w):
        calls.append(x.shape[0])
        return rmsnorm_builtin(x, w)

    case = rms_case(prod=counting, independent_leading_axis=True)
    batched = kcert.certify(case, replicates=100, max_replicates=100, seed=7, algebra_points=2,
                            batch_memory=batch_memory)
    assert stable_report(batched) == stable_report(unbatched)
    for row, evidence in unbatched.bias[0].moments.items():  # the evidence itself, bit for bit
        for a, b in zip(batched.bias[0].moments[row], evidence):
            np.testing.assert_array_equal(a, b)
    # replicate 0 alone (it sizes the batches), then batches that never cross a block of 64
    sizes = [n for n in calls if n != 2]  # leading axis 2 = an unbatched call (algebra gate, replicate 0)
    one = 2 * 16 * 128 * ((2 + 8) + (2 + 2 + 8))  # bf16 and float64 probes; bf16 ref, prod; float64 oracle
    expected = min(64, (batch_memory or DEFAULT_BATCH_MEMORY['cpu']) // one)
    assert max(sizes) == min(expected, 63) and all(n <= expected for n in sizes)  # block 0 has 63 after replicate 0
    assert sum(sizes) == 99


def test_labels_get_each_replicates_own_inputs():
    """Data-dependent buckets: the label function sees one replicate's probes and output."""
    seen = []

    def label(inputs, weights, ref_out):
        seen.append(tuple(inputs["x"].shape))
        return (inputs["x"][..., :1] > 0).long() * 2 + torch.arange(128) % 2

    spec = kcert.Labels(label, count=4, name="sign of x[..., 0] x parity")
    plain = Runner(rms_case(buckets=spec), seed=1)
    plain.run(0, 70)
    batched = Runner(rms_case(buckets=spec, independent_leading_axis=True), seed=1, batch_memory=2_000_000)
    batched.run(0, 70)
    assert batched.batch_size > 1
    assert set(seen) == {(2, 16, 128)}
    for a, b in zip(plain.accumulators, batched.accumulators):
        for row in a.moments:
            np.testing.assert_array_equal(a.moments[row].mean, b.moments[row].mean)
            np.testing.assert_array_equal(a.moments[row].m2, b.moments[row].m2)
        for x, y in zip(a.errors(), b.errors()):
            np.testing.assert_array_equal(x, y)


def test_shards_and_resume_work_with_batches(tmp_path, unbatched):
    # bare ranges that start and stop inside blocks, merged
    case = rms_case(independent_leading_axis=True)
    forward = Runner(rms_case(), seed=7)
    forward.run(0, 100)
    shard_a, shard_b = Runner(case, seed=7, batch_memory=600_000), Runner(case, seed=7, batch_memory=600_000)
    shard_b.run(30, 100)
    shard_a.run(0, 30)
    shard_a.accumulators[0].merge(shard_b.accumulators[0])
    for row, acc in forward.accumulators[0].moments.items():  # other block boundaries: equal to round-off
        scale = np.abs(acc.mean).max()
        np.testing.assert_allclose(shard_a.accumulators[0].moments[row].mean, acc.mean, rtol=0, atol=1e-12 * scale)
    # a checkpointed run interrupted inside a batch resumes to the unbatched certificate
    path = tmp_path / "run.npz"

    def stop_at_37(done, planned):
        if done == 37:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kcert.certify(case, replicates=100, max_replicates=100, seed=7, algebra_points=2, checkpoint=path,
                      batch_memory=600_000, progress=stop_at_37)
    resumed = kcert.certify(case, replicates=100, max_replicates=100, seed=7, algebra_points=2, checkpoint=path,
                            resume=True, batch_memory=600_000)
    assert stable_report(resumed) == stable_report(unbatched)


def test_a_kernel_that_mixes_replicates_is_refused():
    def first_only(x, w):
        return rmsnorm_builtin(x if x.dim() == 3 else x[0], w)  # right alone, drops a leading axis of replicates

    runner = Runner(rms_case(prod=first_only, independent_leading_axis=True), seed=0)
    runner.run(0, 1)  # replicate 0 runs alone
    with pytest.raises(KernelError, match=r"replicates 1-\d+ evaluated as one batch.*output 0 of prod has shape "
                                          r"\(2, 16, 128\).*leading axis of \d+"):
        runner.run(1, 10)


def test_bad_batch_settings_name_the_parameter():
    with pytest.raises(CaseError, match="independent_leading_axis must be True or False, got 'yes'"):
        rms_case(independent_leading_axis="yes")
    for bad in (0, -5, 1.5, True):
        with pytest.raises(ParameterError, match="batch_memory must be an integer number of bytes >= 1"):
            Runner(rms_case(), seed=0, batch_memory=bad)
    with pytest.raises(ParameterError, match="batch_memory"):
        kcert.certify(rms_case(), replicates=2, batch_memory=-1)


# --- the fast reduction of one output ---------------------------------------------------------

def _outputs(shape, nonfinite=False):
    g = torch.Generator().manual_seed(3)
    r = torch.randn(shape, generator=g).to(torch.bfloat16)
    p = (r.float() * (1 + 1e-2 * torch.randn(shape, generator=g))).to(torch.bfloat16)
    o = r.double() + 1e-3 * torch.randn(shape, generator=g, dtype=torch.float64)
    if nonfinite:
        p.view(-1)[5] = float("inf")
        o.view(-1)[7] = float("nan")
    return r, p, o


@pytest.mark.parametrize("oracle", [True, False])
@pytest.mark.parametrize("shape, spec", REDUCTION_LAYOUTS)
def test_fast_reduction_equals_the_masked_path(shape, spec, oracle):
    r, p, o = _outputs(shape)
    o = o if oracle else None
    layout = make_layout(0, "out", r, p, spec, "test")
    labels = bucket_labels(spec, {}, {}, r, "test") if isinstance(spec, kcert.Labels) else None
    # the torch chunks themselves: summarize takes the compiled path when numba is installed
    # (tests/test_fused.py compares that one with both of these, on these layouts and more)
    fast, masked = summarize(layout, r, p, o, labels, path="chunked"), summarize(layout, r, p, o, labels, path="masked")
    assert fast.sums.shape == masked.sums.shape
    scale = np.abs(masked.sums).max(axis=1, keepdims=True)  # per row: the rows differ by orders of magnitude
    assert (np.abs(fast.sums - masked.sums) <= 1e-12 * scale).all()
    assert np.abs(fast.sums).max() > 0
    np.testing.assert_array_equal(fast.present, masked.present)
    np.testing.assert_array_equal(fast.oracle_present, masked.oracle_present)
    # the extremes are exact: max |x| from the min and the max of x
    np.testing.assert_array_equal([fast.e_prod, fast.e_ref, fast.peak], [masked.e_prod, masked.e_ref, masked.peak])


def test_nonfinite_values_fall_back_to_the_masked_path():
    r, p, o = _outputs((64, 128), nonfinite=True)
    layout = make_layout(0, "out", r, p, kcert.Axes(-1), "test")
    s = summarize(layout, r, p, o, None)
    assert s.nonfinite_prod == 1 and s.e_prod == float("inf")
    assert np.isfinite(s.sums).all() and s.peak == float(o[torch.isfinite(o)].abs().max())
