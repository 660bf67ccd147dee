"""Float32-only opaque controls (family ``opaque``): kernels that compute in float32 whatever they
are given, or accept float32 only, certified in a float32 case with no ``prod_math`` and no
acceptance of an untested algebra.

The precision ladder (docs/method.md, "The precision ladder") then has one rung, float32, or a
float64 rung that carries float32 arithmetic: a numpy custom op that refuses float64, Triton kernels
(CPU interpreter) that upcast and return float32, a C++ operator on ``float*``, and a RoPE kernel with
a fixed float32 internal precision at positions where rounding the angles dominates the error. The
correct kernels must PASS by default; the negatives are algebraic defects of 5 to 200 float32 ULPs
(eps placement, a dropped term, a short constant, label smoothing spread over V - 1 classes),
invisible to the bias and variance gates of a bf16 training run (1/300 to 1/10000 of a bf16 ULP):
only the algebra gate can fail them, from the single float32 rung.

Measured (seed 0, kcert defaults, each control at its declared replicates, one thread, ``kcert controls
--control NAME``; tests/test_controls_opaque.py checks the verdicts). K: prod's error over ref's at the
float32 rung (the float64 rung for the RoPE before issue 22). Before the same-precision comparison (main at
b38b4f4) every one was "not resolved" (WARN), the RoPE FAILed; with it (issue 22):

=================================================== ========== ================== =====================
control                                             K          before             with issue 22
=================================================== ========== ================== =====================
custom_op_float32_rms_norm                          1.28       WARN               PASS
custom_op_float32_rms_norm_eps_on_rms               35.6       WARN               FAIL (K 2.5e9 at the
                                                                                  small-magnitude points)
cpp_float_gelu_tanh                                 1.0        WARN               PASS
cpp_float_gelu_tanh_short_constant                  76.4       WARN               FAIL
triton_float32_layer_norm                           1.04       WARN               PASS
triton_float32_layer_norm_drops_eps                 31         WARN               FAIL (K 3.7e8 small)
triton_float32_cross_entropy                        1.19       WARN               PASS
triton_float32_cross_entropy_smoothing_over_others  126        WARN               FAIL
triton_float32_rope_long_positions                  4.75e5 f64 FAIL               PASS
=================================================== ========== ================== =====================
"""

from __future__ import annotations

import functools

import torch

from ..case import Case
from ..catalog import activations as A
from ..catalog import losses as L
from ..catalog import norms as N
from ..catalog import rope as R
from . import opaque_float32_kernels as K
from .opaque import CPP_UNAVAILABLE, TRITON_UNAVAILABLE, _register

F32 = torch.float32
NORM_SHAPE = (1, 64, 512)
TRITON_NORM_SHAPE = (1, 16, 256)  # the interpreter runs a program per row in numpy: keep it small
LABEL_SMOOTHING = 0.1
CE_SHAPE = {"batch": 1, "seq": 64, "vocab": 1024}  # 64 positions: the LM logits' confidence rises with context
ROPE_CONTEXT = 4096  # Llama 2's: angles up to 4096 rad, whose float32 rounding dominates the error


def _triton_case(name: str, base: Case, launch) -> Case:
    from ..adapters import triton as kt

    K.triton_kernels()  # sets TRITON_INTERPRET=1 before triton is imported
    return kt.triton_case(name, base.ref, launch, dtype=F32, inputs=dict(base.inputs), weights=dict(base.weights),
                          buckets=base.buckets, description=base.description, output_names=base.output_names)


# --- numpy custom op, float32 only ---------------------------------------------------------------------


@_register("positive", "torch.library custom op, numpy body on float32 only (refuses float64), vs RMSNorm", None,
           replicates=256, expect="PASS")
def custom_op_float32_rms_norm() -> Case:
    """RMSNorm as a ``torch.library`` custom op whose numpy body takes float32 tensors only, in a
    float32 case, against the catalogue's RMSNorm.

    Source: CPU kernels handed ``x.numpy()`` and written for float32 (a BLAS ``sdot`` per row for the
    sum of squares, then ``x * (1 / sqrt(ms + eps)) * w``); any other dtype raises. The ladder's float64
    rung is refused, so it has the float32 rung alone.

    Math: ``y = x w / sqrt(mean(x^2) + eps)``, the catalogue's function; another summation order and
    the reciprocal applied before the gain.
    """
    return N.RMSNORM.case("custom_op_float32_rms_norm", functools.partial(K.rms_norm_float32, eps=N.LLAMA_EPS,
                                                                           eps_on_rms=False),
                          dtype=F32, shape=NORM_SHAPE)


