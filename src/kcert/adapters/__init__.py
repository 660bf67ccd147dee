"""Adapters: turn framework kernels into :class:`kcert.Case` objects.

- :mod:`kcert.adapters.hf`: Hugging Face ``transformers`` modules (norms, rotary embeddings,
  attention with its ``eager``/``sdpa`` implementations, MoE blocks) as ref or prod, with their
  parameters mapped to kcert weight probes and called functionally. Needs the ``hf`` extra
  (``pip install "kcert[hf]"``); importing the module itself does not import ``transformers``.
- :mod:`kcert.adapters.triton`: Triton kernels as prods, with the guard for the CPU interpreter
  (float32 only: it computes bfloat16 on raw bits).

Nothing here is imported by ``import kcert``.
"""

from __future__ import annotations

from ..errors import ExtraMissing


__all__ = ["ExtraMissing"]
