"""Mixed precision as training runs it: float32 parameters, the forward under ``torch.autocast`` (Hugging Face's
``Trainer(bf16=True)``, Lightning's ``"bf16-mixed"``), where matrix products run in bfloat16 and reductions such as
softmax and norms in float32, on what each op receives.

``certify_model(..., autocast=torch.bfloat16)`` runs every working-precision call of either model under it: the
recording forwards of ref (so each module's recorded inputs are those it receives in such a training step), the
rows' calls of ref's and prod's modules, the end-to-end row. It is done with a pre- and a post-hook on every module
of both models, whatever calls it: the outermost module called enters ``torch.autocast`` and leaves it when it
returns. Nothing is entered where autocast is already on, in kcert's float64 evaluations (the oracle is exact
arithmetic; real mode turns autocast off anyway), or while dynamo traces a compiled module (the hooks then add
nothing to its graph; a compiled module called by kcert runs under the autocast its wrapper's hook entered).
Harm is judged in the autocast dtype's ULPs (docs/model.md, "Mixed precision").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable

import torch
from torch import nn

from .. import rounding

AUTOCAST_DTYPES = (torch.bfloat16, torch.float16)

_open = threading.local()  # id(module) -> the autocast contexts its calls entered (None: entered none), innermost last


def device_type(model: nn.Module) -> str:
    """The device type autocast is entered for: that of the model's first parameter or buffer (cpu without any)."""
    for tensor in (*model.parameters(), *model.buffers()):
        return tensor.device.type
    return "cpu"


def _stack(module: nn.Module) -> list:
    stacks = getattr(_open, "stacks", None)
    if stacks is None:
        stacks = _open.stacks = {}
    return stacks.setdefault(id(module), [])


def _hooks(dtype: torch.dtype, device: str):
    def enter(module, args):
        if torch.compiler.is_compiling():
            return
        quiet = getattr(rounding.real_mode_state, "dtypes", None) or torch.is_autocast_enabled(device)
        context = None if quiet else torch.autocast(device, dtype=dtype)
        if context is not None:
            context.__enter__()
        _stack(module).append(context)

    def leave(module, args, output):
        if torch.compiler.is_compiling():
            return
        stack = _stack(module)
        context = stack.pop() if stack else None
        if context is not None:
            context.__exit__(None, None, None)

    return enter, leave


def install(models: Iterable[nn.Module], dtype: torch.dtype) -> list:
    """Put every module of ``models`` under ``torch.autocast(dtype)`` whenever kcert calls it in the working
    precision; returns the hooks' handles (``handle.remove()`` undoes it)."""
    handles = []
    for model in models:
        enter, leave = _hooks(dtype, device_type(model))
        for module in dict.fromkeys(model.modules()):
            handles.append(module.register_forward_pre_hook(enter))
            handles.append(module.register_forward_hook(leave, always_call=True))
    return handles


@contextlib.contextmanager
def autocast_models(models: Iterable[nn.Module], dtype: torch.dtype | None):
    """:func:`install` for the duration of the block (nothing when ``dtype`` is None)."""
    handles = install(models, dtype) if dtype is not None else []
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
