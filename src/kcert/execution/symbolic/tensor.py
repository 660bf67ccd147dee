"""The tensor: :class:`SymTensor`, conversions between native values, numbers and object arrays of
SymPy expressions, and the dispatch table every torch call on a SymTensor goes through. The operation
modules (elementwise, reductions, norms, shapes, conversions) build on the conversions here; the
registry module fills ``_HANDLERS`` and ``_PROPERTIES`` with them."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import sympy
import torch
import torch.nn.functional as F

from ..realmode import op_name
from .limits import SymbolicUnsupported, _check_active, _spend
from .numbers import Cx, _binary, exact


class SymTensor(torch.Tensor):
    """A storage-less tensor of SymPy expressions (``.sym``: an object ndarray). Every torch call on
    it goes through :func:`_dispatch`; what is not implemented raises :class:`SymbolicUnsupported`."""

    sym: np.ndarray
    is_complex_valued: bool

    @staticmethod
    def __new__(cls, data: np.ndarray, complex_valued: bool = False):
        dtype = torch.complex128 if complex_valued else torch.float64
        t = torch.Tensor._make_wrapper_subclass(cls, tuple(data.shape), dtype=dtype, device="cpu",
                                                requires_grad=False)
        t.sym = data
        t.is_complex_valued = complex_valued
        return t

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        # Reached only when native code got hold of a SymTensor (nothing intercepted the call above).
        raise SymbolicUnsupported(str(func), "it reached torch's native kernels, which symbolic tensors cannot enter")

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return _dispatch(func, args, kwargs or {})

    def __repr__(self) -> str:  # torch's repr would read the (absent) storage
        return f"SymTensor(shape={tuple(self.sym.shape)})"


def _obj(value: Any) -> np.ndarray:
    """``value`` (a scalar or an array from a NumPy object operation) as an object ndarray."""
    if isinstance(value, np.ndarray):
        return value if value.dtype == object else value.astype(object)
    a = np.empty((), object)
    a[()] = value
    return a


def _is_complex(*xs) -> bool:
    return any(isinstance(x, SymTensor) and x.is_complex_valued for x in xs)


def _new(data: Any, complex_valued: bool = False) -> SymTensor:
    return SymTensor(_obj(data), complex_valued)


def _native_values(t: torch.Tensor) -> tuple[np.ndarray, Callable]:
    """A native tensor's values as a NumPy array, and the converter of one value to SymPy."""
    with torch._C.DisableTorchFunctionSubclass():
        t = t.detach().cpu()
        if t.is_complex():
            raise SymbolicUnsupported("complex tensor", "complex constants made outside the kernel are not followed")
        if t.is_floating_point():
            return t.to(torch.float64).numpy(), _binary
        return t.to(torch.int64).numpy(), sympy.Integer


def _values_to_obj(values: np.ndarray, conv: Callable) -> np.ndarray:
    values = np.asarray(values)
    _spend(int(values.size))  # every value becomes a SymPy number: work the budget counts
    out = np.empty(values.shape, object)
    flat = out.reshape(-1)
    for i, v in enumerate(values.reshape(-1).tolist()):
        flat[i] = conv(v)
    return out


def _native_to_obj(t: torch.Tensor) -> np.ndarray:
    return _values_to_obj(*_native_values(t))


def _sym(x: Any) -> SymTensor:
    """A tensor, number or nested list as a SymTensor."""
    if isinstance(x, SymTensor):
        return x
    if isinstance(x, np.ndarray):
        return _new(x)
    if isinstance(x, torch.Tensor):
        return _new(_native_to_obj(x))
    if isinstance(x, (list, tuple)):
        parts = [_sym(v) for v in x]
        if not parts:
            return _new(np.empty((0,), object))
        return _new(np.stack([p.sym for p in parts]), _is_complex(*parts))
    return _new(exact(x), isinstance(x, complex))


def _data(x: Any) -> np.ndarray:
    return _sym(x).sym


def symbols_like(name: str, shape: tuple[int, ...]) -> SymTensor:
    """A SymTensor of distinct real symbols ``name[i,j,...]``."""
    out = np.empty(shape, object)
    for idx in np.ndindex(*shape):
        out[idx] = sympy.Symbol(f"{name}[{','.join(map(str, idx))}]", real=True)
    return _new(out)


