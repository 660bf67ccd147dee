"""The identity test's relative discrepancy (execution/algebra.py): its four-pass fast path and the
general path for non-finite values give what the definition says."""

import math

import pytest
import torch

from kcert.execution.algebra import relative_discrepancy

nan, inf = float("nan"), float("inf")


@pytest.mark.parametrize("a, b, expected", [
    ([1.0, -4.0, 2.0], [1.0, -4.0, 2.0], 0.0),  # identical
    ([1.0, -4.0, 2.0], [1.0, -4.0, 2.5], 0.5 / 4.0),  # scale is max |a|, here from a negative value
    ([0.0, 0.0], [0.0, 2.0**-10], 2.0**-10),  # zero scale: the absolute difference
    ([nan, 1.0, inf], [nan, 1.0, inf], 0.0),  # nan with nan and equal infinities are identical
    ([nan, 2.0, inf], [nan, 2.5, inf], 0.25),  # the finite difference over the finite scale
    ([1.0, inf], [1.0, -inf], inf),  # differ at a non-finite value
    ([1.0, 2.0], [1.0, nan], inf),
    ([], [], 0.0),
])
def test_relative_discrepancy(a, b, expected):
    for dtype in (torch.float64, torch.float32):
        got = relative_discrepancy(torch.tensor(a, dtype=dtype), torch.tensor(b, dtype=dtype))
        assert got == expected or (math.isinf(expected) and math.isinf(got)), (a, b, dtype, got)


def test_float32_differences_are_taken_in_float64():
    """Two float32 neighbours at 2^24 (one ULP = 2): the relative discrepancy is exactly 2 / 2^24."""
    a = torch.tensor([16777216.0], dtype=torch.float32)
    b = torch.nextafter(a, torch.tensor([inf]))
    assert relative_discrepancy(a, b) == 2.0 / 16777216.0
