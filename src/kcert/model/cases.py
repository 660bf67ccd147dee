"""The cases of a model's rows: one module on ref's recorded inputs (forward, and its gradients), and
the whole model (end to end).

A module case's ref and prod are :class:`ModuleCall` kernels: ref's and prod's module (same qualified
name) called on the recorded ``(args, kwargs)`` with the module's parameters handed in as the case's
weights (``kcert.Fixed`` copies of ref's values, so ref, prod and the float64 oracle use the same
numbers). The oracle is the default one: ref's module in real mode on float64 copies.

Gradients that vanish in exact arithmetic (docs/model.md, "Gradients that vanish"): a parameter whose
float64 gradient, on the first replicate's recording, is at most :data:`VANISHING` times the module's
largest gradient (a key projection's bias inside attention: softmax cancels a shift shared by every
score of a query) is pure rounding noise in any precision; kcert's harm scale (ULPs of each output's own
magnitude) would judge that noise against a zero signal. Such gradients are left out of the backward
case and listed in the row's notes. The same holds for *elements* of a parameter's gradient (a fused
query-key-value projection's bias, GPT-2's ``c_attn``: its key third vanishes, its query and value thirds
do not): an element whose float64 gradient is at most :data:`VANISHING` times the module's largest on each
of :data:`VANISHING_DRAWS` draws, and not exactly zero on all of them (an embedding row of a token no draw
used is exactly zero, and certified as usual), is set to zero on both sides (ref, prod and the oracle), and
the row's notes count it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call
from torch.utils._pytree import GetAttrKey, MappingKey, keystr, tree_flatten_with_path

from .. import rounding
from ..backward import gradients
from ..case import Axes, Case, Fixed, Probe
from ..errors import CaseError, KernelError
from ..execution import seeding
from ..execution.realmode import RealMode, in_mode
from .padding import VALID, masked
from .record import RECORDING, SHARED, Layout, Recorder, Slot, draw_model_inputs, layout_of, record, recorded_probes
from .select import compiled_prefix

VANISHING = 1e-9  # float64 gradient / the module's largest: zero up to float64 round-off (about 1e-16)
# draws an element of a parameter's gradient must vanish on (each with its own cotangent) to be left out: a
# genuine gradient element is under 1e-9 x the module's largest on one draw by chance about once in 1e9
VANISHING_DRAWS = 3


def param_key(name: str) -> str:
    return "param__" + name.replace(".", "__")


def output_paths(out) -> dict[str, tuple]:
    """The floating tensor leaves of a module's output: name -> pytree key path."""
    if isinstance(out, torch.Tensor):
        return {"output": ()} if out.is_floating_point() else {}
    found = {}
    for path, leaf in tree_flatten_with_path(out)[0]:
        if isinstance(leaf, torch.Tensor) and leaf.is_floating_point():
            found["output" + keystr(path)] = path
    return found


def _pick(out, path: tuple):
    for key in path:
        if hasattr(key, "idx"):
            out = out[key.idx]
        elif hasattr(key, "key"):
            out = out[key.key]
        else:
            out = getattr(out, key.name)
    return out


def adapted(adapt: Callable, args: tuple, kwargs: dict, where: str) -> tuple[tuple, dict]:
    """``adapt(args, kwargs)``: the arguments ref's module receives made into those prod's module takes (another
    framework's signature, docs/model.md "Another framework's names"), checked to be an ``(args, kwargs)`` pair."""
    try:
        out = adapt(tuple(args), dict(kwargs))
    except Exception as exc:
        raise KernelError(f"{where}: the adapter {getattr(adapt, '__qualname__', adapt)!r} raised "
                          f"{type(exc).__name__} on ref's recorded arguments: {exc}") from exc
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], (tuple, list))
            and isinstance(out[1], Mapping)):
        raise KernelError(f"{where}: the adapter {getattr(adapt, '__qualname__', adapt)!r} must return (args, "
                          f"kwargs), a tuple and a dict; got {type(out).__name__}")
    return tuple(out[0]), dict(out[1])


@dataclass(frozen=True, eq=False)
class ModuleWeight(Fixed):
    """A module's parameter, as ``Fixed``: the same value in every replicate, in its own dtype; the precision
    ladder upcasts it with the recorded activations to a finer rung (a module computes at its weights' and
    inputs' precision)."""

    follows_ladder_rungs = True


