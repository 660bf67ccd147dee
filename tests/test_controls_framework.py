"""The framework controls (family ``framework``): HF transformers modules certified through the
adapters. Default suite: structure and the two quick controls at 256 replicates; ``-m controls``:
every framework control at its declared replicates, with its measured verdict."""

import pytest

transformers = pytest.importorskip(
    "transformers", reason="the framework controls need the hf extra: pip install 'kcert[hf]'")

import kcert
from kcert.controls import framework
from kcert.controls.registry import all_controls
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

# Measured verdicts (seed 0): recorded in the docstrings and docs/adapters.md.
MEASURED = {
    "hf_llama_rmsnorm_vs_catalogue": "PASS",
    "hf_gemma_rmsnorm_vs_catalogue": "PASS",
    "hf_rotary_llama2_vs_catalogue": "PASS",
    "hf_rotary_llama31_vs_catalogue": "PASS",
    "hf_attention_eager_vs_sdpa": "PASS",
    "hf_mixtral_moe_vs_catalogue": "PASS",
    "hf_mixtral_experts_eager_vs_batched_mm": "PASS",
}


def _framework():
    return [c for c in all_controls() if c.family == "framework"]


def test_family_structure():
    controls = _framework()
    assert framework.AVAILABLE
    assert [c.name for c in controls] == list(MEASURED)
    for c in controls:
        assert c.kind == "positive", c.name
        assert "transformers" in c.source and "5.24.0" in c.source, c.name
        assert "Source:" in c.doc and "Why benign:" in c.doc and "Measured" in c.doc, c.name
        case = c.build()
        assert isinstance(case, kcert.Case) and case.name == c.name
    assert sorted(c.name for c in controls if c.quick) == ["hf_gemma_rmsnorm_vs_catalogue",
                                                           "hf_llama_rmsnorm_vs_catalogue"]


def test_without_transformers_nothing_is_registered(monkeypatch):
    monkeypatch.setattr(framework, "AVAILABLE", False)
    before = len(all_controls())

    @framework._positive("nowhere")
    def not_registered():
        """doc"""

    assert len(all_controls()) == before and callable(not_registered)


@pytest.mark.parametrize("name", ["hf_llama_rmsnorm_vs_catalogue", "hf_gemma_rmsnorm_vs_catalogue"])
def test_quick_framework_control(name):
    control = next(c for c in _framework() if c.name == name)
    cert = kcert.certify(control.build(), replicates=256, seed=0)
    assert cert.verdict.value == MEASURED[name], kcert.report.text.failure_message(cert)
    # bitwise-equal pairs: every replicate has K = 0 and no bucket moves
    assert all(v.n_positive == 0 for v in cert.variance)


@pytest.mark.controls
def test_all_framework_controls():
    failures = []
    for control in _framework():
        cert = kcert.certify(control.build(), replicates=control.replicates, seed=0)
        if cert.verdict is Verdict.FAIL:
            failures.append(f"{control.name} FAILs: {kcert.report.text.failure_message(cert)}")
        if cert.verdict.value != MEASURED[control.name]:
            failures.append(f"{control.name}: measured {MEASURED[control.name]}, got {cert.verdict.value} "
                            f"({ {k: v.value for k, v in cert.gates.items()} })")
        if control.expect is not None and cert.verdict.value != control.expect:
            failures.append(f"{control.name}: expected {control.expect}, got {cert.verdict.value}")
    assert not failures, "\n".join(failures)
