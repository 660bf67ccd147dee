"""Seeded null checks in the default suite: a genuinely differing known-good pair never FAILs over
seeds, and each bucket's test is held at the stated per-test rate by a Student t critical value. The rate
tests with the power to catch a miscalibration are tests/test_calibration_rates.py (marker ``calibration``).

Deterministic (fixed seeds), so never flaky: a change that breaks calibration fails every time.
"""

import numpy as np
import pytest
from scipy.stats import norm
from scipy.stats import t as t_dist

import kcert


def test_known_good_kernel_pair_never_fails_over_seeds(small_case):
    """A pair that genuinely differs (single against double rounding: a quarter of the elements one
    ULP apart, with biases that are ref's) is the null case that could fail; over five seeds it must not."""
    from kcert.catalog import norms as N

    case = kcert.Case(name="single_vs_double_rounding", ref=N.rms_norm_hf, prod=N.rms_norm,
                      inputs={"x": kcert.Gaussian((8, 64), shift=0.1)},
                      weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.02)})
    for s in range(5):
        cert = kcert.certify(case, replicates=256, seed=s, algebra_points=2, algebra_proof=False)
        assert 1.0 - cert.bitwise[0].fraction_equal > 0.05  # it differs: the test could fail
        assert kcert.Verdict.FAIL not in cert.gates.values(), (s, cert.gates)
    cert = kcert.certify(small_case, replicates=128, seed=0, algebra_points=2)
    # each test at the Student t(R - 1) quantile with the normal's tail at z*: the normal bound is exact
    assert cert.bias[0].familywise_error_bound == pytest.approx(2 * 2 * 64 * norm.sf(5.0))
    critical = cert.bias[0].tests[0].critical
    assert np.allclose(2 * t_dist.sf(critical, 127), 2 * norm.sf(5.0))