def call_module(module: nn.Module, params: Mapping[str, torch.Tensor], args: tuple, kwargs: dict):
    """``module(*args, **kwargs)`` with ``params`` in place of its parameters (none: its own). A torch.compile'd
    module's wrapper is called, so it runs compiled; it names its parameters ``_orig_mod.<name>``."""
    with _checkpointing_off_in_real_mode(module):
        if not params:
            return module(*args, **kwargs)
        prefix = compiled_prefix(module)
        return functional_call(module, {prefix + k: v for k, v in params.items()}, args, kwargs)


@contextlib.contextmanager
def _checkpointing_off_in_real_mode(module: nn.Module):
    """Hugging Face's gradient checkpointing (``gradient_checkpointing = True`` on a module, set by
    ``gradient_checkpointing_enable()``) turned off inside, in a real-mode evaluation only: the oracle's math is
    the same without it, and its recompute in backward runs after the call, outside the parameters handed in
    (float32 weights met float64 activations: the backward rows of a checkpointed decoder layer were SKIPPED).
    The working-precision calls keep it, as training runs them."""
    if not getattr(rounding.real_mode_state, "dtypes", None):
        yield
        return
    flagged = [m for m in module.modules() if getattr(m, "gradient_checkpointing", None) is True]
    for m in flagged:
        m.gradient_checkpointing = False
    try:
        yield
    finally:
        for m in flagged:
            m.gradient_checkpointing = True


@dataclass(frozen=True, eq=False)
class ModuleCall:
    """A module called as a kcert kernel on a recorded ``(args, kwargs)``: ``kernel(**recorded, **params)``
    returns the chosen floating outputs (a tuple, in ``outputs`` order)."""

    module: nn.Module
    layout: Layout
    params: tuple[str, ...]  # the module's parameter names handed in as weights
    outputs: tuple[tuple, ...]  # key paths of the certified outputs
    name: str
    memo: Slot | None = None  # ref's forward: the slot whose recording may hold this module's outputs
    adapt: Callable | None = None  # prod's: (args, kwargs) ref's module receives -> those prod's takes

    def pick(self, out) -> tuple:
        """The certified outputs out of the module's whole output."""
        return tuple(_pick(out, path) for path in self.outputs)

    def __call__(self, **kwargs):
        kwargs.pop(RECORDING, None)
        valid = kwargs.get(VALID)  # the replicate's padding mask, when the model inputs have one (model/padding.py)
        kept = _recorded_outputs(self, kwargs) if self.memo is not None else None
        return masked(kept if kept is not None else self._own(kwargs), valid)

    def _own(self, kwargs: Mapping) -> tuple:
        """The module called on ``kwargs`` (padding not applied)."""
        weights = {param_key(p) for p in self.params}
        values = {k: in_mode(_intermediate(v) if k not in weights else v) for k, v in kwargs.items() if k != VALID}
        args, kw = self.layout.rebuild(values)
        if self.adapt is not None:
            args, kw = adapted(self.adapt, args, kw, self.name)
        out = call_module(self.module, {p: values[param_key(p)] for p in self.params}, args, kw)
        picked = self.pick(out)
        for path, value in zip(self.outputs, picked):
            if not isinstance(value, torch.Tensor):
                raise KernelError(f"{self.name}: output{keystr(path)} is a {type(value).__name__}, a tensor when the "
                                  "case was built")
        return picked


def _intermediate(value):
    """An activation a backward row differentiates is an autograd leaf; in the model it is an intermediate, which
    a module may write into (``ReLU(inplace=True)``, ``out += identity``), and autograd refuses that on a leaf:
    the module gets a copy that is not one (its gradient flows to the leaf unchanged)."""
    if isinstance(value, torch.Tensor) and value.requires_grad and value.is_leaf and torch.is_grad_enabled():
        return value.clone()
    return value


# ModuleCall or ModelCall -> whether its outputs kept by the recording store were found, on the first replicate
# that had them, bit for bit equal to the module's (the model's) own call on the same inputs (kept out of the
# kernel's attributes, which a checkpoint's fingerprint follows)
_MEMO_CHECKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _same_bits(a, b: torch.Tensor) -> bool:
    if not isinstance(a, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if not a.is_floating_point():
        return torch.equal(a, b)
    bits = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))  # -0.0 and NaN payloads count


