"""End-to-end certification through the Python API."""

import dataclasses

import numpy as np
import torch

import kcert
from kcert import demo
from kcert.execution.runner import Runner
from kcert.gates.bias import rejudge
from kcert.stats.bias import REPORT_RULES

from sample_kernels import rmsnorm_ref, stable_report


def test_demo_pair_verdicts_and_the_reports_point():
    good = kcert.certify(demo.correct, replicates=512)
    bad = kcert.certify(demo.bf16_gain, replicates=512)
    assert good.verdict is kcert.Verdict.PASS
    assert bad.verdict is kcert.Verdict.FAIL
    assert bad.gates["bias"] is kcert.Verdict.FAIL
    # magnitude checks cannot see it: the algebra gate passes and the variance gate does not FAIL
    # (r_T ~ 1.65, just under the WARN line: its profile bound at R <= 2048 may reach above 2)
    assert bad.gates["variance"] is not kcert.Verdict.FAIL
    assert bad.variance[0].interval.estimate < 2
    assert bad.gates["algebra"] is kcert.Verdict.PASS
    worst = bad.bias[0].findings(limit=1)[0]
    assert worst.statistic == "sign_aligned" and worst.effect_ulp > 0.5
    # attribution: the bias is prod's, not ref's
    assert abs(worst.prod_bias_ulp) > 0.5 > abs(worst.ref_bias_ulp)
    # under the report's rules (raw mean, c = 1 ULP) the same evidence only WARNs
    assert rejudge(bad.bias[0], REPORT_RULES).verdict is kcert.Verdict.WARN
    assert rejudge(bad.bias[0], kcert.BiasThresholds()).verdict is kcert.Verdict.FAIL


def test_same_seed_same_certificate_and_other_seed_differs(small_case):
    a = kcert.certify(small_case, replicates=64, seed=3)
    b = kcert.certify(small_case, replicates=64, seed=3)
    c = kcert.certify(small_case, replicates=64, seed=4)
    assert stable_report(a) == stable_report(b)
    assert stable_report(a)["gates"]["bias"] != stable_report(c)["gates"]["bias"]
    assert a.provenance.seed == 3 and a.provenance.environment["versions"]["torch"]


def test_replicates_depend_only_on_seed_and_index(small_case):
    """Order of evaluation and sharding do not change the accumulated statistics."""
    forward = Runner(small_case, seed=5)
    forward.run(0, 40)
    shard_a, shard_b = Runner(small_case, seed=5), Runner(small_case, seed=5)
    shard_b.run(25, 40)
    shard_a.run(0, 25)
    shard_a.accumulators[0].merge(shard_b.accumulators[0])
    f, m = forward.accumulators[0], shard_a.accumulators[0]
    for row in f.moments:
        np.testing.assert_allclose(m.moments[row].mean, f.moments[row].mean, rtol=1e-12, atol=1e-300)
        np.testing.assert_allclose(m.moments[row].m2, f.moments[row].m2, rtol=1e-9, atol=1e-300)
    for x, y in zip(f.errors(), m.errors()):
        np.testing.assert_array_equal(x, y)


def test_weights_drawn_once_and_probe_rounded_once():
    seen = []

    def ref(x, w):
        seen.append((x.dtype, w.clone()))
        return x * w

    case = kcert.Case(name="mul", ref=ref, prod=lambda x, w: x * w, inputs={"x": kcert.Gaussian((8,))},
                      weights={"w": kcert.Gaussian((8,))})
    kcert.certify(case, replicates=4, max_replicates=4, algebra_points=1)
    working = [s for s in seen if s[0] == torch.bfloat16]
    # 4 replicates, then the peer-rule table's own 5 draws (docs/kernelbench.md): one weight draw for all.
    assert len(working) == 4 + 5 and all(torch.equal(working[0][1], s[1]) for s in working)


def test_tuple_outputs_with_their_own_dtypes_worst_verdict_wins():
    """A float32 loss from bf16 logits: in a float32 training ULPs follow the float32 output; in the
    default bf16 training the harm unit is a bf16 ULP, which a loss reduced in bf16 stays under."""

    def ref(logits):
        return logits, torch.logsumexp(logits.float(), -1).mean()

    def prod(logits):
        # the loss reduced in bf16 loses ~8 bits: many float32 ULPs of coherent error
        return logits, torch.logsumexp(logits, -1).float().mean()

    case = kcert.Case(name="loss", ref=ref, prod=prod, inputs={"logits": kcert.Gaussian((16, 32), shift=0.1)},
                      buckets=(kcert.Axes(-1), kcert.Axes()), output_names=("logits", "loss"),
                      training_dtype=torch.float32)
    cert = kcert.certify(case, replicates=128)
    by_name = {b.output: b for b in cert.bias}
    assert by_name["logits"].verdict is kcert.Verdict.PASS
    assert by_name["loss"].dtype == "float32" and by_name["loss"].harm_format == "float32"
    assert cert.verdict is not kcert.Verdict.PASS
    assert cert.gate_verdict("bias") is kcert.Verdict.worst(b.verdict for b in cert.bias)
    assert [o.dtype for o in cert.outputs] == ["bfloat16", "float32"]
    bf16 = kcert.certify(dataclasses.replace(case, training_dtype=None), replicates=128)
    loss = {b.output: b for b in bf16.bias}["loss"]
    assert loss.harm_format == "bfloat16" and {v.output: v for v in bf16.variance}["loss"].harm_format == "bfloat16"
    assert bf16.gates["bias"] is kcert.Verdict.PASS


