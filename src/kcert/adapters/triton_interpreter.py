"""Running third-party Triton kernels in Triton's CPU interpreter (``TRITON_INTERPRET=1``).

triton 3.6's interpreter runs the tutorials' kernels but fails on kernels written for the GPU compiler:
it executes a kernel as Python over numpy arrays, and five things the compiler does are missing there.
:func:`interpreter_compat` patches them for the duration of a ``with`` block (every patch is undone on
exit), each one named in :data:`PATCHES` and tested in tests/test_adapters_triton_interpreter.py:

- ``loop_bounds``: ``for i in range(start, end)`` with tensor bounds (``tl.program_id(0) * n``)
  converts a one-element array with ``int()``, which numpy >= 2.4 refuses ("only 0-dimensional arrays
  can be converted to Python scalars"). The patch reads the element (``.item()``).
- ``loop_variable``: the compiler gives a ``range`` / ``tl.range`` loop a tensor induction variable
  (int32, int64 when a bound is int64); the interpreter a Python int, on which ``i.to(tl.int64)``
  raises. The patch yields scalar tensors of the compiler's type (``tl.static_range`` keeps Python ints:
  it is unrolled at compile time).
- ``float_arguments``: the compiler passes a Python float argument as an fp32 scalar
  (``triton.runtime.jit.mangle_type(1e-6) == "fp32"``); the interpreter passes the float itself, on
  which ``eps.to(tl.float32)`` raises. The patch passes a float32 scalar tensor: the value the GPU sees.
- ``libdevice``: ``from triton.language.extra.libdevice import rsqrt`` binds a stub (``def rsqrt(arg0):
  ...``) that the compiler replaces with the backend's implementation; the interpreter calls the stub,
  which returns None. The patch dispatches stubs and ``triton.language.extra.cuda.libdevice``'s functions
  through triton's own type dispatch (``core.extern_elementwise``) to numpy implementations of the
  ``__nv_*`` symbols (:data:`LIBDEVICE`), computed in the argument's dtype (``rsqrt``, ``tanh``, ``exp``,
  ``log1p``, ``erf``, ``pow``, ...); ``fast_*`` variants are computed at full precision, rounding-mode
  variants other than ``_rn`` are refused, and a symbol with no implementation raises naming it.
- ``autotune``: ``@triton.autotune`` with several configs benchmarks them through the active GPU driver
  ("0 active drivers"). There is nothing to time in an emulation: the patch makes every config time 0,
  so the first config (after the autotuner's pruning) runs. A certificate then covers that config.
- ``jit_before_interpret``: a kernel (or triton's own ``tl.sum``, ``tl.max``) decorated before
  ``TRITON_INTERPRET=1`` was set (``torch._dynamo`` imports triton early) is a compiled ``JITFunction``:
  launching it needs a GPU, calling it from an interpreted kernel raises "Cannot call @triton.jit'd
  outside of the scope of a kernel". While the interpreter is requested, the patch runs such functions
  through the interpreter.

Only triton 3.6 is patched (the internals these patches replace are version-specific): with another
version the context warns once (:class:`InterpreterCompatWarning`) and patches nothing; without triton
it patches nothing. Outside the interpreter (a CUDA run) it does nothing. The kernel's module globals are patched during a launch (``range`` and names bound
to libdevice functions) and restored after it; do not run a kernel's module's host code on another
thread during a launch.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import inspect
import math
import os
import threading
import warnings
from typing import Callable, Iterator

import numpy as np

TESTED_TRITON = "3.6"

PATCHES = {
    "loop_bounds": "range() and tl.range() accept tensor bounds under numpy >= 2.4 (one-element arrays read "
                   "with .item())",
    "loop_variable": "range() and tl.range() loop variables are scalar tensors (int32, or int64 when a bound is), "
                     "as compiled",
    "float_arguments": "Python float arguments arrive as float32 scalar tensors, as compiled",
    "libdevice": "triton.language.extra.libdevice functions (stubs returning None in the interpreter) computed by "
                 "numpy in the argument's dtype",
    "autotune": "@triton.autotune runs its first config (after pruning) instead of timing configs on a GPU driver",
    "jit_before_interpret": "functions jitted before TRITON_INTERPRET=1 was set run in the interpreter",
}


# --- libdevice: numpy implementations of the __nv_* symbols ----------------------------------------


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _erfc(x):
    return np.vectorize(math.erfc, otypes=[np.float64])(x)


def _round_half_away(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


def _fma(x, y, z):
    # float32: the float64 product of two float32 values is exact, so one rounding of the sum remains
    if x.dtype == np.float32:
        return x.astype(np.float64) * y.astype(np.float64) + z.astype(np.float64)
    return x * y + z


LIBDEVICE: dict[str, Callable[..., np.ndarray]] = {
    "abs": np.abs, "fabs": np.abs, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "cbrt": np.cbrt,
    "rcbrt": lambda x: 1 / np.cbrt(x), "exp": np.exp, "exp2": np.exp2, "exp10": lambda x: np.power(x.dtype.type(10), x),
    "expm1": np.expm1, "log": np.log, "log2": np.log2, "log10": np.log10, "log1p": np.log1p,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "erf": _erf, "erfc": _erfc, "normcdf": lambda x: 0.5 * _erfc(-x / math.sqrt(2.0)),
    "floor": np.floor, "ceil": np.ceil, "trunc": np.trunc, "rint": np.rint, "nearbyint": np.rint,
    "round": _round_half_away, "saturate": lambda x: np.clip(x, 0, 1),
    "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite, "finite": np.isfinite, "signbit": np.signbit,
    "atan2": np.arctan2, "pow": np.power, "powi": np.power, "hypot": np.hypot, "fmod": np.fmod,
    "copysign": np.copysign, "fdim": lambda x, y: np.maximum(x - y, 0), "ldexp": np.ldexp, "scalbn": np.ldexp,
    "fma": _fma, "fdivide": np.divide,
    # explicitly rounded arithmetic (__nv_fadd_rn, __nv_ddiv_rn, ...): round to nearest is numpy's own
    "fadd": np.add, "dadd": np.add, "fsub": np.subtract, "dsub": np.subtract, "fmul": np.multiply,
    "dmul": np.multiply, "fdiv": np.divide, "ddiv": np.divide, "frcp": lambda x: 1 / x, "drcp": lambda x: 1 / x,
    "fsqrt": np.sqrt, "dsqrt": np.sqrt, "frsqrt": lambda x: 1 / np.sqrt(x),
}


def libdevice_function(symbol: str) -> Callable[..., np.ndarray]:
    """The numpy implementation of a libdevice symbol (``__nv_rsqrtf``, ``__nv_tanh``,
    ``__nv_fast_expf``, ``__nv_fdiv_rn``): the ``fast_`` prefix and the ``_rn`` suffix are dropped, then
    the float32 ``f`` or double ``d`` suffix if the name without it is known. Raises
    :class:`NotImplementedError` naming the symbol when it has no implementation here (bit operations,
    conversions, directed rounding modes, special functions)."""
    name = symbol.removeprefix("__nv_").removeprefix("fast_")
    if name.endswith(("_rd", "_ru", "_rz")):
        raise NotImplementedError(f"libdevice {symbol}: directed rounding modes are not emulated in the Triton "
                                  "interpreter (kcert.adapters.triton.interpreter_compat)")
    name = name.removesuffix("_rn")
    for candidate in (name, name[:-1] if name.endswith(("f", "d")) else None):
        if candidate in LIBDEVICE:
            return LIBDEVICE[candidate]
    raise NotImplementedError(f"libdevice {symbol} has no numpy implementation in "
                              "kcert.adapters.triton_interpreter.LIBDEVICE (the Triton interpreter cannot call "
                              "libdevice): add one there, or write the kernel with triton.language functions")


# --- the patches -----------------------------------------------------------------------------------

_LOCK = threading.RLock()
_STATE = {"depth": 0, "undo": None, "triton": None}


def _scalar(value) -> int:
    """A loop bound as a Python int: an int, a constexpr, or a one-element tensor."""
    value = getattr(value, "value", value)  # constexpr
    handle = getattr(value, "handle", None)
    if handle is not None:
        data = np.asarray(handle.data)
        if data.size != 1:
            raise TypeError(f"a loop bound must be a scalar, got a block of shape {data.shape}")
        return int(data.reshape(-1)[0].item())
    return int(value)


class _Triton:
    """The triton internals the patches touch, looked up once (imports triton)."""

    def __init__(self):
        import triton
        import triton.language as tl
        from triton.language import core
        from triton.language.extra import libdevice as stub
        from triton.language.extra.cuda import libdevice as cuda
        from triton.runtime import autotuner, interpreter, jit

        self.tl, self.core, self.interpreter, self.autotuner, self.jit = tl, core, interpreter, autotuner, jit
        self.stub, self.cuda = stub, cuda
        self.cuda_functions = {name: fn for name, fn in inspect.getmembers(cuda) if core.is_builtin(fn)}

    def loop_range(self, arg1, arg2=None, step=None, **_options) -> Iterator:
        """``range`` / ``tl.range`` with the compiler's induction variable: scalar tensors of the bounds'
        integer type (int32 unless a bound is int64)."""
        tl, interp = self.tl, self.interpreter
        bounds = (0, arg1, 1 if step is None else step) if arg2 is None else (arg1, arg2, 1 if step is None else step)
        wide = any(getattr(getattr(b, "dtype", None), "primitive_bitwidth", 32) > 32 for b in bounds)
        ty, np_ty = (tl.int64, np.int64) if wide else (tl.int32, np.int32)
        for i in range(*(_scalar(b) for b in bounds)):
            yield tl.tensor(interp.TensorHandle(np.array([i], dtype=np_ty), ty), ty)

    def float_argument(self, original):
        tl, interp = self.tl, self.interpreter

        def convert(arg):
            if isinstance(arg, float):
                return tl.tensor(interp.TensorHandle(np.array([arg], dtype=np.float32), tl.float32), tl.float32)
            return original(arg)

        return convert

    def extern_elementwise(self):
        get_np_dtype = self.interpreter._get_np_dtype
        TensorHandle = self.interpreter.TensorHandle

        def create_extern_elementwise(builder, lib_name, lib_path, symbol, args, ret_type, is_pure):
            fn = libdevice_function(symbol)
            with np.errstate(all="ignore"):  # inf and nan as the GPU returns them
                data = np.asarray(fn(*(a.data for a in args)))
            return TensorHandle(data.astype(get_np_dtype(ret_type)), ret_type.scalar)

        return create_extern_elementwise

    def libdevice_call(self, name: str):
        """A libdevice function bound to the interpreter's semantic (what the compiler's module map does)."""
        return functools.partial(self.cuda_functions[name], _semantic=self.interpreter.interpreter_semantic)

    def libdevice_name(self, value) -> str | None:
        """The libdevice function a kernel global is bound to, if any."""
        module = getattr(value, "__module__", "")
        name = getattr(value, "__name__", "")
        if module in (self.stub.__name__, self.cuda.__name__) and name in self.cuda_functions:
            return name
        return None


class _Scope:
    """A launch's patches: triton's own scope (and those of device functions it adopted), and the kernel
    modules' globals replaced during the launch; undone in reverse order."""

    def __init__(self, inner, on_restore: Callable[[], None] | None = None):
        self.inner = [inner] if inner is not None else []
        self.changes: list[tuple[dict, str, object]] = []
        self.on_restore = on_restore

    def set(self, namespace: dict, name: str, value) -> None:
        self.changes.append((namespace, name, namespace.get(name, _MISSING)))
        namespace[name] = value

    def restore(self) -> None:
        while self.changes:
            namespace, name, original = self.changes.pop()
            if original is _MISSING:
                namespace.pop(name, None)
            else:
                namespace[name] = original
        while self.inner:
            self.inner.pop().restore()
        if self.on_restore is not None:
            self.on_restore()


