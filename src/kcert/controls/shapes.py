"""Shape controls (family ``shape``): kernel bugs that hold only at some shapes, certified at a shape that
hides them, with the shape sweep on (``Case(shapes=True)``, docs/kernelbench.md).

Seeded-bug corpora of GPU kernels report most of their bugs as shape-dependent ("correctness
illusions"): a kernel right at the shape it was tested at and wrong at others. Three such bugs, each in
blocked PyTorch code (real mode follows it, so the algebra gate sees the bug where it shows) and as a
Triton kernel in Triton's CPU interpreter (float32; the algebra gate's precision ladder sees it):

- an online softmax whose running sum is not rescaled when the running max moves: right while the row
  fits one tile (128), so certified at rows of 128;
- a tiled matmul whose accumulator is overwritten (``acc =`` for ``acc +=``): right while K fits one
  block (64), so certified at K = 64;
- a softmax whose row is padded to a power of two with 0 instead of -inf: right when the row length is
  a power of two, so certified at 128.

At the given shape all three gates pass each negative (the certificate's ``gates``); the sweep's
derived shapes (a non-power-of-two row, rows of 65, 129 and 257) FAIL it, and with them the certificate.
The positives are the same kernels without the bug, swept the same way. Measured in each docstring
(seed 0, torch 2.13.0 CPU, triton 3.6.0); tests/test_controls_shapes.py checks them.
"""

from __future__ import annotations

import importlib.util
import os

import torch
import torch.nn.functional as F

from ..case import Axes, Case, Gaussian
from .registry import negative, positive, unavailable

FAMILY = "shape"
TILE, BLOCK_K = 128, 64
ROWS, ROW = 8, 128  # the hiding shape of the softmax controls: rows of 128
M, K, N = 16, 64, 32  # the hiding shape of the matmul controls: K = 64, one block
TRITON_ROWS = 2  # the interpreter runs a program per row in numpy: keep it small
TRITON = importlib.util.find_spec("triton") is not None
TRITON_UNAVAILABLE = None if TRITON else "triton is not installed: pip install 'kcert[opaque]'"


# --- blocked PyTorch kernels ---------------------------------------------------------------------------


def online_softmax(x: torch.Tensor, rescale: bool = True, tile: int = TILE) -> torch.Tensor:
    """Softmax over the last axis in one pass of tiles (running max and running sum), then a
    normalising pass. ``rescale=False`` drops the rescaling of the running sum when the max moves."""
    n = x.shape[-1]
    m = torch.full(x.shape[:-1] + (1,), float("-inf"), dtype=x.dtype, device=x.device)
    s = torch.zeros_like(m)
    for start in range(0, n, tile):
        xt = x[..., start:start + tile]
        m_new = torch.maximum(m, xt.amax(-1, keepdim=True))
        e = torch.exp(xt - m_new).sum(-1, keepdim=True)
        s = s * torch.exp(m - m_new) + e if rescale else s + e
        m = m_new
    return torch.exp(x - m) / s


def blocked_matmul(a: torch.Tensor, b: torch.Tensor, overwrite: bool = False, block_k: int = BLOCK_K) -> torch.Tensor:
    """``a @ b`` summed over blocks of K. ``overwrite=True``: ``acc = `` for ``acc += ``."""
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=a.dtype, device=a.device)
    for k in range(0, a.shape[1], block_k):
        part = a[:, k:k + block_k] @ b[k:k + block_k]
        acc = part if overwrite else acc + part
    return acc


def padded_softmax(x: torch.Tensor, pad_zero: bool = False) -> torch.Tensor:
    """Softmax over the last axis padded to the next power of two, as a block kernel loads it; the
    padding is -inf (it drops out), or 0 with ``pad_zero`` (it enters the max and the sum)."""
    n = x.shape[-1]
    block = 1 << max(0, (n - 1).bit_length())
    fill = 0.0 if pad_zero else float("-inf")
    padded = F.pad(x, (0, block - n), value=fill)
    z = padded - padded.amax(-1, keepdim=True)
    e = torch.exp(z)
    return (e / e.sum(-1, keepdim=True))[..., :n]


