"""Opaque controls (family ``opaque``): production kernels real mode cannot see into, certified with
no ``prod_math``. Their algebra gate rests on the precision ladder (docs/method.md, Gate 1, "The
precision ladder"): prod runs at every precision it accepts and its error against the float64 oracle
must fall like rounding.

The kernels (controls/opaque_kernels.py): ``torch.library`` custom ops with numpy and numba bodies, a
C++ operator registered with ``TORCH_LIBRARY`` and built by ``torch.utils.cpp_extension.load_inline``,
Triton kernels under Triton's CPU interpreter (float32 and float64 only: the adapter refuses low
precision there), and a ``torch.compile``'d forward and backward (``kcert.gradients``: the compiled
backward reads ``untyped_storage``, which real mode refuses). Positives must PASS; the negatives are
algebraic defects, most of them far below one bf16 ULP, which only the ladder sees.

A control whose toolchain is missing here (no C++ compiler or ninja, no numba, no triton) is not
registered; ``kcert.controls.registry.not_runnable()`` and ``kcert controls`` say why.

Measured (seed 0, kcert defaults, torch 2.13.0 CPU, triton 3.6.0, numba 0.68.1, one thread): in each
docstring; tests/test_controls_opaque.py checks the verdicts and the algebra level.
"""

from __future__ import annotations

import dataclasses
import functools

import torch

from .. import backward as kcert_backward
from ..case import Case
from ..catalog import activations as A
from ..catalog import norms as N
from ..catalog import softmax as S
from . import opaque_kernels as K
from .registry import negative, positive, unavailable

FAMILY = "opaque"
CPP_UNAVAILABLE = K.cpp_unavailable()
TRITON_UNAVAILABLE = None if K.TRITON else "triton is not installed: pip install 'kcert[opaque]'"
NUMBA_UNAVAILABLE = None if K.NUMBA else "numba is not installed: pip install 'kcert[fast]'"

NORM_SHAPE = (1, 64, 512)
TRITON_SHAPE = (1, 8, 128)  # the interpreter runs a program per row in numpy: keep it small


def _register(kind, source: str, missing: str | None, **kwargs):
    """Register when the toolchain is here; otherwise record why not (registry.not_runnable)."""
    decorator = (positive if kind == "positive" else negative)(family=FAMILY, source=source, **kwargs)

    def wrap(fn):
        if missing is None:
            return decorator(fn)
        unavailable(fn.__name__, FAMILY, missing)
        return fn

    return wrap


def _with(case: Case, **fields) -> Case:
    return dataclasses.replace(case, **fields)


# --- numpy custom ops ------------------------------------------------------------------------------


@_register("positive", "torch.library custom op, numpy body (float32 inside), vs F.rms_norm semantics", None,
           expect="PASS", quick=True)
def custom_op_numpy_rms_norm() -> Case:
    """RMSNorm as a ``torch.library`` custom op with a numpy body, against the catalogue's RMSNorm.

    Source: the way kernels are wrapped for PyTorch 2 (``torch.library.custom_op`` with a fake
    implementation), the body in numpy: float32 inside whatever the input (float64 inputs too), the
    mean square by numpy's pairwise sum, the gain applied before the division, one rounding to the
    input's dtype. Real mode refuses it (a custom op's body is invisible), so the algebra gate rests on
    the precision ladder: bfloat16, float32 and float64 inputs; the float64 rung is saturated (float32
    inside), the ladder is judged at float32.

    Why benign: the same real function with another summation and rounding order.
    """
    base = N.RMSNORM.case("custom_op_numpy_rms_norm", functools.partial(K.rms_norm_numpy, eps=N.LLAMA_EPS,
                                                                         eps_on_rms=False), shape=NORM_SHAPE)
    return base


@_register("negative", "gpt-neox #1342 (eps on the RMS), as a numpy custom op", None, replicates=256,
           expect="FAIL", quick=True)
def custom_op_numpy_eps_on_rms() -> Case:
    """RMSNorm with eps added to the RMS, ``x / (sqrt(ms) + eps)``, as an opaque numpy custom op.

    Source: EleutherAI/gpt-neox PR #1342 (GPT-NeoX's RMSNorm added eps to the RMS, unlike Llama's
    ``x / sqrt(ms + eps)``); the kernel is ``custom_op_numpy_rms_norm`` with that one change.
    Math: a relative change of about eps/2 = 5e-6 at unit RMS: 1/800 of a bf16 unit roundoff, invisible
    to the bias and variance gates. The ladder sees a float32 error that stops at that floor.
    """
    return N.RMSNORM.case("custom_op_numpy_eps_on_rms", functools.partial(K.rms_norm_numpy, eps=N.LLAMA_EPS,
                                                                           eps_on_rms=True), shape=NORM_SHAPE)


@_register("positive", "a kernel built for bfloat16 only (numpy custom op), untested algebra accepted", None,
           expect="PASS")
