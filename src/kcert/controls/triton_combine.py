"""Combine functions for ``tl.reduce`` in the controls' Triton kernels (controls/opaque_triton.py,
controls/shapes_triton.py), for Triton's CPU interpreter.

triton's own jitted helpers (``tl.sum``, ``tl.max``) do not run in the interpreter when ``torch._dynamo``
imported triton before ``TRITON_INTERPRET=1`` was set, so the kernels reduce with these. Import this
module only after that variable is set, as the kernel modules that use it are.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def maximum(a, b):
    return tl.maximum(a, b)
