"""What other rules would have said (kcert.checks.peers): each rule on tensors whose verdict is known by
construction, and the table every certificate carries."""

import pytest
import torch

import kcert
from kcert.checks import peers
from kcert.report.checks import peer_reason
from kcert.verdict import Verdict


def _pair(rel: float, n: int = 4096, dtype=torch.float32):
    """ref, prod = ref * (1 + rel), oracle: ref's exact float64 values (ref is then error-free)."""
    g = torch.Generator().manual_seed(0)
    oracle = torch.randn(n, generator=g, dtype=torch.float64)
    ref = oracle.to(dtype)
    prod = (oracle * (1 + rel)).to(dtype)
    return ref, prod, oracle


def test_kernelbench_tolerance_admits_a_coherent_relative_error_assert_close_does_not():
    ref, prod, _ = _pair(2e-5)
    assert peers.kernelbench_rule(ref, prod)[0]  # 2e-5 |ref| < 1e-4 + 1e-4 |prod|
    ok, detail = peers.assert_close_rule(ref, prod)
    assert not ok and "Mismatched elements" in detail  # float32's rtol is 1.3e-6
    assert not peers.kernelbench_rule(*_pair(1e-3)[:2])[0]
    assert peers.tolerance(torch.bfloat16) == 1e-2 and peers.tolerance(torch.float32) == 1e-4


def test_kernelbench_rule_checks_shape_first():
    ok, detail = peers.kernelbench_rule(torch.zeros(3, 4), torch.zeros(4, 3))
    assert not ok and "shape" in detail


def test_flashattention_rule_compares_errors_against_the_oracle():
    ref, prod, oracle = _pair(0.0)
    assert peers.flashattention_rule(ref, prod, oracle)[0]  # equal errors
    ref, prod, oracle = _pair(1e-6)
    ok, detail = peers.flashattention_rule(ref, prod, oracle)
    assert not ok and "2 x max|ref - fp64|" in detail  # 1e-6 relative, far above twice ref's half-ULP


def test_dynamo_same_falls_back_to_rmse_against_fp64():
    ref, prod, oracle = _pair(2e-4)  # beyond allclose at tol 1e-4, RMSE ~ 2e-4 >> 2 x ref's
    assert not peers.dynamo_same_rule(ref, prod, oracle)[0]
    ref, prod, oracle = _pair(1e-6)  # within allclose at 1e-4
    assert peers.dynamo_same_rule(ref, prod, oracle)[0]


def scaled(x):
    return x * (1 + 2e-5)


def ident(x):
    return x * 1.0


def test_every_certificate_carries_the_table_on_its_first_five_draws():
    case = kcert.Case(name="scaled", ref=ident, prod=scaled, inputs={"x": kcert.Gaussian((8, 64))},
                      dtype=torch.float32, training_dtype=torch.float32)
    cert = kcert.certify(case, replicates=64, max_replicates=64, algebra_proof=False)
    table = {r.rule: r for r in cert.peer_rules.rules}
    assert cert.peer_rules.trials == (0, 1, 2, 3, 4)
    assert table["kernelbench"].verdict == "PASS" and table["assert_close"].verdict == "FAIL"
    assert cert.verdict is Verdict.FAIL  # a different real function: the algebra gate
    reason = peer_reason(cert, table["kernelbench"])
    assert reason.startswith("the rule passes what kcert FAILs") and "different real function" in reason
    assert peer_reason(cert, table["assert_close"]) == "agree: both reject"
    assert kcert.certify(case, replicates=64, max_replicates=64, algebra_proof=False,
                         peer_rules=False).peer_rules is None


def test_rules_reuse_the_runs_draws():
    """The rules see replicate r's inputs exactly: a prod that records them gets draws 0..4 again."""
    from kcert.execution import probes

    seen = []

    def recording(x):
        seen.append(x.clone())
        return x * 1.0

    case = kcert.Case(name="rec", ref=ident, prod=recording, inputs={"x": kcert.Gaussian((2, 8))},
                      dtype=torch.float32)
    peers.run_peer_rules(case, probes.draw_weights(case, 3, "cpu"), 3, torch.device("cpu"))
    assert len(seen) == 5
    for r, x in enumerate(seen):
        assert torch.equal(x, probes.draw_inputs(case, 3, r, "cpu").working["x"])


@pytest.mark.parametrize("rule", ["assert_close", "kernelbench", "flashattention", "dynamo_same"])
def test_rule_titles(rule):
    assert peers.TITLES[rule]