_MISSING = object()


class _LangPatches:
    """triton's per-launch patch of triton.language (``interpreter._patch_lang``), plus ours.

    triton patches the language modules again at every device-function call (``tl.sum`` is one), at a
    cost of milliseconds (it walks every member of ``triton.language``), and never undoes it. Here a
    device call inside a launch patches only the language modules the launch has not patched yet, into
    the launch's scope (undone when the launch ends), and replaces its own module's globals for the call."""

    def __init__(self, t: _Triton, original):
        self.t, self.original = t, original
        self.launches: list[tuple[set[int], _Scope]] = []  # in progress: the language modules patched, the scope
        self.bound: dict[int, list[tuple[str, str]]] = {}  # globals dict -> its (key, libdevice name) bindings

    def _langs(self, fn) -> dict[int, object]:
        tl = self.t.tl
        return {id(v): v for v in fn.__globals__.values() if v is tl or v is tl.core}

    def _patch_langs(self, scope: _Scope, langs: dict[int, object]) -> None:
        """Ours, after triton's (which sets its own ``range`` and ``tensor.__index__``)."""
        for lang in langs.values():
            scope.inner.append(_AttrScope(lang, "range", self.t.loop_range))  # loop_bounds, loop_variable
        scope.inner.append(_AttrScope(self.t.tl.tensor, "__index__", _scalar))  # loop_bounds (numpy >= 2.4)

    def _patch_globals(self, scope: _Scope, namespace: dict) -> None:
        scope.set(namespace, "range", self.t.loop_range)  # the builtin range, as the kernel's code sees it
        if id(namespace) not in self.bound:  # libdevice: names bound by `from ... import tanh`, found once
            self.bound[id(namespace)] = [(key, name) for key, value in list(namespace.items())
                                         if (name := self.t.libdevice_name(value)) is not None]
        for key, name in self.bound[id(namespace)]:
            scope.set(namespace, key, self.t.libdevice_call(name))

    def launch(self, fn) -> _Scope:
        """``interpreter._patch_lang``: what GridExecutor calls for every launch."""
        langs = self._langs(fn)
        scope = _Scope(self.original(fn), on_restore=self.launches.pop)
        self._patch_langs(scope, langs)
        self._patch_globals(scope, fn.__globals__)
        self.launches.append((set(langs), scope))
        return scope

    def device(self, fn) -> _Scope:
        """A device-function call (``InterpretedFunction.__call__``)."""
        if not self.launches:  # called outside a launch: patch and undo as a launch would
            return self.launch(fn)
        covered, launch_scope = self.launches[-1]
        langs = self._langs(fn)
        if not set(langs) <= covered:
            launch_scope.inner.append(self.original(fn))
            self._patch_langs(launch_scope, langs)
            covered.update(langs)
        scope = _Scope(None)
        self._patch_globals(scope, fn.__globals__)
        return scope


