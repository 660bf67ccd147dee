"""What a case's replicates depend on, as a flat map ``place -> value or digest``.

A checkpoint stores it and ``--resume`` compares it with the running case's, so that a run resumed
after an edit of a kernel (a gain 1.5 -> 1.51, a helper function, a weight) is refused, naming the
place that changed, instead of mixing the old kernel's replicates with the new one's.

What is followed, from ``ref``, ``prod``, ``oracle``, ``prod_math``, ``Custom`` probes and ``Labels``
functions:

- a Python function of the user's code: its bytecode, constants (nested functions too), defaults,
  closure cells and the module globals its code reads, recursively (up to :data:`MAX_DEPTH`); a
  function of torch, kcert, the standard library or an installed package is named with its
  package's version (its code is that version's);
- ``functools.partial`` (function, arguments), bound methods (function, instance), objects with a
  ``__call__`` (class, attributes), wrappers (``__wrapped__``, ``torch.compile``'s original);
- ``nn.Module``: its class, the simple attributes of it and its submodules (``eps``, sizes, flags),
  and every parameter and buffer by a SHA-256 of its bytes (compiled modules: the wrapped module);
- values: numbers and short strings as they are; tensors, arrays and long or nested values by a
  SHA-256 digest of their bytes or canonical text.

Objects of library types that carry no attributes (an ``itertools.count``, a lock) are named by
their type: state of that kind is not part of a kernel's definition. Line numbers are not
recorded: moving code or adding a comment does not invalidate a checkpoint.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import sys
import types
from typing import Any

import numpy as np
import torch

from .frames import _is_library

MAX_DEPTH = 8  # functions reached through functions: deep enough for helpers of helpers
SHORT = 60  # values whose text is at most this long are stored as they are
_SIMPLE = (type(None), bool, int, float, complex, str, bytes)
_BUILTIN_CALLABLES = (types.BuiltinFunctionType, types.BuiltinMethodType, types.MethodDescriptorType,
                      types.WrapperDescriptorType, types.MethodWrapperType, types.ClassMethodDescriptorType)


def _library_code(filename: str) -> bool:
    """Code of torch, kcert, the standard library or an installed package (named, not followed). Code
    without a file (``python -c``, ``exec``, a notebook cell) is the user's and is followed."""
    return not filename.startswith("<") and _is_library(filename)


def _sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def _text(value: str) -> str:
    return value if len(value) <= SHORT else _sha(value.encode("utf-8", "surrogatepass"))


def tensor_digest(t: torch.Tensor) -> str:
    """dtype, shape and a digest of the bytes of ``t`` (on any device)."""
    head = f"{str(t.dtype).removeprefix('torch.')}{list(t.shape)}"
    if t.device.type == "meta" or getattr(t, "is_sparse", False) or type(t) not in (torch.Tensor, torch.nn.Parameter):
        return f"{head} {type(t).__name__} on {t.device.type}"
    data = t.detach().to("cpu").contiguous().reshape(-1)
    if data.is_complex():
        data = torch.view_as_real(data).reshape(-1)
    raw = data.view(torch.uint8) if data.numel() else data.to(torch.uint8)
    return f"{head} {_sha(raw.numpy().tobytes())}"


def _package_version(obj: Any) -> str:
    module = getattr(obj, "__module__", None) or ""
    top = module.split(".")[0]
    if not top:
        return ""
    if top in sys.stdlib_module_names or top == "builtins":
        return ""
    try:
        return f" @ {top} {importlib.metadata.version(top)}"
    except importlib.metadata.PackageNotFoundError:
        version = getattr(sys.modules.get(top), "__version__", None)
        return f" @ {top} {version}" if version else ""


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', None) or '?'}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"


def _code_digest(code: types.CodeType) -> str:
    """Bytecode, constants (nested code objects recursively), names and argument layout; no line numbers."""
    parts = [code.co_code, repr(code.co_names).encode(), repr(code.co_varnames).encode(),
             repr((code.co_argcount, code.co_kwonlyargcount, code.co_flags)).encode()]
    parts += [_constant_text(const).encode() for const in code.co_consts]
    return _sha(b"\x00".join(parts))


def _constant_text(const) -> str:
    """A code constant as text that does not depend on the process (a frozenset's order does: string
    hashing is salted per process, and ``x in {"a", "b"}`` compiles to a frozenset)."""
    if isinstance(const, types.CodeType):
        return _code_digest(const)
    if isinstance(const, frozenset):
        return "frozenset{" + ", ".join(sorted(_constant_text(c) for c in const)) + "}"
    if isinstance(const, tuple):
        return "(" + ", ".join(_constant_text(c) for c in const) + ")"
    return f"{type(const).__name__}:{const!r}"