def _constant_values(x: Any, op: str) -> np.ndarray:
    """The elements of ``x`` as plain Python numbers; refuses values that depend on the inputs."""
    if isinstance(x, torch.Tensor) and not isinstance(x, SymTensor):
        with torch._C.DisableTorchFunctionSubclass():
            return x.detach().cpu().numpy()
    data = _data(x)
    out = np.empty(data.shape, object)
    for idx in np.ndindex(*data.shape):
        e = data[idx]
        if isinstance(e, Cx):
            raise SymbolicUnsupported(op, "it needs a complex value as a number")
        if e.free_symbols:
            raise SymbolicUnsupported(op, "it needs the value of an input-dependent quantity (data-dependent "
                                          "control flow, a mask or an index computed from the inputs)")
        if e.is_integer:
            out[idx] = int(e)
        else:
            out[idx] = float(e)
    return out


# --- the dispatch table ---------------------------------------------------------------------------

_HANDLERS: dict[Any, Callable] = {}
_SOURCES = (torch, torch.Tensor, F, torch.special, torch.linalg)


def _register(names: Iterable[str], handler: Callable, sources=_SOURCES) -> None:
    for name in names:
        for owner in sources:
            f = getattr(owner, name, None)
            if f is not None and callable(f):
                _HANDLERS[f] = handler


# Tensor properties answered from the wrapper's metadata; the others are computed (``_PROPERTIES``, filled
# by the registry module) or refused.
_METADATA = frozenset({"shape", "dtype", "device", "ndim", "is_cuda", "is_cpu", "requires_grad", "layout", "names",
                       "is_sparse", "is_quantized", "is_meta", "is_mkldnn", "is_nested", "grad", "grad_fn",
                       "is_leaf", "itemsize", "_base", "output_nr", "_version", "is_xpu", "is_mps"})
_PROPERTIES: dict[str, Callable] = {}
_PASSTHROUGH = frozenset({"size", "dim", "ndimension", "numel", "nelement", "element_size", "is_floating_point",
                          "is_complex", "is_contiguous", "stride", "storage_offset", "get_device", "is_signed",
                          "__hash__", "is_inference", "has_names", "__reduce_ex__", "__dlpack_device__",
                          "__get__", "__set__"})


def _find(obj: Any, pred: Callable[[Any], bool]) -> bool:
    if pred(obj):
        return True
    if isinstance(obj, (list, tuple)):
        return any(_find(o, pred) for o in obj)
    if isinstance(obj, dict):
        return any(_find(o, pred) for o in obj.values())
    return False


def _is_sym(o: Any) -> bool:
    return isinstance(o, SymTensor)


def _is_floating_native(o: Any) -> bool:
    return isinstance(o, torch.Tensor) and not isinstance(o, SymTensor) and (o.is_floating_point() or o.is_complex())


def _elements(obj: Any) -> int:
    """Symbolic elements held by ``obj`` (tensors in nested lists, tuples and dicts)."""
    if isinstance(obj, SymTensor):
        return int(obj.sym.size)
    if isinstance(obj, (list, tuple)):
        return sum(_elements(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_elements(o) for o in obj.values())
    return 0


def _dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    _check_active()
    name = getattr(func, "__name__", "") or ""
    if name in ("__get__", "__set__"):
        prop = getattr(getattr(func, "__self__", None), "__name__", "")
        if args and isinstance(args[0], SymTensor) and prop not in _METADATA:
            if name == "__get__" and prop in _PROPERTIES:
                return _PROPERTIES[prop](args[0])
            raise SymbolicUnsupported(f"Tensor.{prop}")
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)
    try:
        handler = _HANDLERS.get(func)
    except TypeError:  # unhashable callable
        handler = None
    has_sym = _find((args, kwargs), _is_sym)
    if handler is None:
        if name in _PASSTHROUGH:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if has_sym or _find((args, kwargs), _is_floating_native):
            raise SymbolicUnsupported(op_name(func))
        out = func(*args, **kwargs)
        if _find(out, _is_floating_native):
            raise SymbolicUnsupported(op_name(func), "it makes floating values the symbolic evaluator cannot follow")
        return out
    if not has_sym and not _find((args, kwargs), _is_floating_native):
        # integers only (positions, indices): exact natively, unless the result is floating
        out = func(*args, **kwargs)
        if not _find(out, _is_floating_native):
            return out
    out = handler(*args, **kwargs)
    _spend(_elements((args, kwargs)) + _elements(out))  # the deterministic work budget
    return out