class _AttrScope:
    """One attribute set until restored."""

    def __init__(self, obj, name: str, value):
        self.obj, self.name, self.original = obj, name, getattr(obj, name, _MISSING)
        setattr(obj, name, value)

    def restore(self) -> None:
        if self.original is _MISSING:
            delattr(self.obj, self.name)
        else:
            setattr(self.obj, self.name, self.original)


def _install(t: _Triton):
    """Apply every patch; return the function that undoes them."""
    interp, jit, autotuner = t.interpreter, t.jit, t.autotuner
    saved = [(interp, "_patch_lang", interp._patch_lang), (interp, "_implicit_cvt", interp._implicit_cvt),
             (interp.InterpreterBuilder, "create_extern_elementwise",
              interp.InterpreterBuilder.__dict__["create_extern_elementwise"]),
             (interp.InterpretedFunction, "__call__", interp.InterpretedFunction.__dict__["__call__"]),
             (autotuner.Autotuner, "do_bench", autotuner.Autotuner.__dict__["do_bench"]),
             (jit.JITFunction, "run", jit.JITFunction.__dict__["run"]),
             (jit.JITFunction, "__call__", jit.JITFunction.__dict__["__call__"])]
    for name in t.cuda_functions:  # libdevice: module attributes (libdevice.tanh, tl.extra.cuda.libdevice.tanh)
        for module in (t.stub, t.cuda):
            if name in vars(module):
                saved.append((module, name, vars(module)[name]))
                setattr(module, name, t.libdevice_call(name))
    patches = _LangPatches(t, interp._patch_lang)
    interp._patch_lang = patches.launch
    interp._implicit_cvt = t.float_argument(interp._implicit_cvt)
    interp.InterpreterBuilder.create_extern_elementwise = t.extern_elementwise()

    def device_call(self, *args, **kwargs):
        # triton patches triton.language for every device function call and never undoes it (_LangPatches)
        scope = patches.device(self.fn)
        try:
            return self.rewrite()(*args, **kwargs)
        except Exception as exc:
            raise interp.InterpreterError(repr(exc)) from exc
        finally:
            scope.restore()

    interp.InterpretedFunction.__call__ = device_call
    # autotune: every config times 0 in an emulation, so min() keeps the first
    autotuner.Autotuner.do_bench = property(lambda self: lambda kernel_call, quantiles: [0.0, 0.0, 0.0])

    interpreted: dict[int, tuple[object, object]] = {}  # id -> (the JITFunction, kept alive; its interpreted twin)

    def as_interpreted(jit_fn):
        if id(jit_fn) not in interpreted:
            interpreted[id(jit_fn)] = (jit_fn, interp.InterpretedFunction(jit_fn.fn))
        return interpreted[id(jit_fn)][1]

    original_run, original_call = jit.JITFunction.run, jit.JITFunction.__call__

    def run(self, *args, grid, warmup, **kwargs):
        if interpreter_requested():
            return as_interpreted(self).run(*args, grid=grid, warmup=warmup, **kwargs)
        return original_run(self, *args, grid=grid, warmup=warmup, **kwargs)

    def call(self, *args, **kwargs):
        if interpreter_requested():
            return as_interpreted(self)(*args, **kwargs)
        return original_call(self, *args, **kwargs)

    jit.JITFunction.run, jit.JITFunction.__call__ = run, call

    def undo():
        for obj, name, value in reversed(saved):
            setattr(obj, name, value)

    return undo


