"""Real mode: evaluate an arbitrary PyTorch callable as a real-number definition.

Inside :class:`RealMode` every floating tensor, floating dtype, cast and default-dtype
factory is redirected to one *target* dtype (float64, or float32), so a kernel written
for bf16 computes its algebra in the target precision: ``run_real(ref, x)`` is the
float64 oracle of ``ref``.  Evaluating ref and prod in real mode at float64 and at
float32 separates an algebraic difference (does not shrink) from rounding (shrinks by
about 2**29).

It is a ``TorchFunctionMode`` rather than a ``TorchDispatchMode``: a function mode sits
above autograd and ``torch.compile`` so backward with bf16 parameters, compiled
callables and ``nn`` modules keep working, and it still sees the Python-level signals
(``data_ptr``, ``numpy``, dtype views) that tell when a callable leaves what real mode
can follow.  What it cannot follow raises :class:`~kcert.errors.RealModeUnsupported`.

What is converted: floating tensors in the arguments of every call (nested in lists,
tuples, dicts), floating ``torch.dtype`` arguments, the default dtype (set on enter,
restored on exit), ``x.float()/.half()/.bfloat16()/.double()``, ``x.type(...)``.  A cast
never returns its input itself (it clones instead): in the original code a cast from a
lower precision is a copy, and code may write into it.  Autocast is switched off around
each op.  An operator without a float64 kernel that real mode knows the definition of is computed from it
in float64 real mode: ``torch._grouped_mm`` (the experts of mixture-of-experts layers), one ``mm`` per
group.  Metadata and autograd-state calls (``x.dtype``, ``x.grad``,
``p.requires_grad_()``, ``backward``) act on the caller's tensor unconverted, and so
do view-like calls (slicing, ``view``, ``transpose``, ``detach``...) on a low-precision
tensor made outside the mode, so that a write through the view is recognised as a
write into an outside buffer.

Verified on torch 2.13 (tests/test_realmode.py):

* ``Tensor.data_ptr``, ``untyped_storage``, ``storage``, ``__dlpack__``, ``numpy``,
  ``__array__`` and the ``__cuda_array_interface__`` property all reach
  ``__torch_function__`` (none is in ``torch.overrides.get_ignored_functions()``; they
  are handled through ``has_torch_function``), so they are refused on floating tensors.
  Triton's CUDA launcher gets each tensor's address by calling its ``data_ptr``
  attribute from C (``PyObject_GetAttrString(obj, "data_ptr")``), i.e. through the same
  Python method, and so do ctypes/extension wrappers; CuPy uses
  ``__cuda_array_interface__``, ``torch.from_dlpack``/JAX use ``__dlpack__``.
* ``torch.ops.*`` calls reach the mode too.  A custom operator (any namespace but
  torch's own) runs its implementation *inside* the mode handler, where the mode is
  suspended, so real mode cannot see into it (not even its ``data_ptr`` calls): it is
  refused unless listed in ``trusted_ops``.
* Under ``torch.compile`` dynamo inlines the handler, so the traced graph computes in
  the target dtype (aot_eager and inductor); ``semantic_round`` is a graph break.

Things that escape real mode (limitations):

* Code that branches on dtype metadata sees the target dtype for tensors made or
  converted in the mode: ``x.dtype == torch.bfloat16`` is False,
  ``torch.finfo(x.dtype).eps`` / ``x.element_size()`` are the target's, while a
  captured outside tensor still reports its own dtype.  A definition that depends on
  them changes meaning, silently unless it then fails.
* A C++/CUDA extension called directly through pybind11 with ``at::Tensor`` arguments
  never goes through Python: it gets target-dtype tensors, unseen.
  ``torch.utils.dlpack.to_dlpack(x)`` does not reach the mode either (the consumer's
  ``torch.from_dlpack`` route does).  Triton on a real GPU was not run here (no GPU or
  Triton on the development machine); the signal is ``data_ptr``, which is tested.
* A torch function is atomic: what it does internally (the implementation of
  ``F.scaled_dot_product_attention``, ``F.multi_head_attention_forward``) runs with
  converted inputs but is not rewritten; built-in ops compute in their input dtype.
* NumPy values entering torch (``torch.tensor(np_float32_array)``) keep their dtype and
  were rounded outside torch.
* Gradients delivered to a low-precision leaf (a bf16 ``nn.Parameter``) are stored in
  that leaf's dtype: autograd rounds the float64 gradient once when it reaches the
  leaf.  For float64 gradients differentiate with respect to float64 tensors
  (``to_real(p).detach().requires_grad_()``).  ``torch.autograd.grad``/``backward()``
  called inside the mode run with the mode suspended (torch hands them to the handler,
  which passes them through), so a custom ``autograd.Function``'s backward then computes
  in its own dtypes (``dy.float()`` is a real float32 cast).  ``kcert.gradients`` calls
  autograd's engine entry instead, which keeps the mode on (``backward.py``; tested).
* Writes through a view of a low-precision outside tensor are caught when the view is
  made by one of the view-like calls listed in ``_ALIAS_NAMES`` (and, in eager mode, by
  any route, from storage addresses); under ``torch.compile`` only the former.
  Writes into ``run_real``'s converted arguments are legitimate (the function returns
  its result) but ``run_real`` refuses a function that writes into one and returns
  None (eager only).
* ``item()``/``tolist()`` are allowed: Python floats are float64.
* Integer bits viewed as a float (``int_bits.view(torch.float32)``) are allowed (the
  decoded values are exact); the result keeps that float dtype, so an in-place write
  into it is refused.
"""