def softmax(x):
    return torch.softmax(x, -1)


def matmul(a, b):
    return a @ b


def _softmax_case(name: str, prod, rows: int = ROWS, description: str = "") -> Case:
    return Case(name=name, ref=softmax, prod=prod, inputs={"x": Gaussian((rows, ROW), shift=0.1)}, buckets=Axes(-1),
                dtype=torch.float32, shapes=True, description=description)


def _matmul_case(name: str, prod, description: str = "") -> Case:
    return Case(name=name, ref=matmul, prod=prod, inputs={"a": Gaussian((M, K), shift=0.1)},
                weights={"b": Gaussian((K, N), std=K ** -0.5)}, buckets=Axes(-1), dtype=torch.float32, shapes=True,
                description=description)


SOURCE = ("seeded shape-dependent bugs of GPU kernel corpora (\"correctness illusions\"): {}; right at the "
          "hiding shape, wrong past it")


@negative(FAMILY, SOURCE.format("online softmax without the rescale of its running sum"), replicates=256,
          expect="FAIL")
def online_softmax_rescale_dropped() -> Case:
    """Online softmax (tiles of 128) that adds each tile's exponentials to the running sum without
    rescaling it when the running max moves, certified at rows of 128 (one tile: exact).

    Math: with two or more tiles the sum mixes terms scaled to different maxima; the output is off by
    the factor exp(m_new - m_old) on the earlier tiles' share, whenever a later tile holds a larger value.
    Sweep: rows of 129 and 257 FAIL (the algebra gate: a different real function there).
    """
    return _softmax_case("online_softmax_rescale_dropped",
                         lambda x: online_softmax(x, rescale=False),
                         description="online softmax in tiles of 128, running sum not rescaled; rows of 128 (one tile)")


@negative(FAMILY, SOURCE.format("a tiled matmul's accumulator overwritten (acc = for acc +=)"), replicates=256,
          expect="FAIL")
def matmul_accumulator_overwritten() -> Case:
    """A matmul summed over blocks of 64 along K that assigns each block's product to the accumulator
    instead of adding it, certified at K = 64 (one block: exact).

    Math: past one block only the last block's product remains. Sweep: K = 65, 129, 257 FAIL.
    """
    return _matmul_case("matmul_accumulator_overwritten",
                        lambda a, b: blocked_matmul(a, b, overwrite=True),
                        description="blocked matmul, blocks of 64 along K, acc overwritten; K = 64 (one block)")


@negative(FAMILY, SOURCE.format("a masked softmax load padded with 0 instead of -inf"), replicates=256,
          expect="FAIL")
def softmax_tail_padded_with_zero() -> Case:
    """A softmax that pads its row to the next power of two with 0 (a masked load's ``other=0.0``)
    instead of -inf, certified at rows of 128 (a power of two: no padding).

    Math: each padded lane adds exp(0 - max) to the denominator (and 0 enters the max). Sweep: the
    non-power-of-two row (95) and rows of 65, 129 and 257 FAIL.
    """
    return _softmax_case("softmax_tail_padded_with_zero",
                         lambda x: padded_softmax(x, pad_zero=True),
                         description="softmax padded to a power of two with 0; rows of 128 (no padding)")


@positive(FAMILY, "online softmax (tiles of 128, rescaled running sum), swept", replicates=256)
def online_softmax_swept() -> Case:
    """The online softmax with its rescale, certified at rows of 128 with the sweep: every shape passes."""
    return _softmax_case("online_softmax_swept", online_softmax, description="online softmax in tiles of 128, swept")