def _names_read(code: types.CodeType) -> list[str]:
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names_read(const)
    return list(dict.fromkeys(names))


def _value_digest(value: Any, depth: int = 0) -> str | None:
    """Text of a plain value (numbers, strings, tensors, arrays, containers of them); None when
    ``value`` is not plain data (a function, a module, an object)."""
    if isinstance(value, _SIMPLE):
        return _text(repr(value))
    if isinstance(value, torch.Tensor):
        return tensor_digest(value)
    if isinstance(value, np.ndarray):
        return f"ndarray {value.dtype}{list(value.shape)} {_sha(np.ascontiguousarray(value).tobytes())}"
    if isinstance(value, (torch.dtype, torch.device, torch.Size, np.dtype, np.generic)):
        return _text(repr(value))
    if depth > 4:
        return None
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_value_digest(v, depth + 1) for v in value]
        if any(i is None for i in items):
            return None
        if isinstance(value, (set, frozenset)):
            items = sorted(items)
        return _text(f"{type(value).__name__}[{', '.join(items)}]")
    if isinstance(value, dict):
        items = [(_value_digest(k, depth + 1), _value_digest(v, depth + 1)) for k, v in value.items()]
        if any(k is None or v is None for k, v in items):
            return None
        return _text("{" + ", ".join(f"{k}: {v}" for k, v in sorted(items)) + "}")
    return None


class _Fingerprint:
    def __init__(self):
        self.entries: dict[str, str] = {}
        self._seen: dict[int, str] = {}  # id -> the place where an object was first described

    def add(self, place: str, value: str) -> None:
        self.entries[place] = value

    def visit(self, obj: Any, place: str, depth: int = 0) -> None:
        plain = _value_digest(obj)
        if plain is not None:
            self.add(place, plain)
            return
        key = id(obj)
        if key in self._seen:  # shared or cyclic: described once, where first met
            self.add(place, f"same as {self._seen[key]}")
            return
        self._seen[key] = place
        if depth > MAX_DEPTH:
            self.add(place, f"{type(obj).__name__} (beyond the depth followed)")
            return
        if isinstance(obj, types.ModuleType):
            self.add(place, f"module {obj.__name__}{_package_version(obj)}")
        elif isinstance(obj, torch.nn.Module):
            self._module(obj, place, depth)
        elif isinstance(obj, functools.partial):
            self.add(place, "functools.partial")
            self.visit(obj.func, f"{place}.func", depth + 1)
            for i, a in enumerate(obj.args):
                self.visit(a, f"{place}.args[{i}]", depth + 1)
            for k, v in obj.keywords.items():
                self.visit(v, f"{place}.{k}", depth + 1)
        elif isinstance(obj, types.MethodType):
            self.visit(obj.__func__, f"{place}.function", depth + 1)
            self.visit(obj.__self__, f"{place}.self", depth + 1)
        elif isinstance(obj, types.FunctionType):
            self._function(obj, place, depth)
        elif isinstance(obj, type):
            self._class(obj, place, depth)
        elif isinstance(obj, _BUILTIN_CALLABLES) or type(obj).__name__ in ("OpOverload", "OpOverloadPacket"):
            self.add(place, f"builtin {_qualname(obj)}{_package_version(obj)}")
        else:
            self._object(obj, place, depth)
        original = getattr(obj, "_torchdynamo_orig_callable", None) or getattr(obj, "__wrapped__", None)
        if original is not None and original is not obj and not isinstance(obj, torch.nn.Module):
            self.visit(original, f"{place}.wrapped", depth + 1)

    def _function(self, fn: types.FunctionType, place: str, depth: int) -> None:
        code = fn.__code__
        if _library_code(code.co_filename):
            self.add(place, f"function {_qualname(fn)}{_package_version(fn)}")
            return
        self.add(f"{place}.code", _code_digest(code))
        for i, d in enumerate(fn.__defaults__ or ()):
            self.visit(d, f"{place}.default[{i}]", depth + 1)
        for k, d in (fn.__kwdefaults__ or {}).items():
            self.visit(d, f"{place}.default.{k}", depth + 1)
        for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell (a name assigned later)
                self.add(f"{place}.closure.{name}", "empty")
                continue
            self.visit(value, f"{place}.closure.{name}", depth + 1)
        for name in _names_read(code):
            if name in fn.__globals__:
                self.visit(fn.__globals__[name], f"{place}.globals.{name}", depth + 1)

    def _class(self, cls: type, place: str, depth: int) -> None:
        module = sys.modules.get(cls.__module__)
        source = getattr(module, "__file__", None) or "<unknown>"
        if cls.__module__ == "builtins" or _library_code(source):
            self.add(place, f"class {_qualname(cls)}{_package_version(cls)}")
            return
        self.add(place, f"class {_qualname(cls)}")
        for name, member in sorted(vars(cls).items()):
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            if isinstance(member, property):
                member = member.fget
            if isinstance(member, types.FunctionType) or _value_digest(member) is not None and not name.startswith("__"):
                self.visit(member, f"{place}.{name}", depth + 1)
        for base in cls.__bases__:
            if base is not object:
                self.visit(base, f"{place}.base.{base.__name__}", depth + 1)

    def _object(self, obj: Any, place: str, depth: int) -> None:
        self.visit(type(obj), f"{place}.class", depth + 1)
        attributes = getattr(obj, "__dict__", None)
        if attributes is None:
            slots = [s for c in type(obj).__mro__ for s in getattr(c, "__slots__", ()) if isinstance(s, str)]
            attributes = {s: getattr(obj, s) for s in slots if hasattr(obj, s)}
        for name, value in sorted(attributes.items()):
            self.visit(value, f"{place}.{name}", depth + 1)

    def _module(self, module: torch.nn.Module, place: str, depth: int) -> None:
        root = getattr(module, "_orig_mod", module)  # torch.compile's OptimizedModule wraps the module
        if root is not module:  # described as the module it compiles, plus that it is compiled
            self.add(f"{place}.compiled", "torch.compile")
        for name, sub in root.named_modules():
            where = f"{place}.{name}" if name else place
            self.visit(type(sub), f"{where}.class", depth + 1)
            for attr, value in sorted(vars(sub).items()):
                if attr.startswith("_") or attr == "training":
                    continue
                text = _value_digest(value)
                if text is not None:
                    self.add(f"{where}.{attr}", text)
        for name, p in root.named_parameters():
            self.add(f"{place}.parameter.{name}", tensor_digest(p))
        for name, b in root.named_buffers():
            self.add(f"{place}.buffer.{name}", tensor_digest(b))


