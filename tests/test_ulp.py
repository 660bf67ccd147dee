import numpy as np
import pytest
import torch

from kcert.stats.ulp import float_format, ulp


_INT_VIEW = {"bfloat16": torch.int16, "float16": torch.int16, "float32": torch.int32, "float64": torch.int64}


@pytest.mark.parametrize("name", ["bfloat16", "float16", "float32", "float64"])
def test_ulp_is_the_gap_to_the_next_representable_value(name):
    dtype = getattr(torch, name)
    values = torch.tensor([1.0, 1.5, 1.9999, 2.0, 3.0, 0.75, 0.5, 1e-3, 100.0, 255.0, 256.0]).to(dtype)
    # the next representable value above a positive float is one step up in its bit pattern
    bits = values.view(_INT_VIEW[name])
    after = (bits + 1).view(dtype)
    gaps = (after.double() - values.double()).numpy()
    np.testing.assert_array_equal(ulp(values.double().numpy(), name), gaps)


def test_ulp_at_binade_edges_is_exact_not_eps_times_scale():
    # just below 2 the ULP is half of the ULP at 2: eps * |x| would be off by ~2x there
    assert ulp(1.99, "bfloat16") == 2.0**-7
    assert ulp(2.0, "bfloat16") == 2.0**-6
    assert ulp(np.nextafter(2.0, 0), "float64") == 2.0**-52
    eps = torch.finfo(torch.bfloat16).eps
    assert eps * 1.99 / ulp(1.99, "bfloat16") == pytest.approx(1.99)


def test_ulp_consistent_with_bfloat16_rounding():
    # rounding x to bf16 moves it by at most half an ULP, and adding one ULP is the next value
    rng = np.random.default_rng(0)
    x = rng.normal(size=10_000) * 10.0 ** rng.integers(-6, 6, size=10_000)
    rounded = torch.tensor(x).to(torch.bfloat16).double().numpy()
    u = ulp(rounded, "bfloat16")
    assert np.all(np.abs(rounded - x) <= u / 2 * (1 + 1e-12) + 1e-300)
    nxt = torch.tensor(rounded + u).to(torch.bfloat16).double().numpy()
    assert np.array_equal(nxt, rounded + u)


def test_ulp_subnormals_zero_and_nonfinite():
    f = float_format("bfloat16")
    assert ulp(0.0, "bfloat16") == f.smallest_subnormal == 2.0 ** (-126 - 7)
    assert ulp(1e-45, "float32") == 2.0**-149
    assert np.isnan(ulp(np.inf, "float32")) and np.isnan(ulp(np.nan, "float32"))
    assert ulp(-3.0, "float16") == ulp(3.0, "float16") == 2.0**-9


def test_unknown_format_is_named():
    with pytest.raises(ValueError, match="unknown floating format 'int8'"):
        float_format("int8")
    assert float_format("torch.bfloat16").significand_bits == 8
