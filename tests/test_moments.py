import numpy as np

from kcert.stats.moments import MomentAccumulator


def test_streaming_moments_equal_numpy_and_merge_in_any_order():
    rng = np.random.default_rng(1)
    data = rng.normal(3.0, 2.0, size=(257, 5))
    acc = MomentAccumulator.zeros(5)
    for row in data:
        acc.add(row)
    np.testing.assert_allclose(acc.mean, data.mean(0), rtol=1e-13)
    np.testing.assert_allclose(acc.std(), data.std(0, ddof=1), rtol=1e-12)
    # shards of different sizes merged out of order give the same moments
    a, b, c = MomentAccumulator.zeros(5), MomentAccumulator.zeros(5), MomentAccumulator.zeros(5)
    a.add(data[:10])
    b.add(data[10:200])
    c.add(data[200:])
    c.merge(a)
    c.merge(b)
    np.testing.assert_allclose(c.mean, acc.mean, rtol=1e-13)
    np.testing.assert_allclose(c.m2, acc.m2, rtol=1e-11)
    assert np.array_equal(c.count, acc.count)


def test_masked_buckets_and_growth():
    acc = MomentAccumulator.zeros(2)
    acc.add(np.array([1.0, 5.0]), np.array([True, False]))
    acc.add(np.array([3.0, 7.0]), np.array([True, True]))
    acc.grow(3)
    acc.add(np.array([5.0, 9.0, 1.0]))
    np.testing.assert_array_equal(acc.count, [3, 2, 1])
    np.testing.assert_allclose(acc.mean, [3.0, 8.0, 1.0])
    assert np.isnan(acc.std()[2])
    np.testing.assert_allclose(acc.std()[:2], [2.0, np.sqrt(2.0)])


def test_constant_values_have_exactly_zero_spread():
    acc = MomentAccumulator.zeros(1)
    for _ in range(100):
        acc.add(np.array([0.0]))
    assert acc.std()[0] == 0.0 and acc.mean[0] == 0.0