def case_fingerprint(case) -> dict[str, str]:
    """The flat map of everything ``case``'s replicates depend on besides the probes' descriptions
    (kept by the checkpoint's own fingerprint): kernels, Fixed values, Custom probe and Labels
    functions, and the versions of Python, torch and numpy."""
    from ..case import Custom, Fixed, Labels

    fp = _Fingerprint()
    fp.add("python", sys.version.split()[0])
    fp.add("torch", torch.__version__)
    fp.add("numpy", np.__version__)
    for role in ("ref", "prod", "oracle", "prod_math"):
        fn = getattr(case, role)
        if fn is not None:
            fp.visit(fn, role)
    for group in ("inputs", "weights"):
        for name, probe in getattr(case, group).items():
            if isinstance(probe, Fixed):
                fp.add(f"{group}.{name}", tensor_digest(probe.value))
            elif isinstance(probe, Custom):
                fp.visit(probe.fn, f"{group}.{name}")
    specs = case.buckets if isinstance(case.buckets, (list, tuple)) else [case.buckets]
    for i, spec in enumerate(specs):
        fp.add(f"buckets[{i}]", _text(repr(spec.describe())))
        if isinstance(spec, Labels):
            fp.visit(spec.fn, f"buckets[{i}].fn")
    fp.add("output_names", _text(repr(case.output_names)))
    fp.add("independent_leading_axis", repr(case.independent_leading_axis))
    return fp.entries


def differences(saved: dict[str, str], current: dict[str, str], limit: int = 6) -> list[str]:
    """What changed between two fingerprints, the first ``limit`` places (and how many more)."""
    changed = [f"{k} (was {saved[k]}, now {v})" if len(saved[k]) + len(v) <= 2 * SHORT else f"{k}"
               for k, v in current.items() if k in saved and saved[k] != v]
    changed += [f"{k} (new)" for k in current if k not in saved]
    changed += [f"{k} (gone)" for k in saved if k not in current]
    more = len(changed) - limit
    return changed[:limit] + ([f"and {more} more"] if more > 0 else [])


__all__ = ["case_fingerprint", "differences", "tensor_digest"]
