"""Which modules of a model are certified: the qualified names of both models matched, the execution
order and the modules that compute something themselves (one traced forward of ref), and the user's
selection (:class:`Modules`).

A module "computes something itself" when its own forward, outside its children, runs a torch
function that returns a floating tensor and is not a view, a reshape or a cast (a residual add, an
``act(gate) * up``, attention's softmax), or when it is a leaf with a floating output. Ops are
attributed to the innermost module running, through a ``TorchFunctionMode`` during one forward.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_leaves

from ..errors import CaseError
from .rename import Rename
from .words import few

COMPILED = "_orig_mod"  # the wrapped module of a torch.compile'd one


def eager_model(model: nn.Module) -> nn.Module:
    """The eager model of a ``torch.compile(model)`` wrapper (same modules, names without ``_orig_mod``), else
    ``model``."""
    inner = getattr(model, COMPILED, None)
    return inner if isinstance(inner, nn.Module) else model


def compiled_prefix(module: nn.Module) -> str:
    """What a ``torch.compile`` wrapper puts before its module's parameter names (``_orig_mod.``), else ""."""
    return COMPILED + "." if eager_model(module) is not module else ""


def compiled_whole(model: nn.Module) -> bool:
    """Whether ``model`` is compiled as a whole: wrapped (``torch.compile(model)``) or in place (``model.compile()``,
    which keeps the module and compiles its call)."""
    return eager_model(model) is not model or getattr(model, "_compiled_call_impl", None) is not None


def eagerly():
    """A context in which compiled code runs eagerly: a forward run to look at a compiled model's modules with hooks
    (the hooks would otherwise be traced into its graphs and recompile them over and over)."""
    return torch.compiler.set_stance("force_eager")


# torch functions that move, view or cast data without computing a new value (``to`` upcasts exactly;
# a downcast in a module that computes nothing else is left to its parent's row)
_NOT_COMPUTE = frozenset({
    "view", "view_as", "reshape", "reshape_as", "transpose", "permute", "contiguous", "expand", "expand_as",
    "unsqueeze", "squeeze", "__getitem__", "flatten", "unflatten", "split", "chunk", "narrow", "select", "detach",
    "clone", "t", "unbind", "movedim", "to", "type_as", "float", "double", "half", "bfloat16", "type", "repeat",
    "repeat_interleave", "cat", "stack", "zeros", "ones", "empty", "zeros_like", "ones_like", "empty_like",
    "full", "full_like", "arange", "__get__", "__set__", "__setitem__", "requires_grad_", "masked_fill",
    "index_select", "gather", "dim", "size", "numel", "tensor", "as_tensor", "split_with_sizes",
})