@_register("negative", "gpt-neox #1342 (eps on the RMS) in a numpy custom op on float32 only", None, replicates=256,
           expect="FAIL")
def custom_op_float32_rms_norm_eps_on_rms() -> Case:
    """``custom_op_float32_rms_norm`` with eps added to the RMS: ``x w / (sqrt(mean(x^2)) + eps)``.

    Source: EleutherAI/gpt-neox PR #1342 (GPT-NeoX's RMSNorm added eps to the RMS, where Llama's adds
    it to the mean square). Math: at unit RMS a relative change of ``eps / 2`` = 5e-6, about 40 float32
    ULPs and 1/1600 of a bf16 ULP; at small magnitudes (mean square comparable to eps) far more. Only
    the float32 rung exists: prod refuses float64.
    """
    return N.RMSNORM.case("custom_op_float32_rms_norm_eps_on_rms",
                          functools.partial(K.rms_norm_float32, eps=N.LLAMA_EPS, eps_on_rms=True),
                          dtype=F32, shape=NORM_SHAPE)


# --- C++ operator on float* ------------------------------------------------------------------------------


def _cpp_gelu(c: float):
    def kernel(x):
        return K.cpp_ops().gelu_tanh_float(x, c, A.GELU_TANH_A)

    kernel.__name__ = f"cpp_gelu_tanh_float_c{c:.4g}"
    return kernel


@_register("positive", "C++ operator on float* (TORCH_LIBRARY, load_inline; refuses double), tanh GELU",
           CPP_UNAVAILABLE, replicates=256, expect="PASS")
def cpp_float_gelu_tanh() -> Case:
    """The tanh GELU as a C++ operator looping over ``const float*`` (``TORCH_CHECK`` refuses any other
    dtype), in a float32 case, against ``F.gelu(x, approximate='tanh')``.

    Source: C++/CUDA extensions written for ``float`` (``x.data_ptr<float>()``); built with
    ``torch.utils.cpp_extension.load_inline``. One rung: float64 is refused.

    Math: ``x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`` with ``std::tanh`` in float, PyTorch's with
    its vectorised tanh: the same real function.
    """
    return A.GELU_TANH.case("cpp_float_gelu_tanh", _cpp_gelu(A.GELU_TANH_C), dtype=F32)


@_register("negative", "tanh GELU with sqrt(2/pi) written 0.7978 (a short constant), C++ on float*", CPP_UNAVAILABLE,
           replicates=256, expect="FAIL")
def cpp_float_gelu_tanh_short_constant() -> Case:
    """``cpp_float_gelu_tanh`` with ``sqrt(2/pi)`` written as 0.7978 instead of 0.7978845608...

    Source: the wrong-constant class (a literal truncated to four digits in a kernel; the C++ operator
    of ``cpp_extension_gelu_wrong_constant`` in a float-only build). Math: the tanh argument is scaled
    by ``1 - 1.06e-4``; the output changes by ``x/2 sech^2(u) u 1.06e-4``, at most about 2.5e-5 near
    ``|x| ~ 1``: a few dozen float32 ULPs of the output's peak, 1/500 of a bf16 ULP. One rung (float32).
    """
    return A.GELU_TANH.case("cpp_float_gelu_tanh_short_constant", _cpp_gelu(0.7978), dtype=F32)


# --- Triton (CPU interpreter): upcast to float32, float32 outputs -----------------------------------------


def _triton_layer_norm(x, w, b, drop_eps=False):
    return K.triton_kernels()["layer_norm"](x, w, b, N.LAYERNORM_EPS, drop_eps)


def _triton_layer_norm_drops_eps(x, w, b):
    return _triton_layer_norm(x, w, b, drop_eps=True)


@_register("positive", "Triton LayerNorm upcasting to float32, float32 output (interpreter)", TRITON_UNAVAILABLE,
           replicates=128, expect="PASS")
