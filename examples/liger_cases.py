"""Third-party Triton kernels certified against their Hugging Face / torch references: Liger-Kernel.

`pip install "kcert[opaque]" liger-kernel==0.8.5` (on a CPU-only machine `pip install --no-deps
liger-kernel==0.8.5`, so that it does not pull a CUDA torch), then

    TRITON_INTERPRET=1 kcert certify examples/liger_cases.py --replicates 128

On a CPU the kernels run in Triton's interpreter in float32 (kcert refuses bfloat16 there: the
interpreter computes it wrongly); on a GPU, `kcert certify examples/liger_cases.py --device cuda`
runs them in bfloat16. Liger's kernels use what triton 3.6's interpreter fails on as shipped (float
arguments `eps.to(tl.float32)`, libdevice `rsqrt` and `tanh`, loops with tensor bounds under numpy
>= 2.4): `kcert.adapters.triton.triton_case` runs each launch inside `interpreter_compat()`, which
patches those (docs/adapters.md, "Third-party kernels in the interpreter").

Cases (forward, then gradients through Liger's own backward kernels, `kcert.gradients`):

- `liger_rms_norm_llama`, `liger_rms_norm_llama_grad`: `LigerRMSNormFunction` (casting mode "llama")
  against transformers' `LlamaRMSNorm`.
- `liger_rms_norm_gemma`: casting mode "gemma", offset 1, against `GemmaRMSNorm` (zero-centred gains).
- `liger_swiglu`, `liger_swiglu_grad`: `LigerSiLUMulFunction` against `ACT2FN["silu"](gate) * up`
  (LlamaMLP's core).
- `liger_cross_entropy_grad`: `LigerCrossEntropyFunction` with label smoothing 0.1 and ignore_index
  padding against `F.cross_entropy`: the token-mean loss and its gradient with respect to the logits.
- `liger_fused_linear_cross_entropy_grad`: `LigerFusedLinearCrossEntropyFunction` (the LM head fused
  with the loss, chunked, never materialising the logits) against `F.cross_entropy(h @ W.T)`: the loss
  and its gradients with respect to the hidden states and the head's weight.

Each launch clones the tensors Liger writes into (the cross-entropy kernels store the gradient in the
logits' memory; the RMSNorm backward overwrites the upstream gradient unless `in_place=False`): a prod
must not change its inputs, which kcert hands to ref and the oracle as well.
"""

import dataclasses
import os

import torch
import torch.nn.functional as F
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction
from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction
from liger_kernel.ops.rms_norm import LigerRMSNormFunction
from liger_kernel.ops.swiglu import LigerSiLUMulFunction
from transformers.activations import ACT2FN
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.llama.modeling_llama import LlamaRMSNorm

import kcert
from kcert.adapters import hf
from kcert.adapters.triton import triton_case, triton_prod
from kcert.catalog import activations as A
from kcert.catalog import losses as L
from kcert.catalog import norms as N

ON_GPU = torch.cuda.is_available() and not os.environ.get("TRITON_INTERPRET")
DTYPE = torch.bfloat16 if ON_GPU else torch.float32
HIDDEN = 4096 if ON_GPU else 128  # the interpreter runs one numpy program per row: keep it small
TOKENS = 2048 if ON_GPU else 16
VOCAB = 32000 if ON_GPU else 256
LABEL_SMOOTHING = 0.1


def _triton(base: kcert.Case, launch, description: str) -> kcert.Case:
    return triton_case(base.name, base.ref, launch, dtype=DTYPE, inputs=dict(base.inputs),
                       weights=dict(base.weights), buckets=base.buckets, output_names=base.output_names,
                       description=description)


def _gradients(case: kcert.Case, **kwargs) -> kcert.Case:
    """Forward and gradients; the backward kernels run after the forward returned, so the gradient
    case's prod is wrapped again to run inside the interpreter patches as a whole."""
    grad = kcert.gradients(case, name=case.name + "_grad", **kwargs)
    return dataclasses.replace(grad, prod=triton_prod(grad.prod, name=grad.name))


# --- RMSNorm ------------------------------------------------------------------------------------------


def liger_rms_norm(x, w, *, eps, offset, mode):
    return LigerRMSNormFunction.apply(x, w, eps, offset, mode, False)


def _rms_norm_llama(x, w):
    return liger_rms_norm(x, w, eps=N.LLAMA_EPS, offset=0.0, mode="llama")


def _rms_norm_gemma(x, w):
    return liger_rms_norm(x, w, eps=N.GEMMA_EPS, offset=1.0, mode="gemma")


def _hf_norm(module):
    return hf.module_kernel(module, inputs=("x",), params={"w": "weight"}, name=type(module).__name__)


