import pytest

import kcert
from kernels import rmsnorm_builtin, rmsnorm_ref


@pytest.fixture
def small_case():
    """A known-good pair on a small shape: the built-in RMSNorm vs a manual one."""
    return kcert.Case(
        name="rmsnorm_small",
        ref=rmsnorm_ref,
        prod=rmsnorm_builtin,
        inputs={"x": kcert.Gaussian((4, 64), shift=0.1)},
        weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.1)},
        buckets=kcert.Axes(-1),
    )