def triton_float32_layer_norm() -> Case:
    """A Triton LayerNorm that loads any dtype, computes in float32 and returns a float32 tensor
    (a float64 input gives a float32 output), in Triton's CPU interpreter, against the catalogue's
    LayerNorm.

    Source: the row-per-program LayerNorm of the Triton tutorial (05-layer-norm) and Liger-Kernel,
    written as they are: ``eps.to(tl.float32)`` on a float argument, libdevice ``rsqrt``, ``tl.sum``
    (run through ``kcert.adapters.triton.interpreter_compat``). The float64 rung is refused (a float32
    output), so the ladder has the float32 rung alone.

    Math: ``(x - mean) / sqrt(var + eps) w + b`` with two-pass float32 statistics: the same function.
    """
    base = N.LAYERNORM.case("triton_float32_layer_norm", N.layer_norm, dtype=F32, shape=TRITON_NORM_SHAPE)
    return _triton_case("triton_float32_layer_norm", base, _triton_layer_norm)


@_register("negative", "LayerNorm with eps dropped (a dropped term), Triton float32 (interpreter)", TRITON_UNAVAILABLE,
           replicates=128, expect="FAIL")
def triton_float32_layer_norm_drops_eps() -> Case:
    """``triton_float32_layer_norm`` computing ``1 / sqrt(var)`` instead of ``1 / sqrt(var + eps)``.

    Source: the dropped-term class (``custom_op_numba_layer_norm_drops_eps`` in a float32 Triton kernel).
    Math: a relative change of ``eps / (2 var)``, 5e-6 at unit variance: about 40 float32 ULPs, 1/1600
    of a bf16 ULP. One rung (float32 outputs).
    """
    base = N.LAYERNORM.case("triton_float32_layer_norm_drops_eps", N.layer_norm, dtype=F32, shape=TRITON_NORM_SHAPE)
    return _triton_case("triton_float32_layer_norm_drops_eps", base, _triton_layer_norm_drops_eps)


def _triton_cross_entropy(logits, labels, smooth_over_others=False):
    return K.triton_kernels()["cross_entropy"](logits, labels, ignore_index=L.IGNORE_INDEX,
                                               label_smoothing=LABEL_SMOOTHING, smooth_over_others=smooth_over_others)


def _triton_cross_entropy_over_others(logits, labels):
    return _triton_cross_entropy(logits, labels, smooth_over_others=True)


def _cross_entropy_case(name: str, launch) -> Case:
    ref = functools.partial(L.cross_entropy, label_smoothing=LABEL_SMOOTHING)
    base = L.CROSS_ENTROPY.case(name, launch, ref=ref, dtype=F32, **CE_SHAPE)
    return _triton_case(name, base, launch)


@_register("positive", "Triton cross entropy with label smoothing, float32 loss for any input (interpreter)",
           TRITON_UNAVAILABLE, replicates=128, expect="PASS")
def triton_float32_cross_entropy() -> Case:
    """A Triton cross entropy with label smoothing 0.1 that returns a float32 loss whatever the logits'
    dtype, against ``F.cross_entropy(..., label_smoothing=0.1)`` (token mean over non-ignored tokens).

    Source: Liger-Kernel's cross-entropy forward (one program per token: max, logsumexp, the label's
    logit, the smoothing term ``ls * lse - (ls / V) * sum(z)``), float32 inside, float32 losses. The
    float64 rung is refused (a float32 loss for float64 logits).

    Math: ``(1 - ls) (lse - z_y) + ls (lse - mean(z))``: PyTorch's target ``(1 - ls) one_hot + ls / V``.
    """
    return _cross_entropy_case("triton_float32_cross_entropy", _triton_cross_entropy)


@_register("negative", "k2-fsa/icefall #107 (label smoothing over K - 1 classes, not K), Triton float32 cross entropy",
           TRITON_UNAVAILABLE, replicates=128, expect="FAIL")