liger_rms_norm_llama = _triton(
    N.LLAMA_RMSNORM.case("liger_rms_norm_llama", _rms_norm_llama, ref=_hf_norm(LlamaRMSNorm(HIDDEN, N.LLAMA_EPS)),
                         dtype=DTYPE, shape=(1, TOKENS, HIDDEN)),
    _rms_norm_llama, "Liger RMSNorm (llama casting) vs HF LlamaRMSNorm")
liger_rms_norm_llama_grad = _gradients(liger_rms_norm_llama)

liger_rms_norm_gemma = _triton(
    N.GEMMA_RMSNORM.case("liger_rms_norm_gemma", _rms_norm_gemma, ref=_hf_norm(GemmaRMSNorm(HIDDEN, N.GEMMA_EPS)),
                         dtype=DTYPE, shape=(1, TOKENS, HIDDEN)),
    _rms_norm_gemma, "Liger RMSNorm (gemma casting, offset 1) vs HF GemmaRMSNorm")


# --- SwiGLU -------------------------------------------------------------------------------------------


def liger_swiglu_launch(gate, up):
    return LigerSiLUMulFunction.apply(gate, up)


def hf_swiglu(gate, up):
    """LlamaMLP's core: ``act_fn(gate_proj(x)) * up_proj(x)`` with ``act_fn = ACT2FN["silu"]``."""
    return ACT2FN["silu"](gate) * up


liger_swiglu = _triton(
    A.SWIGLU.case("liger_swiglu", liger_swiglu_launch, ref=hf_swiglu, dtype=DTYPE, tokens=TOKENS, hidden=HIDDEN),
    liger_swiglu_launch, "Liger SwiGLU vs HF ACT2FN['silu'](gate) * up")
liger_swiglu_grad = _gradients(liger_swiglu)


# --- cross entropy ------------------------------------------------------------------------------------


def liger_cross_entropy_launch(logits, labels):
    z = logits.reshape(-1, logits.shape[-1]).clone()  # the kernel stores d loss / d logits in its input
    return LigerCrossEntropyFunction.apply(z, labels.reshape(-1), None, L.IGNORE_INDEX, 0.0, LABEL_SMOOTHING,
                                           "mean")[0]


def torch_cross_entropy(logits, labels):
    """The loss transformers' causal-LM heads compute (``F.cross_entropy``, token mean, ignore_index)."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1),
                           ignore_index=L.IGNORE_INDEX, label_smoothing=LABEL_SMOOTHING)


liger_cross_entropy = _triton(
    L.CROSS_ENTROPY.case("liger_cross_entropy", liger_cross_entropy_launch, ref=torch_cross_entropy, dtype=DTYPE,
                         batch=2, seq=TOKENS // 2, vocab=VOCAB),
    liger_cross_entropy_launch, f"Liger cross entropy (label smoothing {LABEL_SMOOTHING}) vs F.cross_entropy")
liger_cross_entropy_grad = _gradients(liger_cross_entropy, wrt="logits",
                                      cotangent=kcert.Fixed(torch.tensor(1.0)))


# --- fused linear cross entropy -----------------------------------------------------------------------


def liger_flce_launch(h, weight, labels):
    return LigerFusedLinearCrossEntropyFunction.apply(h, weight, labels.reshape(-1), None, None, L.IGNORE_INDEX, 0.0,
                                                      LABEL_SMOOTHING, "mean")[0]


def torch_linear_cross_entropy(h, weight, labels):
    """The LM head and its loss as transformers computes them: logits = h @ W.T, then F.cross_entropy."""
    logits = F.linear(h, weight).float()
    return F.cross_entropy(logits, labels.reshape(-1), ignore_index=L.IGNORE_INDEX, label_smoothing=LABEL_SMOOTHING)


def _flce_case() -> kcert.Case:
    labels = L.padded_labels(1, 1, TOKENS, VOCAB)[0].reshape(-1)
    return triton_case(
        "liger_fused_linear_cross_entropy", torch_linear_cross_entropy, liger_flce_launch, dtype=DTYPE,
        inputs={"h": kcert.Gaussian((TOKENS, HIDDEN)), "labels": kcert.Fixed(labels)},
        weights={"weight": kcert.Gaussian((VOCAB, HIDDEN), std=HIDDEN ** -0.5)}, buckets=kcert.Axes(),
        description=f"Liger fused linear cross entropy (label smoothing {LABEL_SMOOTHING}) vs F.linear + "
                    "F.cross_entropy")


liger_fused_linear_cross_entropy_grad = _gradients(_flce_case(), wrt=("h", "weight"),
                                                   cotangent=kcert.Fixed(torch.tensor(1.0)))
