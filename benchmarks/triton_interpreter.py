"""Liger-Kernel's Triton kernels in triton's CPU interpreter, as shipped and inside
``kcert.adapters.triton.interpreter_compat`` (docs/adapters.md, "Third-party kernels in the interpreter").

Each kernel runs forward and backward once in float32 on small shapes; the table says whether it ran,
the first error if not (with the file and line where it was raised), and the largest absolute
difference of the forward output from its torch reference. Then the cost of the patches: the opaque
control ``triton_rms_norm``'s launch (which runs as shipped) called with and without them, alternately,
15 times each: the median times, their ratio, and whether the outputs are bitwise equal.

Run: TRITON_INTERPRET=1 python benchmarks/triton_interpreter.py   (needs kcert[opaque]: triton, liger-kernel)
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
import traceback

os.environ.setdefault("TRITON_INTERPRET", "1")

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction  # noqa: E402
from liger_kernel.ops.dyt import LigerDyTFunction  # noqa: E402
from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction  # noqa: E402
from liger_kernel.ops.geglu import LigerGELUMulFunction  # noqa: E402
from liger_kernel.ops.kl_div import LigerKLDivLossFunction  # noqa: E402
from liger_kernel.ops.layer_norm import LigerLayerNormFunction  # noqa: E402
from liger_kernel.ops.rms_norm import LigerRMSNormFunction  # noqa: E402
from liger_kernel.ops.rope import LigerRopeFunction  # noqa: E402
from liger_kernel.ops.softmax import LigerSoftmaxFunction  # noqa: E402
from liger_kernel.ops.swiglu import LigerSiLUMulFunction  # noqa: E402

from kcert.adapters.triton import interpreter_compat, triton_prod  # noqa: E402
from kcert.controls import opaque  # noqa: E402


def _leaf(*shape, g):
    return torch.randn(*shape, generator=g).requires_grad_(True)


def kernels(g: torch.Generator) -> dict:
    """name -> (a function returning the forward output from fresh inputs, its torch reference or None)."""
    x, w, b = _leaf(4, 64, g=g), _leaf(64, g=g), _leaf(64, g=g)
    a, up = _leaf(4, 64, g=g), _leaf(4, 64, g=g)
    logits, target = _leaf(8, 100, g=g), torch.randint(0, 100, (8,), generator=g)
    h, head = _leaf(8, 32, g=g), _leaf(100, 32, g=g)
    q, k = _leaf(1, 2, 4, 16, g=g), _leaf(1, 1, 4, 16, g=g)
    angles = torch.arange(4.0)[:, None] * torch.rand(8, generator=g)
    cos, sin = torch.cat([angles.cos()] * 2, -1)[None], torch.cat([angles.sin()] * 2, -1)[None]
    alpha = torch.tensor(0.5, requires_grad=True)
    p = torch.softmax(torch.randn(8, 100, generator=g), -1)

    def rms(x, w, offset):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * (offset + w)

    return {
        "RMSNorm (llama)": (lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False), lambda: rms(x, w, 0)),
        "RMSNorm (gemma)": (lambda: LigerRMSNormFunction.apply(x, w, 1e-6, 1.0, "gemma", False), lambda: rms(x, w, 1)),
        "LayerNorm": (lambda: LigerLayerNormFunction.apply(x, w, b, 1e-5), lambda: F.layer_norm(x, (64,), w, b, 1e-5)),
        "SwiGLU": (lambda: LigerSiLUMulFunction.apply(a, up), lambda: F.silu(a) * up),
        "GeGLU": (lambda: LigerGELUMulFunction.apply(a, up), lambda: F.gelu(a, approximate="tanh") * up),
        "cross entropy": (lambda: LigerCrossEntropyFunction.apply(logits.clone(), target, None, -100, 0.0, 0.1,
                                                                  "mean")[0],
                          lambda: F.cross_entropy(logits, target, label_smoothing=0.1)),
        "fused linear cross entropy": (lambda: LigerFusedLinearCrossEntropyFunction.apply(h, head, target, None, None,
                                                                                          -100, 0.0, 0.1, "mean")[0],
                                       lambda: F.cross_entropy(h @ head.T, target, label_smoothing=0.1)),
        "softmax": (lambda: LigerSoftmaxFunction.apply(x), lambda: torch.softmax(x, -1)),
        "DyT (autotuned)": (lambda: LigerDyTFunction.apply(x, alpha, w, b), lambda: torch.tanh(alpha * x) * w + b),
        "KL divergence": (lambda: LigerKLDivLossFunction.apply(torch.log_softmax(logits, -1), p, "batchmean"),
                          lambda: F.kl_div(torch.log_softmax(logits, -1), p, reduction="batchmean")),
        "RoPE": (lambda: LigerRopeFunction.apply(q, k, cos, sin)[0], None),
    }


def _failure(exc: Exception) -> str:
    frame = traceback.extract_tb(exc.__traceback__)[-1]
    text = str(exc).splitlines()[0][:90]
    return f"**{type(exc).__name__}**: {text} ({os.path.basename(frame.filename)}:{frame.lineno})"


def run(forward, reference, compat: bool) -> str:
    context = interpreter_compat() if compat else contextlib.nullcontext()
    with context:
        try:
            out = forward()
        except Exception as exc:  # noqa: BLE001 - the table reports every failure
            return _failure(exc)
        diff = "" if reference is None else f", max |diff| {float((out - reference()).abs().max()):.1e}"
        try:
            out.sum().backward()
        except Exception as exc:  # noqa: BLE001
            return f"forward runs{diff}; backward: {_failure(exc)}"
    return f"runs{diff}"


def main() -> None:
    print(f"triton {triton.__version__}, numpy {np.__version__}, torch {torch.__version__}; float32, "
          "forward and backward once\n")
    print("| kernel | as shipped | inside interpreter_compat() |")
    print("| --- | --- | --- |")
    for name in kernels(torch.Generator()):
        shipped = run(*kernels(torch.Generator().manual_seed(0))[name], compat=False)
        patched = run(*kernels(torch.Generator().manual_seed(0))[name], compat=True)
        print(f"| {name} | {shipped} | {patched} |")
    overhead()


def overhead(calls: int = 15) -> None:
    case = opaque.triton_rms_norm()
    patched, shipped = triton_prod(case.prod.fn, compat=True), triton_prod(case.prod.fn, compat=False)
    g = torch.Generator().manual_seed(0)
    kwargs = {n: p.sample(g, "cpu", torch.float32) for n, p in {**case.inputs, **case.weights}.items()}
    equal = torch.equal(patched(**kwargs), shipped(**kwargs))
    times: dict = {patched: [], shipped: []}
    for _ in range(calls):
        for fn in (patched, shipped):
            start = time.perf_counter()
            fn(**kwargs)
            times[fn].append(time.perf_counter() - start)
    on, off = statistics.median(times[patched]), statistics.median(times[shipped])
    print(f"\ntriton_rms_norm launch, median of {calls}: inside interpreter_compat() {on * 1e3:.0f} ms, as shipped "
          f"{off * 1e3:.0f} ms, ratio {on / off:.2f}; outputs bitwise equal: {equal}")


if __name__ == "__main__":
    main()
