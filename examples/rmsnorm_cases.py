"""Example case file: `kcert certify examples/rmsnorm_cases.py`.

Three cases a team moving a Llama/Gemma checkpoint to fused kernels would write.
"""

import torch

import kcert

EPS = 1e-6


def hf_llama_rmsnorm(hidden_states, weight):
    """HF transformers' LlamaRMSNorm forward: float32 statistics, cast back, then the bf16 gain."""
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return weight * x.to(hidden_states.dtype)


def fused_rmsnorm(hidden_states, weight):
    """A production kernel: PyTorch's fused rms_norm in float32, one rounding at the end."""
    x = hidden_states.float()
    return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight.float(), eps=EPS).to(hidden_states.dtype)


llama = kcert.Case(
    name="llama_rmsnorm_fused",
    ref=hf_llama_rmsnorm,
    prod=fused_rmsnorm,
    inputs={"hidden_states": kcert.Gaussian((4, 128, 512), shift=0.1)},
    weights={"weight": kcert.Gaussian((512,), shift=1.0, std=0.05)},   # trained gains sit near 1
    buckets=kcert.Axes(-1),
    dtype=torch.bfloat16,
    description="HF LlamaRMSNorm vs torch rms_norm (prod rounds once: expected PASS, bias is ref's)",
)


def gemma_rmsnorm_float32(hidden_states, weight):
    x = hidden_states.float()
    x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    return x * (1.0 + weight.float())


def gemma_rmsnorm(hidden_states, weight):
    return gemma_rmsnorm_float32(hidden_states, weight).to(hidden_states.dtype)


def gemma_rmsnorm_bf16_gain(hidden_states, weight):
    x = hidden_states.float()
    x = (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)).to(hidden_states.dtype)
    return x * (1.0 + weight).to(hidden_states.dtype)


gemma = kcert.Case(
    name="gemma_rmsnorm_bf16_gain",
    ref=gemma_rmsnorm,
    prod=gemma_rmsnorm_bf16_gain,
    inputs={"hidden_states": kcert.Gaussian((2, 64, 256), shift=0.1)},
    weights={"weight": kcert.Gaussian((256,), std=0.02)},             # Gemma stores w ~ 0, applies 1 + w
    description="(1 + w) formed in bf16: expected FAIL in the bias gate",
)


def truncating_cast(hidden_states, weight):
    """An opaque kernel: rounds float32 to bf16 by truncating bits, as some hand-written kernels do.
    Real mode cannot follow bit manipulation, so we tell kcert what it computes in real numbers."""
    y = gemma_rmsnorm_float32(hidden_states, weight)
    bits = y.view(torch.int32) & -65536  # keep sign, exponent and the top 7 mantissa bits
    return bits.view(torch.float32).to(hidden_states.dtype)


opaque = kcert.Case(
    name="gemma_rmsnorm_truncating_cast",
    ref=gemma_rmsnorm,
    prod=truncating_cast,
    prod_math=gemma_rmsnorm,   # its real-number definition: the algebra gate can run
    inputs={"hidden_states": kcert.Gaussian((2, 64, 256), shift=0.1)},
    weights={"weight": kcert.Gaussian((256,), std=0.02)},
    description="truncation instead of round-to-nearest-even: a coherent shrink towards zero",
)