def interpreter_requested() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for the interpreter (triton reads "1", "true", "on", "yes")."""
    return os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes")


@contextlib.contextmanager
def counting_launches() -> Iterator[list[str]]:
    """Inside the block, the names of the Triton kernels launched in the interpreter, in launch order (an
    empty list, always, outside the interpreter or without triton). A model's modules do not say whether
    they launch Triton kernels; this finds out by running them."""
    launched: list[str] = []
    if not interpreter_requested():
        yield launched
        return
    try:
        from triton.runtime import interpreter
    except ImportError:
        yield launched
        return
    original = interpreter.GridExecutor.__call__

    def call(self, *args, **kwargs):
        launched.append(getattr(self.fn, "__name__", "kernel"))
        return original(self, *args, **kwargs)

    interpreter.GridExecutor.__call__ = call
    try:
        yield launched
    finally:
        interpreter.GridExecutor.__call__ = original


class InterpreterCompatWarning(UserWarning):
    """:func:`interpreter_compat` patches nothing: the installed triton is not the tested version."""


def _unpatchable() -> str | None:
    """Why the patches cannot apply here (None: they can)."""
    try:
        version = importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return ""  # nothing to patch, and no Triton kernel to run
    if not version.startswith(TESTED_TRITON + "."):
        return (f"kcert.adapters.triton.interpreter_compat patches triton {TESTED_TRITON}'s interpreter; this is "
                f"triton {version}, which runs unpatched (install the tested version: pip install 'kcert[opaque]')")
    return None


_WARNED: set[str] = set()


@contextlib.contextmanager
def interpreter_compat():
    """Run third-party Triton kernels in the CPU interpreter (see the module docstring and
    :data:`PATCHES`): inside the block, the interpreter handles tensor loop bounds under numpy >= 2.4,
    tensor loop variables, float arguments, libdevice functions, autotuned kernels and functions jitted
    before ``TRITON_INTERPRET=1`` was set as the compiler would. Re-entrant; every patch is undone when
    the outermost block exits. Does nothing (and imports nothing) when ``TRITON_INTERPRET`` is not set.

    Warns
    -----
    InterpreterCompatWarning
        Once, when the installed triton is not the tested version: nothing is patched.
    """
    if not interpreter_requested():
        yield
        return
    reason = _unpatchable()
    if reason is not None:
        if reason and reason not in _WARNED:
            _WARNED.add(reason)
            warnings.warn(reason, InterpreterCompatWarning, stacklevel=3)
        yield
        return
    with _LOCK:
        if _STATE["depth"] == 0:
            _STATE["triton"] = _STATE["triton"] or _Triton()
            _STATE["undo"] = _install(_STATE["triton"])
        _STATE["depth"] += 1
    try:
        yield
    finally:
        with _LOCK:
            _STATE["depth"] -= 1
            if _STATE["depth"] == 0:
                _STATE["undo"]()
                _STATE["undo"] = None
