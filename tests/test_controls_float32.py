"""The float32 controls (family ``float32``): correct float32 kernels a few float32 ULPs apart PASS
under the default (bf16) harm scale; a dropped term and a wrong constant FAIL through the algebra gate,
float16 statistics FAIL in a float32 training run and where they overflow."""

import dataclasses

import pytest
import torch

import kcert
from kcert.controls.registry import all_controls
from kcert.controls.suite import DIFFERS_SHARE, run_controls
from kcert.verdict import Verdict

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def _family():
    return {c.name: c for c in all_controls() if c.family == "float32"}


def test_family_structure():
    controls = _family()
    assert sum(c.kind == "positive" for c in controls.values()) >= 5
    for c in controls.values():
        case = c.build()
        assert case.dtype is torch.float32 and c.doc and c.source, c.name
    assert controls["float32_layer_norm_half_statistics"].build().training_format == "float32"
    assert controls["float32_softmax_tiled_online"].build().training_format == "bfloat16"


def test_quick_positive_passes_and_differs():
    result = run_controls([_family()["float32_softmax_tiled_online"]], quick=True)[0]
    assert result.verdict is Verdict.PASS and result.differing_share >= DIFFERS_SHARE
    v = result.certificate.variance[0]
    assert v.harm_format == "bfloat16" and result.certificate.bias[0].harm_format == "bfloat16"


def test_a_float32_training_run_judges_the_same_pair_in_float32_ulps():
    case = dataclasses.replace(_family()["float32_softmax_tiled_online"].build(), training_dtype=torch.float32)
    cert = kcert.certify(case, replicates=256, seed=0, algebra_proof=False)
    v = cert.variance[0]
    assert v.harm_format == "float32"
    assert v.error_summary("prod")[1.0] > 1.0  # a few float32 ULPs: now more than one harm unit


@pytest.mark.controls
def test_whole_family():
    results = run_controls(list(_family().values()))
    assert not [r.error for r in results if r.error]
    for r in results:
        if r.control.kind == "positive":
            assert r.verdict is Verdict.PASS, (r.control.name, r.certificate.gates)
        else:
            assert r.verdict is Verdict.FAIL, (r.control.name, r.certificate.gates)
    by = {r.control.name: r for r in results}
    assert by["float32_gelu_short_constant"].gates["algebra"] is Verdict.FAIL
    assert by["float32_gelu_dropped_cubic_term"].gates["algebra"] is Verdict.FAIL
    assert by["float32_layer_norm_half_statistics"].gates["variance"] is Verdict.FAIL
    assert by["float32_rms_norm_half_mean_square_overflow"].gates["variance"] is Verdict.FAIL
