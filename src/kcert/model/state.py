"""The models' buffers as the user handed them in, put back after a run (docs/model.md, "State the forwards
write"). kcert runs each model hundreds of times; a forward that writes into a buffer (BatchNorm in training
mode updates its running statistics and counts its batches; a lazily grown rotary cache) would otherwise
leave the user's models changed by the certification."""

from __future__ import annotations

import contextlib
from typing import Iterable

import torch
from torch import nn


@contextlib.contextmanager
def buffers_kept(models: Iterable[tuple[str, nn.Module]], changed: dict[str, list[str]]):
    """Every buffer of each ``(role, model)`` copied on entry and put back on exit (also when the run raises):
    written back in place, or the original tensor registered again where a forward replaced it;
    ``changed[role]`` receives the names of the buffers the run had changed, for the report."""
    kept, seen = [], set()
    for role, model in models:
        for path, module in model.named_modules(remove_duplicate=False):
            for local, buffer in list(module._buffers.items()):
                if isinstance(buffer, torch.Tensor) and (id(module), local) not in seen:
                    seen.add((id(module), local))
                    name = f"{path}.{local}" if path else local
                    kept.append((role, name.replace("_orig_mod.", ""), module, local, buffer, buffer.detach().clone()))
    try:
        yield
    finally:
        with torch.no_grad():
            for role, name, module, local, original, saved in kept:
                now = module._buffers.get(local)
                if now is original and original.shape == saved.shape and _same(original, saved):
                    continue
                changed.setdefault(role, []).append(name)
                if not isinstance(module, torch.jit.ScriptModule):  # a TorchScript module's buffers stay its own
                    module._buffers[local] = original
                if original.shape == saved.shape and original.dtype == saved.dtype:
                    original.copy_(saved)
                else:  # resized in place by a forward
                    original.set_(saved)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.dtype != b.dtype:
        return False
    return torch.equal(a, b) or (a.is_floating_point() and torch.equal(a.isnan(), b.isnan())
                                 and torch.equal(a.nan_to_num(), b.nan_to_num()))
