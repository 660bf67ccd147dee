"""Patches that reach ref: functions of an architecture's module, methods of its classes or torch functions
replaced by a fused-kernel library or by hand, which every model that runs them uses, ref as well as prod.

Fused-kernel libraries patch at two levels: an instance (prod's own modules; ref unaffected) and a module or a
class (Liger's ``apply_liger_kernel_to_llama`` sets ``modeling_llama.apply_rotary_pos_emb`` to its Triton RoPE and
``LlamaForCausalLM.forward`` to its fused linear cross-entropy; a user sets ``torch.nn.functional.silu``). The
second reaches ref too, and the rows that run the patched function compare it with itself: a PASS that certified
nothing about it. Found by reading code, not by running it, so on any device: every function ref's modules'
forwards reference by a global name (and the functions of their own module those call) is checked for being
an object defined elsewhere under another name, and each class's ``forward`` for being a function assigned onto
the class from another module (docs/model.md, "A patch that reaches ref too").

Measured: nothing is flagged on the unpatched models of docs/model.md (the study's five architectures, the
thirteen of "Beyond the zoo"); Liger's class-level patch of Llama and a replaced ``torch.nn.functional.silu`` are.
"""

from __future__ import annotations

import inspect
import types

from torch import nn

from .words import few

# How far calls are followed: from a forward into functions of its own module, and into submodules of a module
# named in it (torch -> nn -> functional).
CALL_DEPTH = 3
MODULE_DEPTH = 2


def _names(code: types.CodeType) -> set[str]:
    """The global and attribute names a function's code reads, its nested functions' too."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _names(const)
    return names


def _origin(fn: types.FunctionType) -> str:
    return f"{fn.__module__}.{fn.__qualname__}"


def _module_attributes(module: types.ModuleType, names: set[str], found: dict[str, str], depth: int) -> None:
    """``module.name`` for the names read: a Python function defined outside ``module``'s package is a patch."""
    root = module.__name__.split(".")[0]
    for name in names:
        value = getattr(module, name, None)
        if isinstance(value, types.FunctionType) and not (value.__module__ or "").startswith(root):
            found.setdefault(f"{module.__name__}.{name}", _origin(value))
        elif isinstance(value, types.ModuleType) and depth < MODULE_DEPTH and value.__name__.startswith(root):
            _module_attributes(value, names, found, depth + 1)


def _visit(fn, found: dict[str, str], seen: set, depth: int) -> None:
    try:
        fn = inspect.unwrap(fn)  # a decorated forward: its own code, not the decorator's wrapper
    except ValueError:  # a cycle of __wrapped__: read the wrapper as it is
        pass
    code = getattr(fn, "__code__", None)
    if code is None or fn in seen or depth > CALL_DEPTH:
        return
    seen.add(fn)
    namespace = fn.__globals__
    home = namespace.get("__name__")
    names = _names(code)
    for name in names:
        value = namespace.get(name)
        if isinstance(value, types.FunctionType):
            if value.__name__ != name and value.__module__ != home:  # assigned under another name, from elsewhere
                found.setdefault(f"{home}.{name}", _origin(value))
            elif value.__module__ == home:
                _visit(value, found, seen, depth + 1)
        elif isinstance(value, types.ModuleType):
            _module_attributes(value, names, found, 0)


def patched_functions(model: nn.Module) -> dict[str, str]:
    """What ``model``'s modules run that was patched in from elsewhere: ``{where it is looked up: what it is}``
    (``transformers.models.llama.modeling_llama.apply_rotary_pos_emb``:
    ``liger_kernel.transformers.rope.liger_rotary_pos_emb``); {} when nothing is."""
    found: dict[str, str] = {}
    seen: set = set()
    for cls in dict.fromkeys(type(m) for m in model.modules()):
        owner = next((k for k in cls.__mro__ if "forward" in vars(k)), None)
        forward = vars(owner)["forward"] if owner is not None else None
        if not isinstance(forward, types.FunctionType):
            continue
        if forward.__qualname__ != f"{owner.__qualname__}.forward" and forward.__module__ != owner.__module__:
            found.setdefault(f"{owner.__module__}.{owner.__qualname__}.forward", _origin(forward))
        _visit(forward, found, seen, 0)
    return found


def patched_warning(found: dict[str, str], limit: int = 4) -> str | None:
    """The certificate's warning when ref runs patched functions (None when it runs none)."""
    if not found:
        return None
    shown = few([f"{where} is {what}" for where, what in found.items()], limit, "; ")
    return (f"ref_model runs functions patched in from elsewhere ({shown}): a patch of an architecture's module "
            "or class, or of torch, reaches every model that runs it, ref as well as prod, so rows that run it "
            "compare the patch with itself. Patch prod's instances only, not the architecture's module or classes "
            "(Liger: _apply_liger_kernel_to_instance(model=prod, rope=False)), or certify the function itself with "
            "kcert certify")
