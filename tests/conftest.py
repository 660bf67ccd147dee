import pytest

import kcert
from sample_kernels import rmsnorm_builtin, rmsnorm_ref


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
def _no_interpreter_unless_asked(request, monkeypatch):
    """``kcert model`` tests run outside Triton's interpreter unless their module is about it: the control suite's
    Triton families set ``TRITON_INTERPRET=1`` for the whole process, and under it every model pair also runs
    the interpreter's forwards (launch counting), so a model test passed or failed by the order tests ran in."""
    module = request.node.module.__name__ if request.node.module is not None else ""
    if module.startswith("test_model") and "triton" not in module:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)


@pytest.fixture(autouse=True)
def _seeded_torch():
    """Tests that draw with torch's global generator get the same draws whatever runs before
    them: every test is deterministic (every test is deterministic). kcert itself never uses it."""
    import torch

    torch.manual_seed(0)


# The whole-family tests (``-m controls``) of the control families that cost the most. CI runs
# ``-m "controls and not heavy_controls"`` (the light families in full) to stay within its time budget;
# ``python -m pytest -m controls`` still runs everything. Each of these families keeps quick controls (or,
# for step, the two-rank certifications of tests/test_step.py) in the default suite. README.md, "Tests".
HEAVY_CONTROL_MODULES = frozenset({
    "test_controls_step.py",  # 11 controls; the whole-family test runs 3 of them (KCERT_STEP_FAMILY=all: 11)
    "test_controls_compiled.py",  # torch.compile of every control
    "test_controls_opaque.py",  # C++ / Triton-interpreter kernels
    "test_controls_backward.py",
    "test_controls_framework.py",  # Hugging Face attention implementations
    "test_controls_attention.py",  # the costliest light family (636 s of 1846 s at load 5-7)
    "test_controls_rope.py",  # 230 s there; with float32, brings CI from ~21.5 to ~20 min at load 1
    "test_controls_float32.py",  # 143 s there
    "test_example_liger.py",  # Liger's Triton kernels in the CPU interpreter
})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Mark the heavy families' ``controls`` tests ``heavy_controls`` before ``-m`` selects (tryfirst)."""
    for item in items:
        if item.path.name in HEAVY_CONTROL_MODULES and item.get_closest_marker("controls") is not None:
            item.add_marker(pytest.mark.heavy_controls)