def _may_stand_in(call, kwargs: dict) -> bool:
    """Whether kept outputs may stand in for ``call``'s own on ``kwargs`` at all: not found unequal on an earlier
    replicate, and nothing asks for a gradient or a real-mode evaluation (the oracle, the algebra ladder and
    backward rows call ref itself)."""
    if _MEMO_CHECKED.get(call) is False or getattr(rounding.real_mode_state, "dtypes", None):
        return False
    return not (torch.is_grad_enabled()
                and any(isinstance(v, torch.Tensor) and v.requires_grad for v in kwargs.values()))


def _checked_once(call, kept: tuple, own: Callable[[], tuple]) -> tuple | None:
    """``kept`` in place of ``own()``, once the first replicate that had kept outputs found them bit for bit
    equal to ``own()`` (computed and returned that time); None ever after if they were not."""
    checked = _MEMO_CHECKED.get(call)
    if checked is None:
        computed = own()
        _MEMO_CHECKED[call] = len(computed) == len(kept) and all(_same_bits(a, b) for a, b in zip(computed, kept))
        return computed
    return tuple(t.clone() for t in kept) if checked else None


def _recorded_outputs(call: ModuleCall, kwargs: dict) -> tuple | None:
    """ref's module's outputs kept from the recording forward of this replicate's draw, when ``kwargs`` are
    exactly that recording's inputs and ref's own parameters (bit for bit) and nothing asks for a gradient or a
    real-mode evaluation: the row then need not call ref's module again on the same inputs (docs/model.md,
    "ref's outputs kept"). The first time, the module is called anyway and must agree bit for bit, else never used."""
    if call.memo is None or not _may_stand_in(call, kwargs):
        return None
    recorded = call.memo.recorded()
    if recorded is None:
        return None
    inputs, outputs = recorded
    if any(not _same_bits(kwargs.get(name), value) for name, value in inputs.items()):
        return None
    prefix = compiled_prefix(call.module)
    if any(not _same_bits(kwargs.get(param_key(p)), call.module.get_parameter(prefix + p)) for p in call.params):
        return None
    return _checked_once(call, outputs, lambda: call._own(kwargs))


@dataclass(frozen=True)
class ModuleCases:
    """The cases of one module, and what the rows say besides their certificates."""

    forward: Case | None
    backward: Case | None
    forward_skipped: str | None
    backward_skipped: str | None
    notes: tuple[str, ...]  # both rows'
    recorder: Recorder
    backward_notes: tuple[str, ...] = ()  # the backward row's alone (what its gradients leave out)


def _shared_params(ref_mod: nn.Module, prod_mod: nn.Module) -> tuple[dict, str | None]:
    own = {n: p for n, p in ref_mod.named_parameters() if "_orig_mod." not in n}
    other = {n.replace("_orig_mod.", ""): p for n, p in prod_mod.named_parameters()}
    if {n: tuple(p.shape) for n, p in own.items()} != {n: tuple(p.shape) for n, p in other.items()}:
        return {}, (f"prod's parameters differ from ref's in names or shapes ({len(other)} vs {len(own)}); each "
                    "module runs with its own, and parameter gradients are not certified")
    return own, None


def _grad_recording(ref_model: nn.Module, ref_mod: nn.Module, kwargs: dict, where: str, extra: Mapping,
                    backward: bool) -> tuple[tuple, dict] | None:
    """The module's first call recorded with grad on: which floating arguments carry gradient in the model
    (activations, which the algebra gate's wide and small points scale) and which do not (an attention mask, a
    rotary table: scaled, a mask's most negative value widened past the dtype's range is -inf, which the model
    never gives and a kernel may not guard). Taken for forward-only runs too: without it every floating argument
    was an activation there, and an online softmax without a guard for lanes of masked keys FAILed the algebra
    gate on widened masks alone (docs/model.md, "Study"). For a forward-only run a model that cannot run with
    grad keeps the old rule (None: every floating argument an activation); a backward run needs it and raises."""
    if backward:
        return record(ref_model, ref_mod, kwargs, where, extra, grad=True)
    try:
        return record(ref_model, ref_mod, kwargs, where, extra, grad=True)
    except KernelError:
        return None