def triton_float32_cross_entropy_smoothing_over_others() -> Case:
    """``triton_float32_cross_entropy`` spreading the smoothing mass over the V - 1 other classes
    (``ls / (V - 1)`` each, the label getting ``1 - ls``) where PyTorch spreads it over all V.

    Source: k2-fsa/icefall issue #107 (icefall's LabelSmoothing, from ESPnet, uses ``K - 1`` and does not
    match PyTorch's ``label_smoothing``; fastai PR #1814 fixed the same mix-up). Math: the loss changes by
    ``ls / (V - 1) (mean_c(lse - z_c) - (lse - z_y))`` per token: with V = 1024 and the catalogue's LM
    logits (the target's logit raised by up to 3 with context) about 8e-6 of the token-mean loss over 64
    positions, some 65 float32 ULPs, 1/1000 of a bf16 ULP. One rung (a float32 loss for any input): the float32 rung alone must see it.
    """
    return _cross_entropy_case("triton_float32_cross_entropy_smoothing_over_others", _triton_cross_entropy_over_others)


# --- a fixed float32 internal precision: RoPE at long positions --------------------------------------------


def rope_cos_sin(position_ids: torch.Tensor, dtype: torch.dtype, head_dim: int = R.LLAMA2.head_dim,
                 base: float = R.LLAMA2.base) -> tuple[torch.Tensor, torch.Tensor]:
    """A rotary module computing in ``dtype``: ``inv_freq = base^(-2i/d)``, angles ``position *
    inv_freq``, their cos and sin, all in ``dtype`` (float32 angles up to 4096 rad are rounded by up to
    2.4e-4 rad). ``(batch, seq, d/2)``."""
    inv_freq = 1.0 / base ** (torch.arange(0, head_dim, 2, dtype=dtype, device=position_ids.device) / head_dim)
    angles = position_ids.to(dtype)[..., None] * inv_freq
    return angles.cos(), angles.sin()


def rope_in_input_precision(q, k, position_ids):
    """The NeoX RoPE of :func:`rope_cos_sin`'s tables in the input's dtype (torch, ``x cos +
    rotate_half(x) sin``)."""
    cos, sin = rope_cos_sin(position_ids, q.dtype, q.shape[-1])
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return R.apply_rotary_neox(q, cos, sin), R.apply_rotary_neox(k, cos, sin)


def _triton_rope(q, k, position_ids):
    rope = K.triton_kernels()["rope"]
    cos, sin = rope_cos_sin(position_ids, q.dtype, q.shape[-1])  # the wrapper, in the rung's precision
    return rope(q, cos, sin), rope(k, cos, sin)


@_register("positive", "Triton RoPE computing in float32 whatever its inputs, positions to 4096 (interpreter)",
           TRITON_UNAVAILABLE, replicates=128, expect="PASS")
def triton_float32_rope_long_positions() -> Case:
    """A NeoX RoPE whose wrapper builds cos/sin in the inputs' precision and whose Triton kernel
    rotates in float32 (``.to(tl.float32)``) and stores in the inputs' dtype, against the same rotation
    in torch in the inputs' precision, at positions up to 4096 (Llama 2, head_dim 128).

    Source: the rotary kernels of Liger-Kernel and flash-linear-attention (cos/sin from the model's
    rotary module, a Triton kernel that loads q, k, cos, sin and rotates them). Correct, with a fixed
    internal precision: at the float32 rung both sides carry the rounding of angles up to 4096 rad
    (~6e-5 of the output's peak, bitwise-equal tables on both sides); at the float64 rung the tables are
    exact but the kernel still rotates in float32 (~1e-7), where ref in float64 is exact. Judged against
    float64's yardstick it looks like a floor; it is float32 arithmetic, and must not FAIL.

    Math: ``(x1 cos - x2 sin, x2 cos + x1 sin)`` per frequency pair: the same function.
    """
    base = Case(name="triton_float32_rope_long_positions", ref=rope_in_input_precision, prod=_triton_rope,
                inputs=R.rope_inputs(seq=16, head_dim=R.LLAMA2.head_dim, high=ROPE_CONTEXT), dtype=F32,
                buckets=R.position_dim_buckets(R.block_edges(ROPE_CONTEXT), R.LLAMA2.head_dim),
                output_names=("q_embed", "k_embed"),
                description="NeoX RoPE, Llama 2 frequencies in the inputs' precision, positions to 4096")
    return _triton_case("triton_float32_rope_long_positions", base, _triton_rope)