def custom_op_bfloat16_only_accepted() -> Case:
    """SwiGLU as a numpy custom op that accepts bfloat16 only, with the untested algebra accepted.

    Source: kernels built for one format (a bf16 tensor-core kernel raises on float32). The precision
    ladder has one rung, so no algebra test can run; the case sets ``accept_untested_algebra=True``
    (what ``kcert certify --accept-untested-algebra`` does), so the verdict rests on the bias and
    variance gates and the certificate states the limit.

    Why benign: ``silu(gate) * up`` in float32 with one rounding, against the catalogue's two-rounding
    SwiGLU (prod is the more accurate side).
    """
    base = A.SWIGLU.case("custom_op_bfloat16_only_accepted", K.swiglu_numpy_bf16, tokens=64, hidden=512)
    return _with(base, accept_untested_algebra=True)


# --- numba custom op ---------------------------------------------------------------------------------


@_register("positive", "torch.library custom op, numba body (two-pass, sequential sums)", NUMBA_UNAVAILABLE,
           expect="PASS")
def custom_op_numba_layer_norm() -> Case:
    """LayerNorm as a custom op with a numba body, against the catalogue's LayerNorm.

    Source: a CPU kernel written in numba (``numba.njit``), wrapped with ``torch.library.custom_op``:
    two passes with sequential sums, computed in float32 for bf16 and float32 inputs and in float64
    for float64 inputs, one rounding. Its float64 rung computes in float64, so the ladder is judged at
    float64.

    Why benign: the same statistics summed in another order.
    """
    return N.LAYERNORM.case("custom_op_numba_layer_norm", functools.partial(K.layer_norm_numba, eps=N.LAYERNORM_EPS,
                                                                            drop_eps=False), shape=NORM_SHAPE)


@_register("negative", "LayerNorm with eps dropped (numba custom op)", NUMBA_UNAVAILABLE, replicates=256,
           expect="FAIL")
def custom_op_numba_layer_norm_drops_eps() -> Case:
    """LayerNorm with a dropped term: ``1 / sqrt(var)`` instead of ``1 / sqrt(var + eps)``.

    Source: the dropped-term class of algebraic defects (a kernel that forgets eps); the kernel is
    ``custom_op_numba_layer_norm`` with that one change.
    Math: relative change ``eps / (2 var)``, 5e-6 at unit variance: far below a bf16 ULP.
    """
    return N.LAYERNORM.case("custom_op_numba_layer_norm_drops_eps",
                            functools.partial(K.layer_norm_numba, eps=N.LAYERNORM_EPS, drop_eps=True),
                            shape=NORM_SHAPE)


# --- C++ operator ----------------------------------------------------------------------------------------


def _cpp(name: str, *args):
    def kernel(x):
        return getattr(K.cpp_ops(), name)(x, *args)

    kernel.__name__ = f"cpp_{name}"
    return kernel


@_register("positive", "C++ operator (TORCH_LIBRARY, load_inline), GELU erf vs F.gelu", CPP_UNAVAILABLE,
           expect="PASS")
def cpp_extension_gelu_erf() -> Case:
    """Exact GELU as a C++ operator built with ``load_inline``, against ``F.gelu``.

    Source: a C++ extension operator (``TORCH_LIBRARY`` + ``AT_DISPATCH_FLOATING_TYPES_AND2``, opmath
    accumulation: float for bf16/half/float, double for double) computing ``x/2 (1 + erf(x/sqrt 2))``
    with ``std::erf``; PyTorch's CPU GELU uses its own vectorised erf.

    Why benign: the same real function; different erf implementations.
    """
    return A.GELU_ERF.case("cpp_extension_gelu_erf", _cpp("gelu_erf"))


@_register("negative", "GELU tanh approximation where erf is meant (C++ operator)", CPP_UNAVAILABLE,
           replicates=256, expect="FAIL")
def cpp_extension_gelu_tanh_for_erf() -> Case:
    """The tanh approximation of GELU served where the exact erf form is the reference (C++ operator).

    Source: the tanh-vs-erf GELU confusion (transformers PR #29402 is the reverse direction); the
    kernel is the C++ ``gelu_tanh`` with the standard constants.
    Math: the two functions differ by up to ~5e-4 (|x| ~ 2), about 1e-4 relative to the output's peak:
    below a bf16 ULP element by element.
    """
    return A.GELU_ERF.case("cpp_extension_gelu_tanh_for_erf",
                           _cpp("gelu_tanh", A.GELU_TANH_C, A.GELU_TANH_A))


@_register("negative", "GELU tanh with sqrt(2/pi) truncated to 0.7978 (C++ operator)", CPP_UNAVAILABLE,
           replicates=256, expect="FAIL")
def cpp_extension_gelu_wrong_constant() -> Case:
    """The tanh GELU with ``sqrt(2/pi)`` written as 0.7978 (a wrong constant), against ``F.gelu(tanh)``.

    Source: the wrong-constant class (a truncated literal in a kernel); kernel ``gelu_tanh`` of the C++
    operator with ``c = 0.7978`` instead of 0.7978845608...
    Math: a relative change of the tanh argument of 1.1e-4, a few 1e-6 of the output's peak.
    """
    return A.GELU_TANH.case("cpp_extension_gelu_wrong_constant", _cpp("gelu_tanh", 0.7978, A.GELU_TANH_A))


