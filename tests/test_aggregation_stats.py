"""kcert.stats.aggregation: naming the aggregation behind a step's deviation (numpy only)."""

import numpy as np
import pytest

from kcert.stats.aggregation import (AGREES, FACTOR, HYPOTHESIS, TRACKS, UNEXPLAINED, Hypothesis, beats,
                                     judge_aggregation, match_constant, ratio_summary, sentence, sweep_dependence)

D = 16
ROUNDING = 4e-3  # ref's relative error, a bf16 step
CONSTANTS = {"accumulation steps": 4.0, "world size": 2.0, "micro-batches in the window": 3.0,
             "micro-batches in the window / accumulation steps": 0.75}


def noise(seed, scale=ROUNDING):
    return np.abs(np.random.default_rng(seed).normal(0.0, scale, D))


def judge(deviation, ratio, scaled=None, hypotheses=(), quantities=None):
    scaled = noise(9) if scaled is None else scaled
    return judge_aggregation(deviation, noise(1), ratio, scaled, 2.0**-24, CONSTANTS, hypotheses, quantities)


def test_rounding_agrees():
    f = judge(noise(2), 1 + noise(3, 1e-3))
    assert f.status == AGREES and "agrees with ref within rounding" in sentence("grad", f)


def test_a_constant_factor_is_matched_to_the_configuration():
    ratio = 0.75 * (1 + np.random.default_rng(4).normal(0, 1e-4, D))
    f = judge(np.full(D, 0.25), ratio)
    assert f.status == FACTOR and f.factor == "micro-batches in the window / accumulation steps"
    assert "= ref's x 0.75" in sentence("grad", f)
    f = judge(np.full(D, 0.5), np.full(D, 0.5))
    assert f.factor == "1 / world size" and f.factor_value == 0.5
    f = judge(np.full(D, 0.37), np.full(D, 1.37))
    assert f.status == FACTOR and f.factor is None and "matches no quantity" in sentence("grad", f)


def test_a_factor_needs_prod_proportional_to_ref():
    # a constant ratio whose scaling leaves most of the deviation unexplained is not a factor
    f = judge(np.full(D, 0.3), np.full(D, 1.0), scaled=np.full(D, 0.3))
    assert f.status == UNEXPLAINED


def test_the_hypothesis_that_reproduces_prod_wins():
    right = Hypothesis("mean/token", "the mean of micro-batch means", noise(5), "mean of micro-batch means")
    wrong = Hypothesis("token/mean", "the mean of rank means", np.full(D, 0.08))
    ref = Hypothesis("token/token", "ref's aggregation", np.full(D, 0.1), reference=True)
    ratio = 1 + np.random.default_rng(6).normal(0, 0.02, D)
    f = judge(np.full(D, 0.1), ratio, hypotheses=(ref, wrong, right))
    assert f.status == HYPOTHESIS and f.hypothesis == "mean/token" and f.explained_share > 0.9
    assert "prod computes the mean of micro-batch means" in sentence("grad", f)


def test_a_hypothesis_beats_rounding_only_with_evidence():
    deviation = 2 * noise(7) + 2e-3
    ref = Hypothesis("token/token", "ref's", deviation, reference=True)
    better = Hypothesis("token/mean", "mean of rank means", deviation / 3, "mean of rank means")
    assert judge(deviation, 1 + noise(8, 1e-3), hypotheses=(ref, better)).status == HYPOTHESIS
    tied = Hypothesis("token/mean", "mean of rank means", deviation * np.where(np.arange(D) % 2, 0.5, 1.5))
    assert judge(deviation, 1 + noise(8, 1e-3), hypotheses=(ref, tied)).status == AGREES
    assert beats(np.zeros(10), np.ones(10)) and not beats(np.ones(10), np.ones(10))


def test_a_varying_ratio_tracks_a_token_share():
    share = np.random.default_rng(10).uniform(0.2, 0.8, D)
    f = judge(np.full(D, 0.2), 1 / (2 * share), quantities={"valid-token share of rank 1": share,
                                                            "constant": np.full(D, 0.5)})
    assert f.status == TRACKS and f.association.quantity == "valid-token share of rank 1" and f.association.rho < -0.9
    assert "depends on the valid-token share of rank 1" in sentence("grad", f)
    assert judge(np.full(D, 0.2), 1 + np.random.default_rng(11).normal(0, 0.1, D),
                 quantities={"valid-token share of rank 1": share}).status == UNEXPLAINED


def test_ratio_summary_and_constants():
    s = ratio_summary([1.0, 1.0, 1.0, 2.0, np.nan])
    assert s.median == 1.0 and s.replicates == 4 and s.spread == 0.0
    assert match_constant(0.5, 1e-6, {"world size": 2.0}) == ("1 / world size", 0.5)
    assert match_constant(1.0, 1e-6, {"world size": 1.0}) is None


@pytest.mark.parametrize("rows, expected", [
    ([dict(label="k=1", deviates=False, accumulation=1, window=1, world=1, split="data", deviation=0.0),
      dict(label="k=2", deviates=True, accumulation=2, window=2, world=1, split="data", deviation=0.1),
      dict(label="k=4", deviates=True, accumulation=4, window=4, world=1, split="data", deviation=0.3)],
     "deviates exactly at the configurations with accumulation > 1; the deviation grows with the accumulation steps"),
    ([dict(label="k=4", deviates=False, accumulation=4, window=4, world=1, split="data", deviation=0.0),
      dict(label="k=4 (window 2)", deviates=True, accumulation=4, window=2, world=1, split="data", deviation=0.5)],
     "deviates exactly at the configurations with a partial window"),
    ([dict(label="n=2", deviates=False, accumulation=1, window=1, world=2, split="data", deviation=0.0)],
     "every configuration agrees with ref"),
])
def test_sweep_dependence_names_the_separating_property(rows, expected):
    assert sweep_dependence(rows).startswith(expected)
