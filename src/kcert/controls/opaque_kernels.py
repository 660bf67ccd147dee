"""Opaque production kernels for the ``opaque`` control family (controls/opaque.py).

Real mode cannot see into any of them: ``torch.library`` custom ops whose bodies are numpy or numba,
a C++ operator registered with ``TORCH_LIBRARY`` and built by ``torch.utils.cpp_extension.load_inline``,
Triton kernels (run by Triton's CPU interpreter here). Each takes tensors of any floating dtype it
supports and returns its output in the input's dtype, as production kernels do; what precision it
computes in is stated on each.

Importing this module registers the custom ops (namespace ``kcert_opaque``); the C++ operator and the
Triton kernels are built on first use.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import numpy as np
import torch

NAMESPACE = "kcert_opaque"


def _numpy(t: torch.Tensor) -> np.ndarray:
    """float64 tensors as float64 arrays, every other floating dtype as float32 (numpy has no bfloat16)."""
    dtype = torch.float64 if t.dtype == torch.float64 else torch.float32
    return t.detach().to(device="cpu", dtype=dtype).numpy()


def _back(a: np.ndarray, like: torch.Tensor) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(device=like.device, dtype=like.dtype)


# --- numpy custom ops ----------------------------------------------------------------------------------


@torch.library.custom_op(f"{NAMESPACE}::rms_norm_numpy", mutates_args=())
def rms_norm_numpy(x: torch.Tensor, w: torch.Tensor, eps: float, eps_on_rms: bool) -> torch.Tensor:
    """RMSNorm in numpy, float32 inside whatever the input (float64 inputs too), one rounding to the
    input's dtype. ``eps_on_rms``: ``x / (sqrt(ms) + eps)`` (gpt-neox #1342) instead of
    ``x / sqrt(ms + eps)``."""
    a = x.detach().to(device="cpu", dtype=torch.float32).numpy()
    g = w.detach().to(device="cpu", dtype=torch.float32).numpy()
    # the mean square by numpy's pairwise sum; the gain applied before the division (another rounding
    # order than x * rsqrt(ms + eps) * w)
    ms = np.mean(a * a, axis=-1, keepdims=True, dtype=np.float32)
    e = np.float32(eps)
    rms = np.sqrt(ms) + e if eps_on_rms else np.sqrt(ms + e)
    return _back(((a * g) / rms).astype(np.float32), x)


@rms_norm_numpy.register_fake
def _(x, w, eps, eps_on_rms):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NAMESPACE}::swiglu_numpy_bf16", mutates_args=())
def swiglu_numpy_bf16(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """SwiGLU ``silu(gate) * up`` in numpy float32, one rounding; like a kernel built for one format,
    it accepts bfloat16 only (anything else raises TypeError)."""
    if gate.dtype != torch.bfloat16 or up.dtype != torch.bfloat16:
        raise TypeError(f"swiglu_numpy_bf16 is built for bfloat16 only, got {gate.dtype} and {up.dtype}")
    g, u = _numpy(gate), _numpy(up)
    return _back((g / (np.float32(1) + np.exp(-g)) * u).astype(np.float32), gate)


@swiglu_numpy_bf16.register_fake
def _(gate, up):
    return torch.empty_like(gate)


# --- numba custom op -----------------------------------------------------------------------------------

NUMBA = importlib.util.find_spec("numba") is not None
_layer_norm_rows = None


def _numba_layer_norm():
    """Two-pass LayerNorm over rows, sequential sums, in the array's own dtype (float32 or float64)."""
    global _layer_norm_rows
    if _layer_norm_rows is None:
        import numba

        @numba.njit(cache=False)
        def rows(x, w, b, consts, drop_eps, out):
            # consts = (n, 1, eps) in x's dtype: a Python int or float would promote float32 to float64
            n, one, eps = consts[0], consts[1], consts[2]
            for r in range(x.shape[0]):
                s = x[r, 0] - x[r, 0]
                for i in range(x.shape[1]):
                    s += x[r, i]
                mean = s / n
                v = s - s
                for i in range(x.shape[1]):
                    d = x[r, i] - mean
                    v += d * d
                var = v / n
                inv = one / np.sqrt(var) if drop_eps else one / np.sqrt(var + eps)
                for i in range(x.shape[1]):
                    out[r, i] = (x[r, i] - mean) * inv * w[i] + b[i]

        _layer_norm_rows = rows
    return _layer_norm_rows