# --- Triton (CPU interpreter, float32) -------------------------------------------------------------------


def _triton_case(name: str, base: Case, launch) -> Case:
    from ..adapters import triton as kt

    K.triton_kernels()  # sets TRITON_INTERPRET=1 before triton is imported
    return kt.triton_case(name, base.ref, launch, dtype=torch.float32, inputs=dict(base.inputs),
                          weights=dict(base.weights), buckets=base.buckets, description=base.description)


def _triton_rms_norm(x, w, eps_on_rms=False):
    return K.triton_kernels()["rms_norm"](x, w, N.LLAMA_EPS, eps_on_rms)


def _triton_rms_norm_eps_on_rms(x, w):
    return _triton_rms_norm(x, w, eps_on_rms=True)


def _triton_softmax_poly_exp(x):
    return K.triton_kernels()["softmax"](x, poly_exp=True)


@_register("positive", "Triton RMSNorm (interpreter, float32)", TRITON_UNAVAILABLE, replicates=128,
           expect="PASS")
def triton_rms_norm() -> Case:
    """RMSNorm as a Triton kernel (one program per row, arithmetic in the loaded dtype), in Triton's
    CPU interpreter in float32, against the catalogue's RMSNorm.

    Source: the row-per-program RMSNorm of the Triton tutorials and Liger-Kernel, without the float32
    upcast (it computes in its input dtype). In the interpreter the adapter refuses bf16 and float16, so
    the ladder's rungs are float32 and float64, and it is judged at float64.

    Why benign: the same real function; ``tl.sum``'s tree order.
    """
    base = N.RMSNORM.case("triton_rms_norm", N.rms_norm, dtype=torch.float32, shape=TRITON_SHAPE)
    return _triton_case("triton_rms_norm", base, _triton_rms_norm)


@_register("negative", "gpt-neox #1342 (eps on the RMS), as a Triton kernel (interpreter, float32)",
           TRITON_UNAVAILABLE, replicates=128, expect="FAIL")
def triton_rms_norm_eps_on_rms() -> Case:
    """The Triton RMSNorm with eps added to the RMS (gpt-neox #1342), float32 in the interpreter."""
    base = N.RMSNORM.case("triton_rms_norm_eps_on_rms", N.rms_norm, dtype=torch.float32, shape=TRITON_SHAPE)
    return _triton_case("triton_rms_norm_eps_on_rms", base, _triton_rms_norm_eps_on_rms)


@_register("negative", "softmax with an approximate exp (degree-4 polynomial), Triton interpreter",
           TRITON_UNAVAILABLE, replicates=128, expect="FAIL")
def triton_softmax_approximate_exp() -> Case:
    """A Triton softmax whose exp is ``2^floor(t)`` times a degree-4 polynomial of the fraction.

    Source: the approximate-exp class (fast-math exponentials in fused kernels); the kernel is the
    row-per-program Triton softmax with its ``tl.exp`` replaced.
    Math: the polynomial's relative error is up to ~4e-5: an exp that is not the exponential.
    """
    base = S.SOFTMAX.case("triton_softmax_approximate_exp", S.softmax, dtype=torch.float32, batch=1, heads=1,
                          queries=8, seq=128)
    return _triton_case("triton_softmax_approximate_exp", base, _triton_softmax_poly_exp)


# --- torch.compile forward and backward ------------------------------------------------------------------


def _rms_norm_eps_on_rms(x, w, eps=N.LLAMA_EPS):
    x32 = x.float()
    return (x32 / (x32.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w.float()).to(x.dtype)


@_register("negative", "gpt-neox #1342 compiled: torch.compile forward and backward (kcert.gradients)", None,
           replicates=256, expect="FAIL")
def compiled_gradients_eps_on_rms() -> Case:
    """Gradients of RMSNorm, eager reference vs a ``torch.compile``'d RMSNorm with eps on the RMS.

    Source: gpt-neox #1342's defect in a compiled training kernel: AOTAutograd traces the backward and
    inductor compiles forward and backward; the compiled backward reads ``untyped_storage``, so real
    mode cannot run prod and the algebra gate rests on the ladder (bfloat16 and float32: compiling the
    backward costs seconds per dtype on a CPU). The forward output and both gradients carry the ~5e-6
    relative floor.
    """
    compiled = torch.compile(_rms_norm_eps_on_rms, backend="inductor", dynamic=False)

    def prod(x, w):
        return compiled(x, w)

    base = N.RMSNORM.case("compiled_gradients_eps_on_rms", prod, shape=(1, 32, 256))
    return kcert_backward.gradients(_with(base, prod_precisions=(torch.bfloat16, torch.float32)),
                                    name="compiled_gradients_eps_on_rms")