def test_nonfinite_prod_is_a_fail_with_its_count():
    def prod(x):
        y = x.float().exp().to(x.dtype)
        y[0, 0] = float("nan")
        return y

    case = kcert.Case(name="nan", ref=lambda x: x.float().exp().to(x.dtype), prod=prod,
                      inputs={"x": kcert.Gaussian((2, 8))})
    cert = kcert.certify(case, replicates=16)
    assert cert.verdict is kcert.Verdict.FAIL
    assert cert.bias[0].nonfinite_prod == 16
    assert cert.variance[0].n_infinite == 16
    assert any(d.code == "nonfinite_prod" for d in cert.bias[0].diagnostics)


def test_algebraic_difference_fails_the_algebra_gate():
    """eps added to the RMS instead of the mean square (gpt-neox #1342): invisible in bf16."""

    def prod(x, w):
        x32 = x.float()
        return (x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + 1e-6) * w.float()).to(x.dtype)

    case = kcert.Case(name="eps", ref=rmsnorm_ref, prod=prod, inputs={"x": kcert.Gaussian((4, 64), shift=0.1)},
                      weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.1)})
    cert = kcert.certify(case, replicates=32)
    assert cert.algebra.verdict is kcert.Verdict.FAIL
    assert cert.algebra.outputs[0].discrepancy_float64 > 1e-9
    assert cert.algebra.outputs[0].shrink < 2**19
    assert cert.verdict is kcert.Verdict.FAIL


def test_rounding_only_difference_passes_the_algebra_gate(small_case):
    cert = kcert.certify(small_case, replicates=16)
    a = cert.algebra.outputs[0]
    assert cert.algebra.verdict is kcert.Verdict.PASS and a.shrink > 2**19


def test_prod_outside_real_mode_skips_algebra_with_reason():
    def prod(x):
        # an opaque kernel for bf16 only (the precision ladder has one precision to run): bf16 truncation
        # through an integer view, which real mode cannot follow
        if x.dtype is not torch.bfloat16:
            raise TypeError(f"bf16 only, got {x.dtype}")
        bits = (x.float() * 1.1).view(torch.int32) & -65536
        return bits.view(torch.float32).to(x.dtype)

    case = kcert.Case(name="bits", ref=lambda x: (x.float() * 1.1).to(x.dtype), prod=prod,
                      inputs={"x": kcert.Gaussian((4, 8))})
    cert = kcert.certify(case, replicates=16)
    assert cert.algebra.verdict is kcert.Verdict.SKIPPED
    reason = cert.algebra.reason
    # what was tried (one rung: the same-precision comparison; the refusals with prod's own words), the
    # bound it reached, then what the user can do
    assert "same-precision comparison at bfloat16" in reason and "bf16 only" in reason
    assert "16 bfloat16 harm ULPs" in reason and "above the 0.25 harm ULP" in reason
    assert reason.index("What you can do") > reason.index("bf16 only")
    assert cert.verdict is not kcert.Verdict.PASS
    # with a real definition of what prod computes, the gate runs
    withmath = dataclasses.replace(case, prod_math=lambda x: x * 1.1)
    assert kcert.certify(withmath, replicates=16).algebra.verdict is kcert.Verdict.PASS


def test_ref_outside_real_mode_without_oracle_skips_variance():
    def ref(x):
        return (x.float().view(torch.int32) + 0).view(torch.float32).to(x.dtype)

    case = kcert.Case(name="opaque_ref", ref=ref, prod=lambda x: x.float().to(x.dtype),
                      inputs={"x": kcert.Gaussian((4, 8))})
    cert = kcert.certify(case, replicates=16)
    assert cert.gates["variance"] is kcert.Verdict.SKIPPED
    assert "no float64 oracle" in cert.variance_skipped_reason
    assert cert.verdict is kcert.Verdict.WARN
    given = dataclasses.replace(case, oracle=lambda x: x)
    assert kcert.certify(given, replicates=16).gates["variance"] is not kcert.Verdict.SKIPPED


def test_labels_buckets_follow_the_data():
    def experts(inputs, weights, out):
        return inputs["x"].float().argmax(-1, keepdim=True)  # one bucket per row's argmax

    case = kcert.Case(name="labels", ref=lambda x: x * 2, prod=lambda x: x + x,
                      inputs={"x": kcert.Gaussian((16, 4))}, buckets=kcert.Labels(experts, name="expert"))
    cert = kcert.certify(case, replicates=100)  # >= the gates' minimums for a PASS (kcert.gates.minimum)
    assert cert.bias[0].buckets == 4 and cert.bias[0].bucket_labels[2] == "expert 2"
    assert cert.verdict is kcert.Verdict.PASS


def test_wide_draws_find_a_branch_the_probe_never_reaches():
    """prod differs only for |x| > 10: never under N(0, 1) draws, found by the 4x wider draws."""
    case = kcert.Case(name="branch", ref=lambda x: x * 2, prod=lambda x: x * 2 + (x.abs() > 10).to(x.dtype),
                      inputs={"x": kcert.Gaussian((16, 4))})
    cert = kcert.certify(case, replicates=48)  # >= the bias gate's minimum for a PASS (47)
    assert cert.gates["bias"] is kcert.Verdict.PASS
    assert cert.algebra.verdict is kcert.Verdict.FAIL


def test_a_fail_elsewhere_stops_the_variance_looks():
    """Extra looks serve only the variance interval: once the bias gate FAILs, more replicates cannot
    change the combined verdict, so the run stops at the first look and says why."""
    cert = kcert.certify(demo.bf16_gain, replicates=256, seed=0, algebra_proof=False)
    assert cert.gates["bias"] is kcert.Verdict.FAIL and cert.verdict is kcert.Verdict.FAIL
    assert cert.provenance.replicates == 256 and cert.provenance.max_replicates == 1024
    assert any("the bias gate FAILs" in n for n in cert.notes)
    assert not kcert.gates.variance.interval_is_decisive(cert.variance[0])  # it would have asked for more