@dataclass(frozen=True)
class Modules:
    """A selection of a model's modules for :func:`kcert.certify_model`.

    A module is selected when it meets every criterion given: its qualified name matches one of
    ``names`` (fnmatch patterns, ``"model.layers.*.mlp"``), its class is one of ``types`` (classes or
    class names), it is at most ``depth`` dots deep (``"model.layers.0"`` is 2 deep), it is a leaf
    (``leaves=True``: no children). Nothing given selects the default: every module that computes
    something itself (docs/model.md). The root is never a module row (the end-to-end rows cover it).

    Parameters
    ----------
    names : sequence of str, default ()
        fnmatch patterns on qualified names (a single string is one pattern).
    types : sequence of type or str, default ()
        Module classes (``isinstance``) or class names (exact).
    depth : int or None, default None
        The deepest level selected (the number of dots in the name).
    leaves : bool, default False
        Only modules without children.

    Raises
    ------
    kcert.CaseError
        A criterion of the wrong kind (an empty pattern, a class that is not a module, a negative depth).

    Examples
    --------
    >>> import kcert
    >>> kcert.Modules(names=("layers.*.mlp",)).describe()
    'names layers.*.mlp'
    >>> kcert.Modules(types=("LlamaRMSNorm",), depth=3).describe()
    'types LlamaRMSNorm, depth <= 3'
    """

    names: Sequence[str] = ()
    types: Sequence[type | str] = ()
    depth: int | None = None
    leaves: bool = False

    def __post_init__(self):
        names = (self.names,) if isinstance(self.names, str) else tuple(self.names)
        types = (self.types,) if isinstance(self.types, (str, type)) else tuple(self.types)
        for n in names:
            if not isinstance(n, str) or not n:
                raise CaseError(f"Modules: names must be non-empty strings (fnmatch patterns), got {n!r}")
        for t in types:
            if not (isinstance(t, str) and t) and not (isinstance(t, type) and issubclass(t, nn.Module)):
                raise CaseError(f"Modules: types must be nn.Module classes or class names, got {t!r}")
        if self.depth is not None and (not isinstance(self.depth, int) or isinstance(self.depth, bool)
                                       or self.depth < 0):
            raise CaseError(f"Modules: depth must be None or an int >= 0, got {self.depth!r}")
        if not isinstance(self.leaves, bool):
            raise CaseError(f"Modules: leaves must be True or False, got {self.leaves!r}")
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "types", types)

    @property
    def is_default(self) -> bool:
        return not self.names and not self.types and self.depth is None and not self.leaves

    def accepts(self, name: str, module: nn.Module) -> bool:
        if self.names and not any(fnmatch.fnmatchcase(name, p) for p in self.names):
            return False
        if self.types and not any(type(module).__name__ == t if isinstance(t, str) else isinstance(module, t)
                                  for t in self.types):
            return False
        if self.depth is not None and name.count(".") > self.depth:
            return False
        return not (self.leaves and any(True for _ in module.children()))

    def describe(self) -> str:
        parts = []
        if self.names:
            parts.append("names " + ", ".join(self.names))
        if self.types:
            parts.append("types " + ", ".join(t if isinstance(t, str) else t.__name__ for t in self.types))
        if self.depth is not None:
            parts.append(f"depth <= {self.depth}")
        if self.leaves:
            parts.append("leaves")
        return ", ".join(parts) or "default (modules that compute something themselves)"