@torch.library.custom_op(f"{NAMESPACE}::layer_norm_numba", mutates_args=())
def layer_norm_numba(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, eps: float, drop_eps: bool) -> torch.Tensor:
    """LayerNorm compiled by numba: two passes with sequential sums, computed in float32 for bfloat16,
    float16 and float32 inputs and in float64 for float64 inputs; one rounding to the input dtype.
    ``drop_eps``: ``1 / sqrt(var)`` (eps dropped)."""
    a = _numpy(x)
    rows = np.ascontiguousarray(a.reshape(-1, a.shape[-1]))
    out = np.empty_like(rows)
    consts = np.array([rows.shape[1], 1.0, eps], dtype=a.dtype)
    _numba_layer_norm()(rows, _numpy(w).astype(a.dtype), _numpy(b).astype(a.dtype), consts, drop_eps, out)
    return _back(out.reshape(a.shape), x)


@layer_norm_numba.register_fake
def _(x, w, b, eps, drop_eps):
    return torch.empty_like(x)


# --- C++ operator --------------------------------------------------------------------------------------

CPP_SOURCE = r"""
#include <ATen/ATen.h>
#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <torch/library.h>
#include <cmath>

// Elementwise GELU. opmath_type: float for bfloat16, half and float; double for double.
at::Tensor gelu_erf(const at::Tensor& x) {
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "kcert_gelu_erf", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* in = xc.data_ptr<scalar_t>();
    scalar_t* out = y.data_ptr<scalar_t>();
    const acc_t inv_sqrt2 = acc_t(0.70710678118654752440);
    for (int64_t i = 0; i < xc.numel(); ++i) {
      acc_t v = static_cast<acc_t>(in[i]);
      out[i] = static_cast<scalar_t>(acc_t(0.5) * v * (acc_t(1) + std::erf(v * inv_sqrt2)));
    }
  });
  return y;
}

// x/2 (1 + tanh(c (x + a x^3))): the tanh approximation with its constants as arguments.
at::Tensor gelu_tanh(const at::Tensor& x, double c, double a) {
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, xc.scalar_type(), "kcert_gelu_tanh", [&] {
    using acc_t = at::opmath_type<scalar_t>;
    const scalar_t* in = xc.data_ptr<scalar_t>();
    scalar_t* out = y.data_ptr<scalar_t>();
    const acc_t cc = static_cast<acc_t>(c), aa = static_cast<acc_t>(a);
    for (int64_t i = 0; i < xc.numel(); ++i) {
      acc_t v = static_cast<acc_t>(in[i]);
      out[i] = static_cast<scalar_t>(acc_t(0.5) * v * (acc_t(1) + std::tanh(cc * (v + aa * v * v * v))));
    }
  });
  return y;
}

TORCH_LIBRARY(kcert_opaque_cpp, m) {
  m.def("gelu_erf(Tensor x) -> Tensor");
  m.def("gelu_tanh(Tensor x, float c, float a) -> Tensor");
}
TORCH_LIBRARY_IMPL(kcert_opaque_cpp, CPU, m) {
  m.impl("gelu_erf", &gelu_erf);
  m.impl("gelu_tanh", &gelu_tanh);
}
"""


def cpp_unavailable() -> str | None:
    """Why the C++ operator cannot be built here (None: it can)."""
    compiler = os.environ.get("CXX", "c++")
    if shutil.which(compiler) is None:
        return f"no C++ compiler: {compiler!r} is not on PATH (install g++, or set CXX)"
    try:
        from torch.utils.cpp_extension import is_ninja_available
    except ImportError as exc:  # pragma: no cover - torch without cpp_extension
        return f"torch.utils.cpp_extension is unavailable: {exc}"
    if not is_ninja_available():
        return "torch.utils.cpp_extension needs ninja: pip install ninja (or apt-get install ninja-build)"
    return None


def cpp_ops():
    """``torch.ops.kcert_opaque_cpp``, built once per user: load_inline compiles into torch's per-user
    extension cache (``$TORCH_EXTENSIONS_DIR``, default ``~/.cache/torch_extensions``) and reuses the
    build while the source and the torch version are unchanged (the first build takes about a minute
    on two cores)."""
    if not hasattr(torch.ops, "kcert_opaque_cpp") or not hasattr(torch.ops.kcert_opaque_cpp, "gelu_erf"):
        from torch.utils.cpp_extension import load_inline

        load_inline("kcert_opaque_cpp", cpp_sources=[CPP_SOURCE], is_python_module=False, extra_cflags=["-O2"],
                    verbose=False)
    return torch.ops.kcert_opaque_cpp


# --- Triton kernels --------------------------------------------------------------------------------------

TRITON = importlib.util.find_spec("triton") is not None


def triton_kernels():
    """The Triton kernels (controls/opaque_triton.py), jitted once in Triton's CPU interpreter:
    ``TRITON_INTERPRET=1`` is set for the process first (the control suite's tensors live on the CPU;
    triton 3.6 reads it when a kernel is decorated)."""
    os.environ["TRITON_INTERPRET"] = "1"
    from . import opaque_triton

    return opaque_triton.KERNELS
