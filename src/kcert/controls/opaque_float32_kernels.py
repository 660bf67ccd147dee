"""Float32-only opaque kernels for the ``opaque`` control family (controls/opaque_float32.py).

Real kernels mostly compute in float32 whatever they are given, or refuse anything else: a numpy body
that takes ``float32`` arrays, a C++ extension on ``float*``. The kernels here do one of the two:

- ``rms_norm_float32``: a ``torch.library`` custom op whose numpy body takes float32 tensors only
  (anything else raises ``TypeError``, as ``x.numpy()`` handed to a float32 routine would);
- the C++ operator ``gelu_tanh_float`` (``TORCH_LIBRARY``, built by ``load_inline``): a loop over
  ``const float*`` that refuses any other dtype (``TORCH_CHECK``).

The Triton kernels that upcast to float32 live in controls/opaque_float32_triton.py (imported only
after ``TRITON_INTERPRET=1`` is set). Importing this module registers the custom op (namespace
``kcert_opaque_f32``); the C++ operator is built on first use.
"""

from __future__ import annotations

import numpy as np
import torch

NAMESPACE = "kcert_opaque_f32"


def _float32_only(name: str, **tensors: torch.Tensor) -> None:
    for key, t in tensors.items():
        if t.dtype != torch.float32:
            raise TypeError(f"{name} is built for float32 only: {key} is {t.dtype}")


@torch.library.custom_op(f"{NAMESPACE}::rms_norm_float32", mutates_args=())
def rms_norm_float32(x: torch.Tensor, w: torch.Tensor, eps: float, eps_on_rms: bool) -> torch.Tensor:
    """RMSNorm on float32 tensors only: the row's sum of squares by BLAS (``np.einsum`` with
    ``optimize``: a dot product per row), the reciprocal RMS, then ``x * r * w``. ``eps_on_rms``:
    ``1 / (sqrt(ms) + eps)`` (gpt-neox #1342) instead of ``1 / sqrt(ms + eps)``."""
    _float32_only("rms_norm_float32", x=x, w=w)
    a = x.detach().cpu().numpy().reshape(-1, x.shape[-1])
    g = w.detach().cpu().numpy()
    ss = np.einsum("ij,ij->i", a, a, optimize=True)[:, None]
    ms = ss / np.float32(a.shape[-1])
    e = np.float32(eps)
    r = np.float32(1) / (np.sqrt(ms) + e) if eps_on_rms else np.float32(1) / np.sqrt(ms + e)
    return torch.from_numpy(np.ascontiguousarray((a * r * g).astype(np.float32))).reshape(x.shape).to(x.device)


@rms_norm_float32.register_fake
def _(x, w, eps, eps_on_rms):
    return torch.empty_like(x)


CPP_SOURCE = r"""
#include <ATen/ATen.h>
#include <torch/library.h>
#include <cmath>

// x/2 (1 + tanh(c (x + a x^3))) on float* only: a kernel written for one format.
at::Tensor gelu_tanh_float(const at::Tensor& x, double c, double a) {
  TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu_tanh_float takes float32 (float*) tensors only, got ",
              x.scalar_type());
  auto xc = x.contiguous();
  auto y = at::empty_like(xc);
  const float* in = xc.data_ptr<float>();
  float* out = y.data_ptr<float>();
  const float cc = static_cast<float>(c), aa = static_cast<float>(a);
  for (int64_t i = 0; i < xc.numel(); ++i) {
    const float v = in[i];
    out[i] = 0.5f * v * (1.0f + std::tanh(cc * (v + aa * v * v * v)));
  }
  return y;
}

TORCH_LIBRARY(kcert_opaque_cpp_f32, m) {
  m.def("gelu_tanh_float(Tensor x, float c, float a) -> Tensor");
}
TORCH_LIBRARY_IMPL(kcert_opaque_cpp_f32, CPU, m) {
  m.impl("gelu_tanh_float", &gelu_tanh_float);
}
"""


def cpp_ops():
    """``torch.ops.kcert_opaque_cpp_f32``, built once per user into torch's extension cache (see
    ``opaque_kernels.cpp_ops``)."""
    if not hasattr(torch.ops, "kcert_opaque_cpp_f32") or not hasattr(torch.ops.kcert_opaque_cpp_f32, "gelu_tanh_float"):
        from torch.utils.cpp_extension import load_inline

        load_inline("kcert_opaque_cpp_f32", cpp_sources=[CPP_SOURCE], is_python_module=False, extra_cflags=["-O2"],
                    verbose=False)
    return torch.ops.kcert_opaque_cpp_f32


def triton_kernels():
    """The float32 Triton kernels (controls/opaque_float32_triton.py), in Triton's CPU interpreter
    (``TRITON_INTERPRET=1`` is set for the process first, as ``opaque_kernels.triton_kernels`` does)."""
    from .opaque_kernels import triton_kernels as set_interpreter

    set_interpreter()
    from . import opaque_float32_triton

    return opaque_float32_triton.KERNELS