from __future__ import annotations

import contextlib
import inspect
import types
import weakref
from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode

from kcert.errors import ParameterError, RealModeUnsupported

from .. import rounding
from ..rounding import semantic_round
from .float64_definitions import DEFINITIONS as _FLOAT64_DEFINITIONS

__all__ = ["RealMode", "in_mode", "op_name", "run_real", "semantic_round", "to_real"]

_TARGETS = (torch.float64, torch.float32)

_FIX = (
    "give kcert a real-number definition of the kernel instead, a float64 math "
    "function (e.g. `Case(oracle=...)` or `prod_math=...`)"
)
_ALLOC = (
    "allocate the output inside the callable (e.g. `torch.empty_like(x)`) and return "
    "it, or "
)

# The thread-local state (bypass count, target dtypes entered) lives with semantic_round.
_tls = rounding.real_mode_state

_T = torch.Tensor
_CAST_METHODS = frozenset({_T.float, _T.half, _T.bfloat16, _T.double})
# Casts whose result must not alias their input: in the original code a cast from a
# lower precision copies, so code may write into the result (x = x.float(); x.mul_(..)).
_COPY_CASTS = frozenset({_T.to, _T.type, _T.type_as})
_DTYPE_VIEWS = frozenset(
    f
    for f in (
        _T.view,
        torch.ops.aten.view,
        torch.ops.aten.view.dtype,
        getattr(torch.ops.prims, "view_of_dtype", None),
    )
    if f is not None
)
_CAI_PROPERTY = _T.__cuda_array_interface__

# Calls that inspect or set metadata / autograd state of the tensor itself: they must
# act on the caller's tensor, not on a converted copy (p.grad, p.requires_grad_()).
_PASSTHROUGH = frozenset(
    {
        "__get__", "__set__", "__delete__", "requires_grad_", "retain_grad",
        "register_hook", "register_post_accumulate_grad_hook", "detach_",
        "share_memory_", "dim", "ndimension", "size", "numel", "nelement",
        "element_size", "is_floating_point", "is_complex", "is_signed",
        "is_contiguous", "get_device", "storage_offset", "stride", "__len__",
        "__repr__", "__format__", "__dlpack_device__", "is_pinned", "is_shared",
        "is_inference", "has_names", "__reduce_ex__", "__deepcopy__",
    }
)

# Gradients are delivered to the tensors the caller named (p.grad of a bf16 parameter
# stays bf16: autograd rounds the float64 gradient once, when it reaches the leaf).
_AUTOGRAD_CALLS = frozenset({torch.autograd.grad, torch.autograd.backward, _T.backward})