def module_cases(name: str, ref_model: nn.Module, ref_mod: nn.Module, prod_mod: nn.Module,
                 inputs: Mapping[str, Probe], extra: Mapping, dtype: torch.dtype, seed: int, backward: bool,
                 case_name: str, copies: dict[int, torch.Tensor] | None = None,
                 padding: str | None = None, adapt: Callable | None = None,
                 training_dtype: torch.dtype | None = None) -> ModuleCases:
    """The forward and backward cases of module ``name`` (either None with the reason when it cannot be
    certified: no floating output in both models, nothing to differentiate). ``copies`` (id of a parameter ->
    its copy) shares the weights' copies between the cases of one run, all built before its rows: one copy
    per parameter, not one per selected module that contains it. ``padding``: the model input that marks
    padded positions (model/padding.py), whose outputs are zeroed on both sides. ``adapt``: prod's module's
    arguments made from ref's (:func:`adapted`). ``training_dtype``: the precision harm is judged in (the
    autocast dtype of a mixed-precision run; None: the case's default)."""
    where = f"module {name!r}"
    cpu = torch.device("cpu")
    g = seeding.generator(seed, seeding.INPUTS, 0)
    kwargs = draw_model_inputs(inputs, g, cpu, dtype)
    recorded = record(ref_model, ref_mod, kwargs, where, extra)
    layout = layout_of(ref_mod, recorded, _grad_recording(ref_model, ref_mod, kwargs, where, extra, backward), where)
    values = layout.flatten(recorded, where)
    if padding is not None:
        values[VALID] = kwargs[padding]
    params, param_note = _shared_params(ref_mod, prod_mod)
    copies = {} if copies is None else copies
    for v in params.values():
        if id(v) not in copies:  # the parameters live in ref's model all run long: their ids are not reused
            copies[id(v)] = v.detach().clone()
    param_values = {p: copies[id(v)] for p, v in params.items()}
    weights = {param_key(p): ModuleWeight(v) for p, v in param_values.items()}
    notes = [param_note] if param_note else []

    def call(module, label, paths=None, adapt=None):
        return ModuleCall(module, layout, tuple(params), tuple(paths or ()), label, adapt=adapt)

    trial = {**values, **{param_key(p): v for p, v in param_values.items()}}
    outs = {}
    for role, module in (("ref", ref_mod), ("prod", prod_mod)):
        try:
            with torch.no_grad():
                args, kw = layout.rebuild(values)
                if role == "prod" and adapt is not None:
                    args, kw = adapted(adapt, args, kw, where)
                out = call_module(module, param_values, args, kw)
        except KernelError:  # the adapter's, which names itself
            raise
        except Exception as exc:
            raise KernelError(f"{where}: {role}'s module raised {type(exc).__name__} on ref's recorded inputs: "
                              f"{exc}") from exc
        outs[role] = output_paths(out)
    if list(outs["prod"]) == ["output"] and "output" not in outs["ref"] and "output[0]" in outs["ref"]:
        # prod returns a bare tensor where ref returns a tuple (Hugging Face's attention: (output, weights)): it
        # stands for ref's first output; the rest of ref's are named below as ref's only
        outs["prod"] = {"output[0]": outs["prod"]["output"]}
    common = [k for k in outs["ref"] if k in outs["prod"]]
    only = sorted(set(outs["ref"]) ^ set(outs["prod"]))
    if only:
        notes.append("outputs not in both models, not compared: " + ", ".join(
            f"{k} ({'ref' if k in outs['ref'] else 'prod'} only)" for k in only))
    slot = Slot()
    recorder = Recorder(ref_model, ref_mod, inputs, extra, layout, slot, dtype, where, padding)
    shapes = {k: tuple(v.shape) for k, v in values.items()}
    probes = recorded_probes(recorder, shapes)
    if not common:
        reason = "no floating output in both models" + (f" ({', '.join(only)})" if only else "")
        return ModuleCases(None, None, reason, reason, tuple(notes), recorder)
    paths = [outs["ref"][k] for k in common]
    ref_out = _run(call(ref_mod, "ref", paths), trial)
    buckets = [Axes(-1) if o.dim() else Axes() for o in ref_out]
    kind = type(ref_mod).__name__
    ref_call = ModuleCall(ref_mod, layout, tuple(params), tuple(paths), f"ref {name}", memo=slot)
    forward = Case(name=f"{case_name}:{name}", ref=ref_call,
                   prod=call(prod_mod, f"prod {name}", [outs["prod"][k] for k in common], adapt), inputs=probes,
                   weights=weights, buckets=buckets,
                   dtype=dtype, output_names=common, training_dtype=training_dtype,
                   description=f"{kind} {name!r} on ref's recorded inputs ({type(prod_mod).__name__} as prod)")
    if not backward:
        return ModuleCases(forward, None, None, "backward not asked for", tuple(notes), recorder)

    def trial_of(replicate: int) -> dict:  # the values of another draw, recorded as the first
        drawn = draw_model_inputs(inputs, seeding.generator(seed, seeding.INPUTS, replicate), cpu, dtype)
        return {**layout.flatten(record(ref_model, ref_mod, drawn, where, extra), where),
                **({VALID: drawn[padding]} if padding is not None else {}),
                **{param_key(p): v for p, v in param_values.items()}}

    back, reason, more = _backward_case(forward, layout, trial, params, paths, common, where, trial_of)
    if back is not None and training_dtype is not None:  # the gradient case is a new Case: harm in the same format
        back = dataclasses.replace(back, training_dtype=training_dtype)
    return ModuleCases(forward, back, None, reason, tuple(notes), recorder, tuple(more))