def qualified_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Qualified name -> the module to call, the root left out; a ``torch.compile``d submodule keeps
    its name (its wrapper is what is called, so it runs compiled) and its ``_orig_mod`` level is dropped
    from the names below it."""
    out: dict[str, nn.Module] = {}
    for name, module in model.named_modules():
        parts = [p for p in name.split(".") if p != COMPILED] if name else []
        key = ".".join(parts)
        if key and key not in out:
            out[key] = module
    return out


@dataclass(frozen=True)
class Matching:
    """The modules of ref and prod by qualified name: those in both, and those of one model only. prod's are keyed
    by ref's names when a :class:`~kcert.model.rename.Rename` renamed them; ``prod_names`` then gives prod's own
    name of each renamed module (``only_prod`` lists prod's own names)."""

    ref: dict[str, nn.Module]
    prod: dict[str, nn.Module]
    only_ref: tuple[str, ...]
    only_prod: tuple[str, ...]
    prod_names: dict[str, str] = field(default_factory=dict)


def match(ref_model: nn.Module, prod_model: nn.Module, rename: Rename | None = None) -> Matching:
    ref, prod = qualified_modules(ref_model), qualified_modules(prod_model)
    renamed: dict[str, str] = {}
    if rename is not None:
        prod, renamed = rename.modules(prod)
    return Matching(ref, prod, tuple(n for n in ref if n not in prod),
                    tuple(renamed.get(n, n) for n in prod if n not in ref), renamed)


def parameter_differences(ref_model: nn.Module, prod_model: nn.Module, rename: Rename | None = None) -> str | None:
    """The parameters of one qualified name (prod's renamed with their modules) whose dtype or values differ
    between the two models, in words (None when every shared parameter is bit for bit ref's). Module rows hand
    ref's parameters to both sides, so a difference in prod's own weights (a checkpoint converted with a rounding
    or a transposition) is not theirs to see; only the end-to-end row runs prod's own parameters."""
    ref = {n.replace(COMPILED + ".", ""): p for n, p in ref_model.named_parameters()}
    prod = {n.replace(COMPILED + ".", ""): p for n, p in prod_model.named_parameters()}
    if rename is not None:
        prod = {rename.parameter(n): p for n, p in prod.items()}
    shared = [n for n in ref if n in prod and ref[n].shape == prod[n].shape]
    differ = []
    for name in shared:
        a, b = ref[name], prod[name]
        if a.dtype != b.dtype:
            differ.append(f"{name} ({str(b.dtype).removeprefix('torch.')} in prod, "
                          f"{str(a.dtype).removeprefix('torch.')} in ref)")
        elif a is not b:
            values = int((a.detach() != b.detach().to(a.device)).sum())
            if values:
                differ.append(f"{name} ({values} of {a.numel()} values)")
    if not differ:
        return None
    return (f"prod's parameters differ from ref's ({len(differ)} of {len(shared)}: {few(differ, 4)}): the module "
            "rows run prod's modules with ref's parameters, so they certify prod's code, not its weights; only the "
            "end-to-end row runs prod's own. To certify converted weights, give prod ref's (load ref's state dict) "
            "and judge the conversion apart")


@dataclass
class Trace:
    """What one forward of ref shows: the modules in the order of their first call, and the floating ops
    each runs itself (outside its children)."""

    order: list[str] = field(default_factory=list)
    own_ops: dict[str, int] = field(default_factory=dict)
    floating_output: set[str] = field(default_factory=set)
    calls: dict[str, int] = field(default_factory=dict)
    first_call: dict[str, tuple[tuple, dict]] = field(default_factory=dict)  # (args, kwargs) of each first call


class _Attribute(TorchFunctionMode):
    def __init__(self, stack: list[str], trace: Trace):
        super().__init__()
        self.stack, self.trace = stack, trace

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = getattr(func, "__name__", "")
        # an op computes when it takes and returns floating tensors (a mask built from a boolean one and a
        # scalar does not: it is set up, not computed on values)
        if self.stack and name not in _NOT_COMPUTE and _floating(out) and _floating((args, kwargs), 2):
            top = self.stack[-1]
            self.trace.own_ops[top] = self.trace.own_ops.get(top, 0) + 1
        return out


def _floating(tree, numel: int = 1) -> bool:
    return any(isinstance(t, torch.Tensor) and t.is_floating_point() and t.numel() >= numel
               for t in tree_leaves(tree))


def trace(model: nn.Module, names: Mapping[str, nn.Module], kwargs: dict) -> Trace:
    """Run ``model(**kwargs)`` once (no grad) with hooks on ``names``' modules and attribute its ops."""
    found, stack, handles = Trace(), [], []
    for name, module in names.items():
        def pre(mod, args, kw, name=name):
            stack.append(name)
            found.calls[name] = found.calls.get(name, 0) + 1
            if name not in found.order:
                found.order.append(name)
                found.first_call[name] = (args, kw)

        def post(mod, args, out, name=name):
            if stack and stack[-1] == name:
                stack.pop()
            if any(isinstance(t, torch.Tensor) and t.is_floating_point() for t in tree_leaves(out)):
                found.floating_output.add(name)

        handles.append(module.register_forward_pre_hook(pre, with_kwargs=True))
        handles.append(module.register_forward_hook(post, always_call=True))
    try:
        with torch.no_grad(), _Attribute(stack, found):
            model(**kwargs)
    finally:
        for h in handles:
            h.remove()
    return found


def computes_itself(name: str, module: nn.Module, found: Trace) -> bool:
    leaf = not any(True for _ in module.children())
    return found.own_ops.get(name, 0) > 0 or (leaf and name in found.floating_output)


def select(modules: Modules, ref: Mapping[str, nn.Module], found: Trace) -> list[str]:
    """The selected modules of ref that ran in the traced forward, in execution order."""
    chosen = []
    for name in found.order:
        module = ref[name]
        if modules.is_default:
            if computes_itself(name, module, found):
                chosen.append(name)
        elif modules.accepts(name, module):
            chosen.append(name)
    return chosen


def never_ran(modules: Modules, ref: Mapping[str, nn.Module], found: Trace) -> list[str]:
    """Modules the selection names that did not run in the traced forward (not certifiable)."""
    if modules.is_default:
        return []
    return [n for n, m in ref.items() if n not in found.calls and modules.accepts(n, m)]