_LEAVES_TORCH = (
    "the computation would continue in NumPy, outside PyTorch, where real mode cannot "
    "follow it"
)
_RAW_POINTER = (
    "it exposes the raw memory of the tensor, which is how Triton kernels, CUDA/C++ "
    "extensions and byte-level code read it; real mode has changed the tensor's dtype, "
    "so those bytes no longer mean what the consumer expects, and real mode cannot see "
    "what the consumer computes"
)
_RAW_ACCESS = {
    "data_ptr": _RAW_POINTER,
    "untyped_storage": _RAW_POINTER,
    "storage": _RAW_POINTER,
    "_typed_storage": _RAW_POINTER,
    "__dlpack__": _RAW_POINTER,
    "numpy": _LEAVES_TORCH,
    "__array__": _LEAVES_TORCH,
}

_INPLACE_DUNDERS = frozenset(
    {
        "__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
        "__idiv__", "__ifloordiv__", "__imod__", "__ipow__", "__imatmul__",
        "__iand__", "__ior__", "__ixor__", "__ilshift__", "__irshift__",
    }
)

# torch's own operator namespaces: their semantics are the dtype-generic aten ones.
_TORCH_NAMESPACES = frozenset(
    {"aten", "prims", "rngprims", "higher_order", "c10d", "_c10d_functional",
     "c10d_functional", "_dtensor", "debugprims"}
)

# Calls whose result may alias their first argument.  On a low-precision tensor made
# outside the mode they run unconverted, so the view keeps the outside dtype and a later
# write through it (out[:, 0].copy_(v)) is caught as a write into an outside buffer,
# also under torch.compile; reading through the view converts it like any tensor.
_ALIAS_NAMES = frozenset(
    {
        "__getitem__", "view", "view_as", "reshape", "reshape_as", "flatten", "unflatten",
        "ravel", "narrow", "select", "transpose", "t", "permute", "movedim", "moveaxis",
        "swapaxes", "swapdims", "squeeze", "unsqueeze", "expand", "expand_as",
        "diagonal", "unfold", "as_strided", "split", "split_with_sizes", "tensor_split",
        "chunk", "unbind", "hsplit", "vsplit", "dsplit", "contiguous", "detach", "alias",
        "adjoint", "view_as_real", "view_as_complex", "align_to", "refine_names", "rename",
    }
)

# autocast is per device type: besides cpu and cuda, the machine's accelerator (xpu, mps..).
_OTHER_ACCELERATOR = None
if hasattr(torch, "accelerator"):
    _acc = torch.accelerator.current_accelerator()
    if _acc is not None and _acc.type not in ("cpu", "cuda"):
        _OTHER_ACCELERATOR = _acc.type

_FLOAT_TENSOR_TYPES = frozenset({"FloatTensor", "DoubleTensor", "HalfTensor", "BFloat16Tensor"})

# What kind of call a function is, as bit flags computed once per function
# (``_kind``); the hot path of the mode is then one dict lookup for most ops.
_K_PASS = 1  # metadata / autograd state: act on the caller's tensor, unconverted
_K_RAW = 2  # raw memory or NumPy
_K_VIEW = 4  # Tensor.view & co (dtype views are bit tricks)
_K_CAST = 8  # x.float(), x.half(), x.bfloat16(), x.double()
_K_TYPE = 16  # Tensor.type
_K_COPYCAST = 32  # to / type / type_as: the result must not alias the input
_K_CUSTOM = 64  # an operator outside torch's own namespaces
_K_WRITES_FIRST = 128  # in-place on the first argument (add_, __setitem__, __iadd__)
_K_SCHEMA_WRITES = 256  # an aten-style operator whose schema marks written arguments
_K_INPLACE_ARG = 512  # a Python function with an ``inplace`` parameter; position << 16
_K_ALIAS = 1024  # may return a view of its first argument (slicing, transpose, detach ...)

_kind_cache: dict[Any, int] = {}
_schema_writes_cache: dict[Any, tuple[tuple[int, str], ...]] = {}


def _check_dtype(dtype: Any) -> torch.dtype:
    if dtype not in _TARGETS:
        raise ParameterError(
            f"real mode evaluates in torch.float64 or torch.float32, not {dtype!r}"
        )
    return dtype


def _compiling() -> bool:
    return torch.compiler.is_compiling()


