"""The adequacy check (kcert.checks.adequacy, .fakes): can the certification tell a fake?"""

import dataclasses

import pytest
import torch

import kcert
from kcert.checks.adequacy import merge_rejections
from kcert.verdict import Verdict


def softmax(x):
    return torch.softmax(x, -1)


def manual_softmax(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def relu(x):
    return torch.relu(x)


def _case(name, ref, prod, probe, **kw):
    return kcert.Case(name=name, ref=ref, prod=prod, inputs={"x": probe}, dtype=torch.float32,
                      training_dtype=torch.float32, **kw)


def _fakes(cert):
    return {f.name: f for f in cert.adequacy.fakes}


def test_every_fake_is_rejected_on_a_good_probe():
    case = _case("softmax", softmax, manual_softmax, kcert.Gaussian((4, 64), shift=0.1))
    cert = kcert.certify(case, replicates=128, adequacy=True, peer_rules=False, algebra_proof=False)
    fakes = _fakes(cert)
    assert set(fakes) == {"zeros", "constant", "passthrough", "stale", "float16", "bfloat16", "fresh x"}
    assert all(f.status == "rejected" for f in fakes.values()), {n: f.reason for n, f in fakes.items()}
    # rounding is invisible to real mode: the short bias/variance run rejects it (the documented power)
    assert dict(fakes["float16"].gates)["algebra"] == "PASS" and fakes["float16"].verdict == "FAIL"
    # adequacy holds nothing back (the gates decide; the variance gate may WARN at R = 128 until the
    # separate-shapes bound is under 2, docs/method.md, Gate 3)
    assert not cert.adequacy.blocks_pass and not cert.adequacy.diagnostics()
    assert cert.gates["algebra"] is Verdict.PASS and cert.gates["bias"] is Verdict.PASS
    assert cert.verdict is dict(cert.gates)["variance"]


def test_identity_on_a_nonnegative_probe_is_not_rejected_and_holds_the_pass():
    """KernelBench's ReLU: on inputs in [0, 1) the identity is ReLU. The certification cannot tell them
    apart: the fake is not rejected and the certificate cannot PASS; a companion probe that rejects it
    (kcert kernelbench's signed probe) lifts that."""
    rand = kcert.Custom(lambda g, d: torch.rand(4, 64, generator=g, device=d), "torch.rand", (4, 64))
    case = _case("relu", relu, relu, rand)  # a Custom probe widens by scaling: still nonnegative
    cert = kcert.certify(case, replicates=128, adequacy=True, peer_rules=False, algebra_proof=False)
    passthrough = _fakes(cert)["passthrough"]
    assert passthrough.status == "not rejected" and passthrough.identical and not passthrough.degenerate
    assert cert.gates == {g: Verdict.PASS for g in ("algebra", "bias", "variance")}
    assert cert.verdict is Verdict.WARN
    assert [d.code for d in cert.adequacy.diagnostics()] == ["fakes_not_rejected"]

    signed = kcert.certify(dataclasses.replace(case, name="relu signed", inputs={"x": kcert.Gaussian((4, 64))}),
                           replicates=128, adequacy=True, peer_rules=False, algebra_proof=False)
    assert _fakes(signed)["passthrough"].status == "rejected"
    merged, _ = merge_rejections([cert, signed])
    assert _fakes(merged)["passthrough"].rejected_by == ("relu signed",)
    assert merged.verdict is Verdict.PASS


def test_a_degenerate_reference_is_reported_as_such():
    """A reference that outputs zeros whatever its input (KernelBench PR #108's level-2 problems)."""

    def degenerate(x):
        h = x.amax(-1, keepdim=True)
        return h - h.mean(-1, keepdim=True)

    case = _case("degenerate", degenerate, degenerate, kcert.Gaussian((4, 64)))
    cert = kcert.certify(case, replicates=128, adequacy=True, peer_rules=False, algebra_proof=False)
    fakes = _fakes(cert)
    assert fakes["zeros"].identical and fakes["zeros"].degenerate.startswith("ref is constant")
    assert fakes["fresh x"].degenerate.startswith("ref does not depend on input 'x'")
    assert {d.code for d in cert.adequacy.diagnostics()} == {"degenerate_problem"}
    assert cert.verdict is Verdict.WARN


def test_roundings_finer_than_the_harm_unit_do_not_apply():
    """A float32 case judged in bf16 ULPs (the default training dtype): rounding to float16 or bf16 is
    harmless by the case's own scale, so those fakes do not apply."""
    case = kcert.Case(name="bf16 harm", ref=softmax, prod=manual_softmax, inputs={"x": kcert.Gaussian((4, 64))},
                      dtype=torch.float32)
    cert = kcert.certify(case, replicates=64, max_replicates=64, adequacy=True, peer_rules=False,
                         algebra_proof=False)
    fakes = _fakes(cert)
    assert fakes["float16"].status == fakes["bfloat16"].status == "not applicable"
    assert "not coarser than the harm unit (bfloat16 ULP)" in fakes["float16"].reason


def test_adequacy_is_deterministic_and_in_the_reports():
    from kcert.report.jsonio import to_dict

    case = _case("softmax", softmax, manual_softmax, kcert.Gaussian((2, 16)))
    runs = [kcert.certify(case, replicates=64, max_replicates=64, adequacy=True, peer_rules=False,
                          algebra_proof=False) for _ in range(2)]
    a, b = (to_dict(c)["adequacy"] for c in runs)
    assert a == b and a["fakes"][0]["name"] == "zeros"
    assert to_dict(kcert.certify(case, replicates=64, max_replicates=64, peer_rules=False))["adequacy"] is None


def test_parameters_are_checked():
    case = _case("softmax", softmax, manual_softmax, kcert.Gaussian((2, 16)))
    with pytest.raises(kcert.ParameterError, match="adequacy must be True or False"):
        kcert.certify(case, replicates=64, adequacy="yes")