def _run(kernel: Callable, values: dict, grad: bool = False):
    with torch.enable_grad() if grad else torch.no_grad():
        return kernel(**values)


def _exact_gradients(forward: Case, trial: dict, candidates: list[str], names, draw: int):
    """ref's float64 gradients on one draw's recording for one cotangent (drawn from ``draw``): (the names of
    the outputs that have a gradient, {candidate: its gradient or None when no output depends on it})."""
    exact = {k: v.detach().to(torch.float64) if v.is_floating_point() else v for k, v in trial.items()}
    leaves = {k: exact[k].clone().requires_grad_() for k in candidates}
    g = torch.Generator().manual_seed(draw)
    with RealMode(torch.float64), torch.enable_grad():
        outs = forward.ref(**{**exact, **leaves})
        live = [(o, n) for o, n in zip(outs, names) if o.requires_grad]
        if not live:
            return [], {}
        cot = [torch.randn(o.shape, generator=g, dtype=torch.float64) + 0.1 for o, _ in live]
        grads = torch.autograd.grad([o for o, _ in live], list(leaves.values()), cot, allow_unused=True)
    return [n for _, n in live], dict(zip(leaves, grads))


def _largest(grads: Mapping) -> float:
    return max((float(gr.abs().max()) for gr in grads.values() if gr is not None and gr.numel()), default=0.0)


def _vanishing_elements(forward: Case, first: Mapping, keys: list[str], names, trial_of) -> dict[str, torch.Tensor]:
    """Per parameter in ``keys``: the elements of its gradient that vanish in exact arithmetic, as a bool mask
    (only parameters with some): at most VANISHING x the module's largest gradient on each of VANISHING_DRAWS
    draws (``first``: the first draw's gradients) and not exactly zero on every one. Parameters only: an
    activation's elements change meaning from draw to draw (positions, tokens)."""
    scale = _largest(first)
    tiny = {k: first[k].abs() <= VANISHING * scale for k in keys if k.startswith("param__")}
    tiny = {k: m for k, m in tiny.items() if bool(m.any())}
    if not tiny:
        return {}
    nonzero = {k: first[k] != 0 for k in tiny}
    for draw in range(1, VANISHING_DRAWS):
        _, grads = _exact_gradients(forward, trial_of(draw), list(first), names, draw)
        scale = _largest(grads)
        for k in tiny:
            tiny[k] &= grads[k].abs() <= VANISHING * scale
            nonzero[k] |= grads[k] != 0
    masks = {k: tiny[k] & nonzero[k] for k in tiny}
    return {k: m for k, m in masks.items() if bool(m.any())}


