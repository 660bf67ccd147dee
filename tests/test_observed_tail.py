"""The observed range before extrapolation (kcert.stats.observed), lattice spreading (kcert.stats.lattice)
and the rule of three (kcert.stats.rare): exactness against enumeration and simulation."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from kcert.stats.lattice import lattice_spacing, spread_within_cells
from kcert.stats.observed import observed_tail, scan_p_value
from kcert.stats.rare import rare_event_limit


def _enumerated_scan_p(counts, n_prod, n_ref):
    """The scan's p-value by enumerating every arrangement of the labels (small samples only)."""
    depth = len(counts)
    m = np.arange(1, depth + 1)
    total = n_prod + n_ref

    def min_tail(labels):
        k = np.cumsum(labels[:depth])
        return stats.hypergeom.sf(k - 1, total, n_prod, m).min()

    observed = stats.hypergeom.sf(np.asarray(counts) - 1, total, n_prod, m).min()
    hits = n = 0
    for prods in itertools.combinations(range(total), n_prod):
        labels = np.zeros(total, int)
        labels[list(prods)] = 1
        hits += min_tail(labels) <= observed * (1 + 1e-9)
        n += 1
    return hits / n


@pytest.mark.parametrize("counts", [[1, 2, 3, 3], [0, 1, 1, 2], [1, 1, 2, 2], [1, 2, 3, 4], [0, 0, 0, 1]])
def test_the_scan_p_value_is_exact(counts):
    p, _ = scan_p_value(np.array(counts), 6, 6)
    assert p == pytest.approx(_enumerated_scan_p(counts, 6, 6), abs=1e-12)


def test_the_scan_test_holds_its_level_at_the_line_and_is_silent_for_equal_laws():
    rng = np.random.default_rng(0)
    # at the boundary of the null: prod's errors at the PASS line have ref's law, (a - 1) / 2 =d b
    p = np.array([observed_tail(1 + 2 * rng.exponential(size=512), rng.exponential(size=512)).p_value
                  for _ in range(400)])
    assert np.mean(p <= 0.05) <= stats.binom.ppf(0.999, 400, 0.05) / 400
    assert np.mean(p <= 0.5) > 0.35  # not conservative to the point of silence
    equal = [observed_tail(*(50 * rng.exponential(size=(2, 512)))).p_value for _ in range(50)]
    assert min(equal) > 0.5


def test_one_spike_puts_the_observed_ratio_above_the_line_and_many_spikes_reject_the_test():
    rng = np.random.default_rng(1)
    b = 1.24 * np.abs(rng.standard_normal(1024))
    a = 1.24 * np.abs(rng.standard_normal(1024))
    a[17] = 30.0
    one = observed_tail(a, b)
    assert one.ratio == pytest.approx(29.0 / b.max()) and one.ratio > 2 and one.p_value > 0.05
    a[rng.choice(1024, 12, replace=False)] = rng.uniform(10, 50, 12)
    many = observed_tail(a, b)
    assert many.p_value < 0.01 and many.prod_in_top >= 10


def test_the_observed_ratio_uses_the_slack_and_names_bad_input():
    assert observed_tail(np.array([0.5, 0.9]), np.array([0.1, 0.2])).ratio == 0.0
    assert observed_tail(np.array([3.0, 0.0]), np.array([0.0, 0.0])).ratio == math.inf
    with pytest.raises(ValueError, match="finite and non-negative"):
        observed_tail(np.array([1.0, np.nan]), np.array([1.0, 1.0]))
    with pytest.raises(ValueError, match="one non-zero length"):
        observed_tail(np.ones(3), np.ones(4))


def test_a_lattice_is_found_only_when_the_errors_are_mostly_tied():
    rng = np.random.default_rng(2)
    continuous = rng.exponential(size=1000)
    assert lattice_spacing(continuous) == 0.0
    half_ulp = 0.5 * np.round(continuous / 0.5)
    assert lattice_spacing(half_ulp) == pytest.approx(0.5)
    assert lattice_spacing(np.zeros(100)) == 0.0


def test_spreading_moves_prod_up_and_ref_down_within_one_cell_and_keeps_zeros():
    rng = np.random.default_rng(3)
    x = 0.5 * np.round(rng.exponential(size=1000) / 0.5)
    up = spread_within_cells(x, 0.5, True, np.random.default_rng(0))
    down = spread_within_cells(x, 0.5, False, np.random.default_rng(0))
    pos = x > 0
    assert np.all((up[pos] >= x[pos]) & (up[pos] < x[pos] + 0.5))
    assert np.all((down[pos] <= x[pos]) & (down[pos] > x[pos] - 0.5))
    assert np.all(up[~pos] == 0) and np.all(down[~pos] == 0)
    # the spread law's upper quantiles bound the lattice law's from the right side
    for q in (0.9, 0.99, 0.999):
        lat = np.quantile(x, q, method="inverted_cdf")
        assert np.quantile(up, q) >= lat - 1e-12 and np.quantile(down, q) <= lat + 1e-12
    np.testing.assert_array_equal(up, spread_within_cells(x, 0.5, True, np.random.default_rng(0)))


def test_the_rule_of_three():
    r = rare_event_limit(1024, 6.25e5)
    assert r.rate == pytest.approx(3 / 1024, rel=0.01)
    assert (1 - r.rate) ** 1024 == pytest.approx(0.05)  # a defect at that rate shows in 95 % of runs
    assert r.calls_at_horizon == pytest.approx(r.rate * 6.25e5)
    assert rare_event_limit(4096, 6.25e5).rate < r.rate
    with pytest.raises(ValueError, match="confidence"):
        rare_event_limit(10, 100.0, confidence=1.0)