def _describe(t: torch.Tensor) -> str:
    return f"{t.dtype} tensor of shape {tuple(t.shape)}"


def in_mode(t: Any) -> Any:
    """``t`` in the precision the current evaluation computes in: itself normally; under real mode a float
    copy in the mode's target dtype (real mode redirects floating factories). Code that reads ``x.dtype``
    (HF builds its eager mask with ``finfo(inputs_embeds.dtype).min``) then sees the dtype it computes in,
    not that of a float64 tensor captured from outside the mode. Non-floating values are returned as given."""
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        return t
    mode = torch.zeros((), dtype=t.dtype, device=t.device).dtype
    return t if mode == t.dtype else t.to(mode)


def op_name(func: Any) -> str:
    if isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return f"torch.ops.{func}"
    if getattr(func, "__self__", None) is _CAI_PROPERTY:
        return "Tensor.__cuda_array_interface__"
    qn = getattr(func, "__qualname__", None) or getattr(func, "__name__", None) or repr(func)
    head, _, tail = qn.partition(".")
    if tail and head in ("TensorBase", "_TensorBase", "Tensor"):
        return "Tensor." + tail
    if head == "_VariableFunctionsClass":
        return "torch." + tail
    mod = getattr(func, "__module__", None)
    if mod == "torch._C._nn":
        mod = "torch.nn.functional"
    return f"{mod}.{qn}" if mod else qn


def _namespace(func: Any) -> str | None:
    if isinstance(func, torch._ops.OpOverload):
        return func.namespace
    if isinstance(func, torch._ops.OpOverloadPacket):
        return func._qualified_op_name.split("::", 1)[0]
    return None


def _qualified_op(func: Any) -> str:
    ns_name = str(func).split(".")  # "mylib.op.default" / "mylib.op"
    return "::".join(ns_name[:2])


def _inplace_pos(func: types.FunctionType) -> int:
    try:
        params = list(inspect.signature(func).parameters.values())
    except (TypeError, ValueError):
        return -1
    for i, p in enumerate(params):
        if p.name == "inplace" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return i
    return -1


def _compute_kind(func: Any) -> int:
    name = getattr(func, "__name__", "") or ""
    if name == "__get__":
        return _K_RAW if getattr(func, "__self__", None) is _CAI_PROPERTY else _K_PASS
    if name in _PASSTHROUGH or func in _AUTOGRAD_CALLS:
        return _K_PASS
    if name in _RAW_ACCESS:
        return _K_RAW
    k = 0
    if func in _DTYPE_VIEWS:
        k |= _K_VIEW
    if func in _CAST_METHODS:
        k |= _K_CAST
    if func is _T.type:
        k |= _K_TYPE
    if func in _COPY_CASTS:
        k |= _K_COPYCAST
    ns = _namespace(func)
    if ns is not None and ns not in _TORCH_NAMESPACES:
        k |= _K_CUSTOM
    if name in _ALIAS_NAMES:
        k |= _K_ALIAS
    if isinstance(func, torch._ops.OpOverload):
        if _schema_writes(func):
            k |= _K_SCHEMA_WRITES
        elif any(r.alias_info is not None for r in func._schema.returns):
            k |= _K_ALIAS
    elif name in _INPLACE_DUNDERS or (name.endswith("_") and not name.startswith("__")):
        k |= _K_WRITES_FIRST
    elif type(func) is types.FunctionType:  # F.relu(x, True), F.dropout(x, p, t, True)
        pos = _inplace_pos(func)
        if pos >= 0:
            k |= _K_INPLACE_ARG | (pos << 16)
    return k


# Under torch.compile dynamo inlines the mode's handler; this makes the classification
# a trace-time constant instead of string work dynamo cannot trace.
@torch.compiler.assume_constant_result
def _kind(func: Any) -> int:
    try:
        return _kind_cache[func]
    except KeyError:
        k = _kind_cache[func] = _compute_kind(func)
        return k
    except TypeError:  # unhashable callable
        return _compute_kind(func)


@torch.compiler.assume_constant_result
def _schema_writes(func: torch._ops.OpOverload) -> tuple[tuple[int, str], ...]:
    got = _schema_writes_cache.get(func)
    if got is None:
        got = _schema_writes_cache[func] = tuple(
            (i, a.name)
            for i, a in enumerate(func._schema.arguments)
            if a.alias_info is not None and a.alias_info.is_write
        )
    return got


