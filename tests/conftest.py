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


@pytest.fixture
def one_thread():
    """Controls run torch on one thread: on a shared 2-core machine two OpenMP threads made the
    small ops of a control 30-100x slower (measured by the control authors)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """Every test runs torch on one thread, as kcert's commands do by default (``--threads 1``): on a
    shared machine two threads made replicates 4-12x slower (docs/benchmarks.md, "Threads"), and a
    test's numbers do not depend on which test ran before it (some set the thread count themselves)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Tests that draw with torch's global generator get the same draws whatever runs before
    them: every test is deterministic (every test is deterministic). kcert itself never uses it."""
    import torch

    torch.manual_seed(0)