@positive(FAMILY, "blocked matmul (blocks of 64 along K, accumulated), swept", replicates=256)
def blocked_matmul_swept() -> Case:
    """The blocked matmul with ``acc +=``, certified at K = 64 with the sweep: every shape passes."""
    return _matmul_case("blocked_matmul_swept", blocked_matmul, description="blocked matmul, blocks of 64 along K, swept")


@positive(FAMILY, "softmax padded with -inf to a power of two, swept", replicates=256)
def padded_softmax_swept() -> Case:
    """The padded softmax with -inf padding, certified at rows of 128 with the sweep: every shape passes."""
    return _softmax_case("padded_softmax_swept", padded_softmax, description="softmax padded to a power of two with -inf, swept")


# --- the same bugs as Triton kernels (CPU interpreter, float32) ------------------------------------------


def kernels() -> dict:
    """The Triton kernels (controls/shapes_triton.py), in Triton's CPU interpreter: ``TRITON_INTERPRET=1``
    is set for the process first (triton 3.6 reads it when a kernel is decorated)."""
    os.environ["TRITON_INTERPRET"] = "1"
    from . import shapes_triton

    return shapes_triton.KERNELS


def _triton_case(name: str, base: Case, launch) -> Case:
    from ..adapters import triton as kt

    kernels()
    return kt.triton_case(name, base.ref, launch, dtype=torch.float32, inputs=dict(base.inputs),
                          weights=dict(base.weights), buckets=base.buckets, description=base.description, shapes=True)


def _triton(kind, source: str, **kwargs):
    decorator = (positive if kind == "positive" else negative)(FAMILY, source, **kwargs)

    def wrap(fn):
        if TRITON_UNAVAILABLE is None:
            return decorator(fn)
        unavailable(fn.__name__, FAMILY, TRITON_UNAVAILABLE)
        return fn

    return wrap


@_triton("negative", SOURCE.format("online softmax without rescale, as a Triton kernel (interpreter)"),
         replicates=128, expect="FAIL")
def triton_online_softmax_rescale_dropped() -> Case:
    """The online softmax bug as a Triton kernel (tiles of 128, float32 in the interpreter), rows of 128.

    The algebra gate rests on the precision ladder (float32 and float64 rungs); past one tile the error
    stops at a floor no finer precision lowers.
    """
    base = _softmax_case("triton_online_softmax_rescale_dropped", softmax, TRITON_ROWS,
                         description="Triton online softmax, tiles of 128, running sum not rescaled; rows of 128")
    return _triton_case(base.name, base, lambda x: kernels()["online_softmax"](x, rescale=False))


@_triton("negative", SOURCE.format("a Triton matmul's accumulator overwritten (interpreter)"), replicates=128,
         expect="FAIL")
def triton_matmul_accumulator_overwritten() -> Case:
    """The overwritten accumulator as a Triton matmul (blocks 16 x 16 x 64, ``tl.dot`` in IEEE float32),
    K = 64: one block, exact; K = 65, 129, 257 FAIL."""
    base = _matmul_case("triton_matmul_accumulator_overwritten", matmul,
                        description="Triton matmul, BLOCK_K 64, acc overwritten; K = 64")
    return _triton_case(base.name, base, lambda a, b: kernels()["matmul"](a, b, overwrite=True))


@_triton("negative", SOURCE.format("a Triton softmax's masked load with other=0.0 (interpreter)"), replicates=128,
         expect="FAIL")
def triton_softmax_tail_padded_with_zero() -> Case:
    """The row-per-program Triton softmax whose masked load pads with ``other=0.0``, rows of 128 (the
    block, a power of two: no padded lane); rows of 95, 65, 129, 257 FAIL."""
    base = _softmax_case("triton_softmax_tail_padded_with_zero", softmax, TRITON_ROWS,
                         description="Triton softmax, masked load other=0.0; rows of 128")
    return _triton_case(base.name, base, lambda x: kernels()["masked_softmax"](x, pad_zero=True))