def _storage_ptr(t: torch.Tensor) -> int:
    # kcert's own bookkeeping: an enclosing RealMode must not refuse this access.
    _tls.bypass = getattr(_tls, "bypass", 0) + 1
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # sparse, meta, fake tensors
        return 0
    finally:
        _tls.bypass -= 1


def _iter_tensors(obj: Any) -> Iterable[torch.Tensor]:
    if isinstance(obj, torch.Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _iter_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _iter_tensors(o)


def _rebuild(obj: Any, items: list) -> Any:
    if type(obj) is tuple:
        return tuple(items)
    if type(obj) is list:
        return items
    if hasattr(obj, "_make"):  # namedtuple (torch.return_types.*)
        return obj._make(items)
    return type(obj)(items)


def _rebuild_dict(obj: dict, new: dict) -> dict:
    if all(new[k] is v for k, v in obj.items()):
        return obj
    if type(obj) is dict:
        return new
    try:  # OrderedDict and friends; defaultdict & co. fall back to a plain dict
        return type(obj)(new)
    except TypeError:
        return new


_bypass = rounding.bypass


_CONTINUE = object()


def _forget_in(mode_ref: Any, key: tuple) -> None:
    mode = mode_ref()
    if mode is not None:
        mode._forget(key)


class RealMode(TorchFunctionMode):
    """Evaluate PyTorch code with every floating tensor, dtype and cast redirected to
    ``dtype`` (float64 or float32).

    ``trusted_ops`` names custom operators (``"mylib::rms_norm"``) or whole namespaces
    (``"torchvision"``) whose implementation is known to be dtype-generic; any other
    non-torch operator called with floating tensors raises, because its implementation
    runs where real mode cannot see it.

    Low-precision tensors made outside the mode (module parameters captured by a
    closure) are converted on use; within one session (one ``with`` block) the copy is
    cached by (identity, ``_version``, whether it joins the autograd graph), so an
    ``nn.Linear`` weight is converted once, and an in-place update of the source
    invalidates it.  The cached copy's ``grad_fn`` is a ``ToCopy`` node that saves no
    tensors, so reusing it across several backward passes is sound.  Under
    ``torch.compile`` tracing there is no cache (the conversion is part of the graph).
    """

    def __init__(self, dtype: torch.dtype = torch.float64, *, trusted_ops: Iterable[str] = ()):
        super().__init__()
        self.dtype = _check_dtype(dtype)
        self.trusted_ops = frozenset(trusted_ops)
        self._saved_default: list[torch.dtype] = []
        self._cache: dict[tuple, tuple] = {}
        # storage address of each converted copy -> description of its source, to catch
        # writes through views of a copy (out_bf16[:, 0].copy_(...)): they are lost too.
        self._copies: dict[int, str] = {}
        # run_real's converted inputs: writing into them is fine only if fn returns.
        self._input_copies: dict[int, str] = {}
        self._wrote_input: str | None = None

    # -- session -------------------------------------------------------------------
    def __enter__(self):
        active = getattr(_tls, "dtypes", None)
        if active is None:
            active = _tls.dtypes = []
        if active and active[-1] is not self.dtype:
            # the outer mode would rewrite the inner one's own casts: not meaningful
            raise ParameterError(
                f"RealMode({self.dtype}) cannot be entered inside RealMode({active[-1]})"
            )
        self._saved_default.append(torch.get_default_dtype())
        torch.set_default_dtype(self.dtype)
        try:
            super().__enter__()
        except BaseException:
            torch.set_default_dtype(self._saved_default.pop())
            raise
        active.append(self.dtype)
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            return super().__exit__(exc_type, exc, tb)
        finally:
            _tls.dtypes.pop()
            torch.set_default_dtype(self._saved_default.pop())
            if not self._saved_default:
                self._cache.clear()
                self._copies.clear()

    # -- errors --------------------------------------------------------------------
    def _unsupported(
        self, func: Any, t: torch.Tensor, why: str, call: str = "", remedy: str = ""
    ) -> RealModeUnsupported:
        note = ""
        if t.dtype is self.dtype:
            note = (
                f" (real mode had already converted it to {self.dtype}; in the original "
                "code it probably had a lower precision)"
            )
        return RealModeUnsupported(
            f"real mode ({self.dtype}) cannot follow `{op_name(func)}{call}` on a "
            f"{_describe(t)}{note}: {why}. To fix: {remedy}{_FIX}"
        )

    # -- conversion ------------------------------------------------------------------
    def _to_target(self, t: torch.Tensor) -> torch.Tensor:
        if t.dtype is self.dtype or not t.is_floating_point():
            return t
        if _compiling() or t.is_inference():
            return t.to(self.dtype)
        if t._base is None:  # views are new objects at every use: not worth caching
            joins_graph = t.requires_grad and torch.is_grad_enabled()
            key = (id(t), joins_graph, torch.is_inference_mode_enabled())
            hit = self._cache.get(key)
            if hit is not None and hit[0]() is t and hit[1] == t._version:
                return hit[2]
            c = t.to(self.dtype)
            if hit is not None:
                self._forget(key)
            # weakref: the cache must not keep the caller's tensor alive; its callback
            # drops the entry, and a dead reference tells a recycled id() apart.
            self_ref = weakref.ref(self)
            ref = weakref.ref(t, lambda _, key=key: _forget_in(self_ref, key))
            ptr = _storage_ptr(c)
            self._cache[key] = (ref, t._version, c, ptr)
        else:
            c = t.to(self.dtype)
            ptr = 0
        if ptr:
            self._copies[ptr] = _describe(t)
        return c

    def _forget(self, key: tuple) -> None:
        hit = self._cache.pop(key, None)
        if hit is not None:
            self._copies.pop(hit[3], None)

    def _conv(self, obj: Any) -> Any:
        if isinstance(obj, torch.Tensor):
            return self._to_target(obj)
        if isinstance(obj, torch.dtype):
            return self.dtype if obj.is_floating_point else obj
        if isinstance(obj, (list, tuple)):
            items = [self._conv(o) for o in obj]
            if all(a is b for a, b in zip(items, obj)):
                return obj
            return _rebuild(obj, items)
        if isinstance(obj, dict):
            return _rebuild_dict(obj, {k: self._conv(v) for k, v in obj.items()})
        return obj

    # -- writes ----------------------------------------------------------------------
    def _check_writes(self, func: Any, kind: int, args: tuple, kwargs: dict) -> None:
        if args:
            first = args[0]
        else:  # keyword-only dispatch, e.g. nn.init.normal_(tensor=...)
            first = next((v for v in kwargs.values() if isinstance(v, torch.Tensor)), None)
        if kwargs:
            out = kwargs.get("out")
            if out is not None:
                self._check_write(func, out, "(..., out=...)")
            if kwargs.get("inplace") is True:
                self._check_write(func, first, "(..., inplace=True)")
        if kind & _K_WRITES_FIRST:
            self._check_write(func, first, "")
        elif kind & _K_INPLACE_ARG:
            pos = kind >> 16
            if pos < len(args) and args[pos] is True:
                self._check_write(func, first, "(..., inplace=True)")
        elif kind & _K_SCHEMA_WRITES:
            for i, argname in _schema_writes(func):
                if argname in kwargs:
                    self._check_write(func, kwargs[argname], f"(..., {argname}=...)")
                elif i < len(args):
                    self._check_write(func, args[i], "")

    def _check_write(self, func: Any, target: Any, call: str) -> None:
        for t in _iter_tensors(target):
            if not t.is_floating_point():
                continue
            if t.dtype is not self.dtype:
                raise self._unsupported(
                    func,
                    t,
                    "it writes in place into a tensor created outside real mode in "
                    f"another precision; real mode can only hand the operation a "
                    f"{self.dtype} copy of it, so the write would be silently lost",
                    call,
                    remedy=_ALLOC,
                )
            if (self._copies or self._input_copies) and not _compiling():
                ptr = _storage_ptr(t)
                src = self._copies.get(ptr)
                if src is not None:
                    raise self._unsupported(
                        func,
                        t,
                        f"it writes in place into a view of a {src} created outside real "
                        f"mode, which real mode replaced by a {self.dtype} copy; the write "
                        "would go into the copy and be silently lost",
                        call,
                        remedy=_ALLOC,
                    )
                if ptr in self._input_copies:
                    self._wrote_input = f"`{op_name(func)}` into a {self._input_copies[ptr]}"

    # -- calls needing more than conversion -------------------------------------------
    def _special(self, func: Any, kind: int, args: tuple, kwargs: dict) -> Any:
        first = args[0] if args else None
        if kind & _K_RAW:
            if isinstance(first, torch.Tensor) and first.is_floating_point():
                name = getattr(func, "__name__", "")
                if name == "__get__":
                    raise self._unsupported(func, first, _RAW_POINTER)
                raise self._unsupported(func, first, _RAW_ACCESS[name], "()")
            return func(*args, **kwargs)

        if kind & _K_VIEW:
            dt = kwargs.get("dtype")
            if dt is None and len(args) == 2 and isinstance(args[1], torch.dtype):
                dt = args[1]
            if isinstance(dt, torch.dtype):
                if not first.is_floating_point() or dt is first.dtype:
                    # int/bool bits decoded as a float: exact values, keep as written.
                    return func(*args, **kwargs)
                raise self._unsupported(
                    func,
                    first,
                    "reinterpreting the bits of a floating tensor as another dtype is a "
                    "bit-level trick of one floating format (truncation, sign or exponent "
                    "manipulation) that has no real-number meaning, and in real mode the "
                    "tensor is not in the format the code was written for",
                    f"({dt})",
                )

        if (
            kind & _K_ALIAS
            and isinstance(first, torch.Tensor)
            and first.dtype is not self.dtype
            and first.is_floating_point()
        ):
            return func(*args, **kwargs)

        if kind & _K_CUSTOM:
            opname = _qualified_op(func)
            if opname.split("::")[0] not in self.trusted_ops and opname not in self.trusted_ops:
                for t in _iter_tensors((args, kwargs)):
                    if t.is_floating_point():
                        raise self._unsupported(
                            func,
                            t,
                            "it is a custom operator: its implementation (often a Triton "
                            "or CUDA kernel) runs where real mode cannot see or rewrite it",
                            remedy=(
                                f"if it is dtype-generic, pass trusted_ops={{'{opname}'}} "
                                "to RealMode; otherwise "
                            ),
                        )

        if kind & _K_CAST:
            # x.float(), x.bfloat16() ...: a cast to the target that never aliases x.
            x = self._to_target(first)
            r = _T.to(x, self.dtype, **kwargs)
            return r.clone() if r is x else r

        if kind & _K_TYPE and (len(args) > 1 or "dtype" in kwargs):
            spec = args[1] if len(args) > 1 else kwargs["dtype"]
            if not isinstance(spec, torch.dtype):
                # x.type("torch.cuda.HalfTensor") / x.type(torch.FloatTensor)
                text = spec if isinstance(spec, str) else getattr(spec, "__name__", "")
                if text.rsplit(".", 1)[-1] in _FLOAT_TENSOR_TYPES:
                    if isinstance(spec, str):
                        cuda = ".cuda." in text
                    else:
                        cuda = bool(getattr(spec, "is_cuda", False))
                    x = self._to_target(first)
                    r = x.to("cuda" if cuda else x.device, self.dtype)
                    return r.clone() if r is x else r
        return _CONTINUE

    # -- the hook --------------------------------------------------------------------
    def __torch_function__(self, func, types_, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        if getattr(_tls, "bypass", 0):
            return func(*args, **kwargs)
        kind = _kind(func)
        if kind & _K_PASS:
            return func(*args, **kwargs)
        if kind or kwargs:
            self._check_writes(func, kind, args, kwargs)
        if kind:
            r = self._special(func, kind, args, kwargs)
            if r is not _CONTINUE:
                return r

        args = self._conv(args)
        kwargs = self._conv(kwargs)
        if self.dtype is torch.float64 and func in _FLOAT64_DEFINITIONS:
            r = _FLOAT64_DEFINITIONS[func](*args, **kwargs)
            if r is not None:
                return r
        cpu = torch.is_autocast_enabled("cpu")
        cuda = torch.is_autocast_enabled("cuda")
        acc = _OTHER_ACCELERATOR is not None and torch.is_autocast_enabled(_OTHER_ACCELERATOR)
        if cpu or cuda or acc:
            # autocast would lower the precision of target-dtype inputs (float32 ones).
            with (
                torch.autocast("cpu", enabled=False) if cpu else contextlib.nullcontext(),
                torch.autocast("cuda", enabled=False) if cuda else contextlib.nullcontext(),
                (
                    torch.autocast(_OTHER_ACCELERATOR, enabled=False)
                    if acc
                    else contextlib.nullcontext()
                ),
            ):
                r = func(*args, **kwargs)
        else:
            r = func(*args, **kwargs)
        if kind & _K_COPYCAST and r is args[0] and r.is_floating_point():
            r = r.clone()
        return r


def _map_floating(obj: Any, dtype: torch.dtype, on_copy: Callable | None = None) -> Any:
    if isinstance(obj, torch.Tensor):
        if obj.is_floating_point() and obj.dtype is not dtype:
            c = obj.to(dtype)
            if on_copy is not None:
                on_copy(obj, c)
            return c
        return obj
    if isinstance(obj, (list, tuple)):
        items = [_map_floating(o, dtype, on_copy) for o in obj]
        if all(a is b for a, b in zip(items, obj)):
            return obj
        return _rebuild(obj, items)
    if isinstance(obj, dict):
        return _rebuild_dict(obj, {k: _map_floating(v, dtype, on_copy) for k, v in obj.items()})
    return obj


def to_real(obj: Any, dtype: torch.dtype = torch.float64) -> Any:
    """Convert the floating tensors in ``obj`` (nested tuples/lists/dicts) to ``dtype``.

    Tensors already in ``dtype``, integer/bool/complex tensors and non-tensors are
    returned as they are (same object).  The conversion is ``t.to(dtype)``, which stays
    connected to autograd: when ``t`` requires grad, the result is a non-leaf and a
    backward pass reaches ``t`` (with the gradient rounded to ``t``'s dtype).  For a
    float64 leaf of its own use ``to_real(t).detach().requires_grad_()``.
    """
    return _map_floating(obj, _check_dtype(dtype))


def run_real(
    fn: Callable,
    *args: Any,
    dtype: torch.dtype = torch.float64,
    name: str = "kernel",
    **kwargs: Any,
) -> Any:
    """Evaluate ``fn(*args, **kwargs)`` in real mode at ``dtype`` and return its outputs
    with every floating tensor in ``dtype``.

    Raises :class:`RealModeUnsupported` naming ``name`` when ``fn`` does something real
    mode cannot follow, and also when ``fn`` raises any other exception under real mode
    (the original is kept as ``__cause__``): an error that only appears in real mode
    usually means dtype-specific code.
    """
    _check_dtype(dtype)
    mode = RealMode(dtype)

    def note(src: torch.Tensor, copy: torch.Tensor) -> None:
        ptr = _storage_ptr(copy)
        if ptr:
            mode._input_copies[ptr] = _describe(src) + " passed as an argument"

    rargs = _map_floating(args, dtype, note)
    rkwargs = _map_floating(kwargs, dtype, note)
    try:
        with mode:
            out = fn(*rargs, **rkwargs)
    except RealModeUnsupported as e:
        raise RealModeUnsupported(f"`{name}`: {e}") from e
    except Exception as e:
        raise RealModeUnsupported(
            f"`{name}` raised {type(e).__name__}: {e} when evaluated in real mode "
            f"({dtype}); if it does not raise when run normally, it has dtype-specific "
            f"code (a dtype check, a kernel built for one format) that real mode cannot "
            f"follow; {_FIX}"
        ) from e
    if out is None and mode._wrote_input is not None:
        raise RealModeUnsupported(
            f"`{name}` returned None after writing {mode._wrote_input}: real mode "
            f"evaluated it on a {dtype} copy of that argument, so the result it wrote is "
            f"not visible to the caller. Return the output tensor; or {_FIX}"
        )
    return _map_floating(out, dtype)