_CHECKPOINT_HINT = (" (it was raised in torch.utils.checkpoint's recompute, which runs in backward, outside the float64 "
                    "parameters kcert hands in: turn the module's activation checkpointing off for the run; Hugging "
                    "Face's gradient_checkpointing_enable() is turned off in the float64 evaluations by kcert itself)")


def _raised_in_checkpoint(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.replace("\\", "/").endswith("torch/utils/checkpoint.py"):
            return True
        tb = tb.tb_next
    return False


def _backward_case(forward: Case, layout: Layout, trial: dict, params: Mapping, paths, names, where, trial_of):
    """The gradient case of ``forward``: floating activations and parameters that reach an output and
    whose exact gradient does not vanish (elements of a parameter's gradient that vanish set to zero on both
    sides); (None, reason, notes) when nothing is left. ``trial_of(r)``: the case's values of draw ``r``."""
    candidates = sorted(layout.activations, key=list(forward.inputs).index) + [param_key(p) for p in params]
    try:  # ref's exact gradients on the first replicate's recording, for one cotangent
        live_names, grads = _exact_gradients(forward, trial, candidates, names, 0)
        if not live_names:
            return None, "no output depends on a floating input or parameter (nothing to differentiate)", []
        size = {k: (0.0 if gr is None else float(gr.abs().max())) for k, gr in grads.items()}
        scale = max(size.values(), default=0.0)
        unused = [k for k in candidates if grads[k] is None]
        vanishing = [k for k in candidates if k not in unused and size[k] <= VANISHING * scale]
        wrt = [k for k in candidates if k not in unused and k not in vanishing]
        masks = _vanishing_elements(forward, grads, wrt, names, trial_of)
    except Exception as exc:  # noqa: BLE001 - reported in the row: the backward case cannot be built
        return None, f"the float64 gradient of ref could not be evaluated: {type(exc).__name__}: {exc}" \
            f"{_CHECKPOINT_HINT if _raised_in_checkpoint(exc) else ''}", []
    notes = []
    if unused:
        notes.append("inputs and parameters no output depends on, not differentiated: "
                     + ", ".join(_pretty(k) for k in unused))
    whole = [k for k, m in masks.items() if bool(m.all())]  # every element vanishes on every draw
    vanishing += whole
    wrt = [k for k in wrt if k not in whole]
    masks = {k: m for k, m in masks.items() if k not in whole}
    if vanishing:
        notes.append("gradients that vanish in exact arithmetic, not certified (float64 |grad| <= "
                     f"{VANISHING:g} x the module's largest): " + ", ".join(_pretty(k) for k in vanishing))
    if masks:
        notes.append(f"elements of gradients that vanish in exact arithmetic (float64 |grad| <= {VANISHING:g} x the "
                     f"module's largest on {VANISHING_DRAWS} draws), set to zero on both sides, not certified: "
                     + ", ".join(f"{_pretty(k)} ({int(m.sum())} of {m.numel()})" for k, m in masks.items()))
    if not wrt:
        return None, "every gradient is unused or vanishes in exact arithmetic", notes
    if len(live_names) != len(names):
        notes.append("outputs without a gradient (computed without autograd), left out of the backward row: "
                     + ", ".join(n for n in names if n not in live_names))
        keep = [i for i, n in enumerate(names) if n in live_names]
        forward = Case(name=forward.name, ref=_Subset(forward.ref, tuple(keep)), prod=_Subset(forward.prod, tuple(keep)),
                       inputs=forward.inputs, weights=forward.weights, dtype=forward.dtype,
                       output_names=live_names, description=forward.description)
    missing = _backward_not_implemented(forward.prod, trial, wrt)
    if missing:
        return None, missing, notes
    try:
        back = gradients(forward, wrt=tuple(wrt), include_forward=False, name=f"{forward.name}:grad")
    except CaseError as exc:
        return None, f"kcert.gradients refused the module: {exc}", notes
    if masks:
        zeroed = tuple(masks.get(k) for k in wrt)  # the backward case's outputs are grad_<k>, in wrt's order
        back = dataclasses.replace(back, ref=_Zeroed(back.ref, zeroed), prod=_Zeroed(back.prod, zeroed))
    return back, None, notes


def _backward_not_implemented(prod: Callable, trial: dict, wrt: list[str]) -> str | None:
    """Why prod's module has no backward on this device, when its gradient raises NotImplementedError on the first
    draw (flex attention on a CPU: "FlexAttention does not support backward on CPU"): the row is SKIPPED with it,
    where the run stopped in the row. Any other error is left to the row, which names it."""
    values = {k: v.detach().clone().requires_grad_() if k in wrt else v for k, v in trial.items()}
    try:
        with torch.enable_grad():
            outs = [o for o in prod(**values) if isinstance(o, torch.Tensor) and o.requires_grad]
            if outs:
                torch.autograd.grad(outs, [values[k] for k in wrt], [torch.ones_like(o) for o in outs],
                                    allow_unused=True)
    except NotImplementedError as exc:
        return f"prod's module has no backward here: NotImplementedError: {exc}"
    except Exception:  # noqa: BLE001 - not a missing backward: the row runs and names it
        return None
    return None


@dataclass(frozen=True, eq=False)
class _Zeroed:
    """A gradient kernel whose outputs have the elements under ``masks`` set to zero (None: left as they are)."""

    kernel: Callable
    masks: tuple

    def __call__(self, **kwargs):
        out = self.kernel(**kwargs)
        return tuple(o if m is None else o.masked_fill(m.to(o.device), 0) for o, m in zip(out, self.masks))


@dataclass(frozen=True, eq=False)
class _Subset:
    kernel: Callable
    keep: tuple[int, ...]

    def __call__(self, **kwargs):
        out = self.kernel(**kwargs)
        return tuple(out[i] for i in self.keep)


def _pretty(key: str) -> str:
    return key.removeprefix("param__").replace("__", ".") if key.startswith("param__") else key


# --- end to end -----------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class ModelCall:
    """The whole model as a kernel: ``model(**inputs)``'s logits (or its floating outputs), and the loss."""

    model: nn.Module
    outputs: tuple[tuple, ...]
    loss: Callable | None
    extra: Mapping
    padding: str | None = None  # the input marking padded positions: the outputs are zeroed there (model/padding.py)

    def pick(self, out, kwargs: Mapping) -> tuple:
        """The certified outputs out of the model's whole output on ``kwargs`` (the loss computed on it)."""
        picked = tuple(_pick(out, p) for p in self.outputs)
        if self.loss is not None:
            value = self.loss(out, kwargs)
            if not isinstance(value, torch.Tensor) or value.numel() != 1:
                raise KernelError(f"loss must return a scalar tensor, got {type(value).__name__}")
            picked += (value.reshape(()),)
        return picked

    def __call__(self, **kwargs):
        kept = _kept_model_outputs(self, kwargs)
        out = kept if kept is not None else self.compute(kwargs)
        return masked(out, None if self.padding is None else kwargs[self.padding])

    def compute(self, kwargs: Mapping) -> tuple:
        """The model run on ``kwargs`` (in the current evaluation's precision) and its outputs picked."""
        kwargs = {k: in_mode(v) for k, v in kwargs.items()}
        with _checkpointing_off_in_real_mode(self.model):
            return self.pick(self.model(**kwargs, **self.extra), kwargs)


def _kept_model_outputs(call: ModelCall, kwargs: dict) -> tuple | None:
    """ref's model outputs kept by the recording store's forward of this draw, when ``kwargs`` are exactly that
    draw (the store keys its files by a digest of the drawn inputs), the model is the store's (ref's), and nothing
    asks for a gradient or a real-mode evaluation: the end-to-end row then need not run ref's whole model again
    (docs/model.md, "ref's outputs kept"). The first time, the model runs anyway and must agree bit for bit, else
    the kept outputs are never used."""
    store = SHARED[-1] if SHARED else None
    if store is None or store.model is not call.model or not _may_stand_in(call, kwargs):
        return None
    kept = store.model_outputs(kwargs)
    return None if kept is None else _checked_once(call, kept, lambda: call.compute(kwargs))


def end_to_end_case(ref_model: nn.Module, prod_model: nn.Module, inputs: Mapping[str, Probe], extra: Mapping,
                    loss: Callable | None, dtype: torch.dtype, seed: int, case_name: str,
                    padding: str | None = None, prod_extra: Mapping | None = None,
                    training_dtype: torch.dtype | None = None) -> tuple[Case, tuple[str, ...]]:
    """The model's own outputs (its logits and its own loss, those it returns, else its floating outputs; the
    loss given too), zeroed at the padded positions of ``padding`` (the loss is the user's: it masks padding as
    training does), and the row's notes. prod's outputs are found in its own output the same way
    (``prod_extra``: its forward's keywords, when not ref's): a port that returns its logits as a bare tensor is
    compared with ref's ``logits``; a prod that returns its loss without logits (a fused linear cross-entropy
    in training mode) is compared on the loss alone, and a note says so."""
    g = seeding.generator(seed, seeding.INPUTS, 0)
    kwargs = draw_model_inputs(inputs, g, torch.device("cpu"), dtype)
    prod_extra = extra if prod_extra is None else prod_extra
    outs = {}
    for role, model, keywords in (("ref", ref_model, extra), ("prod", prod_model, prod_extra)):
        try:
            with torch.no_grad():
                outs[role] = model(**kwargs, **keywords)
        except Exception as exc:
            raise KernelError(f"{case_name}: {role}_model raised {type(exc).__name__} on the inputs: {exc}") from exc
    found = _model_outputs(outs["ref"])
    if not found and loss is None:
        raise CaseError(f"{case_name}: the model returns no floating tensor and no loss was given")
    prod_found = _model_outputs(outs["prod"])
    notes: tuple[str, ...] = ()
    if list(prod_found) != list(found):
        shared = [n for n in found if n in prod_found]
        if len(found) == 1 and list(prod_found) == ["output"]:  # a bare tensor stands for ref's one output
            prod_found = {next(iter(found)): prod_found["output"]}
        elif shared and set(found) | set(prod_found) <= set(OWN_OUTPUTS):  # logits on one side only: the loss
            why = " (a fused linear cross-entropy computes the loss without them)"
            notes = tuple(f"{name}: {role}_model returns none, so this row compares {' and '.join(shared)} only"
                          f"{why if name == 'logits' else ''}" for role, mine, other
                          in (("prod", found, prod_found), ("ref", prod_found, found)) for name in mine
                          if name not in other)
            found, prod_found = {n: found[n] for n in shared}, {n: prod_found[n] for n in shared}
        else:
            raise CaseError(f"{case_name}: the two models return other outputs (ref: {', '.join(found) or 'none'}; "
                            f"prod: {', '.join(prod_found) or 'none'}), so the end-to-end row cannot pair them; "
                            "give end_to_end=False (--no-end-to-end), or wrap one model so that both return the same")
    for role in ("ref", "prod") if loss is not None else ():  # the user's loss, on each model's own output
        try:
            loss(outs[role], kwargs)
        except Exception as exc:
            raise CaseError(f"{case_name}: the loss given raised {type(exc).__name__} on {role}_model's output "
                            f"({type(outs[role]).__name__}): {exc}") from exc
    given = "loss (given)" if "loss" in found else "loss"  # the model's own loss keeps its name
    names = list(found) + ([given] if loss is not None else [])
    shapes = [_pick(outs["ref"], p).dim() for p in found.values()] + ([0] if loss is not None else [])
    buckets = [Axes(-1) if d else Axes() for d in shapes]
    case = Case(name=f"{case_name}:end to end", ref=ModelCall(ref_model, tuple(found.values()), loss, extra, padding),
                prod=ModelCall(prod_model, tuple(prod_found.values()), loss, prod_extra, padding),
                inputs=dict(inputs), buckets=buckets, dtype=dtype, output_names=names, training_dtype=training_dtype,
                description="the whole model on the drawn inputs (errors of every module, propagated)")
    return case, notes


# The named results of a model's output (transformers' ModelOutput) the end-to-end row certifies when present:
# the logits, and the model's own loss (computed when the inputs hold labels).
OWN_OUTPUTS = ("logits", "loss")


def _model_outputs(out) -> dict[str, tuple]:
    """A model's certified outputs: those of ``OWN_OUTPUTS`` it returns as tensors, else every floating tensor
    (name -> path)."""
    own = {name: (_attr_path(out, name),) for name in OWN_OUTPUTS
           if isinstance(getattr(out, name, None), torch.Tensor)}
    return own or output_paths(out)


def _attr_path(out, name):
    return MappingKey(name) if isinstance(out, Mapping) else GetAttrKey(name)
