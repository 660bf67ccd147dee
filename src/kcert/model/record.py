"""Recording what one module of ref receives: the model inputs drawn from a probe's generator, ref run
with a forward pre-hook on the module that keeps its ``(args, kwargs)`` and stops the forward there.

A module case's probes (:func:`recorded_probes`) replay a recording: the first probe draws the model
inputs with the replicate's generator, runs the recording and keeps its tensor leaves in a slot shared
with the following probes, each of which returns one leaf (the runner draws a replicate's probes in
order from one generator, so the slot always holds that replicate's recording). The leaves that are not
tensors (flags, None, a config) are fixed: each recording must give the same ones.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.utils._pytree import keystr, tree_flatten_with_path, tree_unflatten

from ..case import Custom, Probe
from ..errors import CaseError, KernelError
from .padding import VALID
from .select import eager_model

RECORDING = "model_inputs"  # the name of the probe that runs the recording forward

# The recording store of the running certify_model (kcert.model.store), if any. Held here, outside the
# recorders, so that a case's fingerprint (which follows the probes' attributes) does not depend on it.
SHARED: list = []


class _Stop(Exception):
    """Raised by the pre-hook once the module's inputs are recorded: the rest of the forward is not needed."""


def draw_model_inputs(inputs: Mapping[str, Probe], generator: torch.Generator, device, dtype) -> dict:
    """The model's keyword inputs drawn as the runner draws probes (floating draws rounded to ``dtype``)."""
    precision = torch.float64 if dtype == torch.float64 else torch.float32
    out = {}
    for name, probe in inputs.items():
        value = probe.sample(generator, device, precision)
        out[name] = value.to(dtype) if probe.rounds_to_case_dtype and value.is_floating_point() else value
    return out


def record(model: nn.Module, module: nn.Module, kwargs: dict, where: str, extra: Mapping | None = None,
           grad: bool = False) -> tuple[tuple, dict]:
    """``module``'s ``(args, kwargs)`` on its first call in ``model(**kwargs, **extra)``."""
    kept = []

    def hook(mod, args, kw):
        kept.append((args, kw))
        raise _Stop

    handle = module.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with torch.enable_grad() if grad else torch.no_grad():
            model(**kwargs, **(extra or {}))
    except _Stop:
        pass
    except Exception as exc:
        raise KernelError(f"{where}: ref_model raised {type(exc).__name__} while recording the module's inputs: "
                          f"{exc}") from exc
    finally:
        handle.remove()
    if not kept:
        raise KernelError(f"{where}: the module was not called by ref_model's forward on these inputs")
    return kept[0]


def _slug(text: str) -> str:
    text = re.sub(r"\W+", "_", text).strip("_")
    return text if text and not text[0].isdigit() else f"x_{text}"


def leaf_names(module: nn.Module, paths) -> list[str]:
    """Argument names for the leaves of ``(args, kwargs)``: positional arguments named after the forward's
    parameters (``hidden_states``), keywords after their key, nested ones with their index."""
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names, taken = [], {RECORDING, VALID}
    for path in paths:
        keys = [getattr(k, "idx", getattr(k, "key", getattr(k, "name", None))) for k in path]
        head = keys[1] if len(keys) > 1 else "arg"
        if keys[0] == 0 and isinstance(head, int):
            head = params[head] if head < len(params) else f"arg{head}"
        name = _slug("_".join(str(k) for k in [head, *keys[2:]]))
        while name in taken:
            name += "_"
        taken.add(name)
        names.append(name)
    return names


@dataclass
class Layout:
    """The structure of a module's recorded inputs: the pytree spec of ``(args, kwargs)``, per leaf its
    argument name (tensor leaves) or fixed value, and which floating leaves are activations (they carry
    gradient in the model: scaled by the algebra gate's wide and small points, differentiated)."""

    spec: object
    names: list[str | None]
    fixed: dict[int, object]
    activations: set[str] = field(default_factory=set)
    floating: set[str] = field(default_factory=set)

    def flatten(self, recorded: tuple[tuple, dict], where: str) -> dict[str, torch.Tensor]:
        """The tensor leaves of a recording by name; its other leaves must equal the layout's."""
        pairs, spec = tree_flatten_with_path(recorded)
        if spec != self.spec:
            raise KernelError(f"{where}: the module receives arguments of another structure in this replicate "
                              f"than in the first recording ({spec} vs {self.spec})")
        out = {}
        for i, ((path, leaf), name) in enumerate(zip(pairs, self.names)):
            if name is not None:
                if not isinstance(leaf, torch.Tensor):
                    raise KernelError(f"{where}: argument {keystr(path)} is a tensor in the first recording, a "
                                      f"{type(leaf).__name__} now")
                out[name] = leaf.detach()
            elif not _same(leaf, self.fixed[i]):
                raise CaseError(f"{where}: argument {keystr(path)} ({type(leaf).__name__}) is not a tensor and "
                                f"differs between replicates ({self.fixed[i]!r} then {leaf!r}); kcert replays "
                                "non-tensor arguments as fixed values")
        return out

    def rebuild(self, values: Mapping[str, torch.Tensor]) -> tuple[tuple, dict]:
        leaves = [values[n] if n is not None else self.fixed[i] for i, n in enumerate(self.names)]
        return tree_unflatten(leaves, self.spec)


def _same(a, b) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, (type(None), bool, int, float, str, torch.dtype, torch.device)):
        return a == b
    try:
        return bool(a == b)
    except Exception:  # noqa: BLE001 - an object without a usable == is compared by identity above
        return False


def layout_of(module: nn.Module, recorded: tuple[tuple, dict], grad_recorded: tuple[tuple, dict] | None,
              where: str) -> Layout:
    pairs, spec = tree_flatten_with_path(recorded)
    names = leaf_names(module, [p for p, _ in pairs])
    kept, fixed, floating = [], {}, set()
    for i, ((path, leaf), name) in enumerate(zip(pairs, names)):
        if isinstance(leaf, torch.Tensor):
            kept.append(name)
            if leaf.is_floating_point():
                floating.add(name)
        else:
            kept.append(None)
            fixed[i] = leaf
    activations = set()
    if grad_recorded is not None:
        grad_pairs, _ = tree_flatten_with_path(grad_recorded)
        activations = {n for (_, leaf), n in zip(grad_pairs, kept)
                       if n in floating and isinstance(leaf, torch.Tensor) and leaf.requires_grad}
    if not activations:  # a model without trainable parameters: every floating argument is an activation
        activations = set(floating)
    return Layout(spec, kept, fixed, activations, floating)


_HELD: dict[int, dict[str, torch.Tensor]] = {}  # Slot -> the tensor leaves of its latest recording
_OUTPUTS: dict[int, tuple[torch.Tensor, ...]] = {}  # Slot -> ref's module's outputs in that recording, if kept


class Slot:
    """Where the recording probe hands the latest recording's tensor leaves to the leaf probes. It holds no
    attribute of its own (the values live in :data:`_HELD`), so a checkpoint's fingerprint of the case, which
    follows the probes' functions and their attributes, does not depend on which replicate ran last."""

    __slots__ = ()

    def put(self, values: dict[str, torch.Tensor], outputs: tuple[torch.Tensor, ...] | None = None) -> None:
        _HELD[id(self)] = values
        if outputs is None:
            _OUTPUTS.pop(id(self), None)
        else:
            _OUTPUTS[id(self)] = outputs

    def recorded(self) -> tuple[dict[str, torch.Tensor], tuple[torch.Tensor, ...]] | None:
        """The latest recording's inputs and ref's module's outputs on them, when the recording kept both."""
        outputs = _OUTPUTS.get(id(self))
        return None if outputs is None else (_HELD[id(self)], outputs)

    def take(self, name: str) -> torch.Tensor:
        values = _HELD.get(id(self))
        if values is None or name not in values:
            raise KernelError(f"recorded argument {name!r} was asked for before its recording ran (kcert draws "
                              "a module case's probes in order; the recording probe comes first)")
        return values[name]

    def __del__(self):
        _HELD.pop(id(self), None)
        _OUTPUTS.pop(id(self), None)


@dataclass(frozen=True, eq=False)
class Recorder:
    """The recording probe's function: draws the model inputs, records the module, fills the slot."""

    ref_model: nn.Module
    module: nn.Module
    inputs: Mapping[str, Probe]
    extra: Mapping
    layout: Layout
    slot: Slot
    dtype: torch.dtype
    where: str
    padding: str | None = None  # the model input marking padded positions, handed on as VALID (model/padding.py)

    def __call__(self, generator, device):
        kwargs = draw_model_inputs(self.inputs, generator, device, self.dtype)
        store = SHARED[-1] if SHARED else None
        values = store.leaves(self, kwargs) if store is not None else None
        outputs = store.outputs(self) if values is not None else None
        if values is None:  # no store, or one that does not hold this module: its own recording forward
            values = self.layout.flatten(record(self.ref_model, self.module, kwargs, self.where, self.extra),
                                         self.where)
        if self.padding is not None:
            values = {**values, VALID: kwargs[self.padding]}
        self.slot.put(values, outputs)
        return torch.zeros((), dtype=torch.int64, device=device)  # a token: the kernels ignore it


@dataclass(frozen=True, eq=False)
class Take:
    slot: Slot
    name: str

    def __call__(self, generator, device):
        return self.slot.take(self.name).to(device).clone()  # a kernel that writes into it cannot alter the other's


@dataclass(frozen=True, eq=False)
class RecordedLeaf(Custom):
    """One recorded argument. It keeps its own dtype (it was computed by ref in working precision); the
    algebra gate's wide and small points scale it only when it is an activation (a mask or a rotary
    table scaled would no longer be one)."""

    activation: bool = False
    factor: float = 1.0

    rounds_to_case_dtype = False
    follows_ladder_rungs = True  # upcast at a finer rung of the precision ladder: prod's module computes there

    def sample(self, generator, device, precision):
        out = self.fn(generator, device)
        return out * self.factor if self.factor != 1.0 and out.is_floating_point() else out

    def widened(self, factor):
        if not self.activation:
            return self
        return RecordedLeaf(self.fn, f"{self.description} x{self.factor * factor:g}", self.shape, True,
                            self.factor * factor)

    def scaled(self, factor):
        return self.widened(factor)


def recorded_probes(recorder: Recorder, shapes: Mapping[str, tuple]) -> dict[str, Probe]:
    """The module case's inputs: the recording probe, then one probe per recorded tensor argument."""
    probes: dict[str, Probe] = {RECORDING: Custom(recorder, f"model inputs, recorded at {recorder.where}", ())}
    for name in recorder.layout.names:
        if name is not None:
            probes[name] = RecordedLeaf(Take(recorder.slot, name), f"{name} recorded from ref",
                                        tuple(shapes[name]), name in recorder.layout.activations)
    if recorder.padding is not None:
        probes[VALID] = RecordedLeaf(Take(recorder.slot, VALID), f"the model input {recorder.padding!r} (padding)",
                                     tuple(shapes[VALID]))
    return probes


def first_calls(model: nn.Module, modules: Mapping[str, nn.Module], kwargs: dict,
                extra: Mapping | None = None) -> dict[str, tuple[tuple, dict]]:
    """Each module's ``(args, kwargs)`` on its first call in one forward of ``model`` (no grad); {} when the
    forward raises (the rows report a model that does not run)."""
    kept: dict[str, tuple[tuple, dict]] = {}
    handles = []
    for name, module in modules.items():
        if isinstance(module, torch.jit.ScriptModule):  # takes no hooks (not_callable_alone says why)
            continue

        def hook(mod, args, kw, name=name):
            kept.setdefault(name, (args, kw))
        handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        with torch.no_grad():
            model(**kwargs, **(extra or {}))
    except Exception:  # noqa: BLE001 - the check is advisory; a model that raises is reported by its rows
        return {}
    finally:
        for handle in handles:
            handle.remove()
    return kept


def not_callable_alone(prod_module: nn.Module) -> str | None:
    """Why prod's module cannot be run on its own on ref's recorded inputs, in words; None when it can. A module
    whose class defines no forward holds parameters for a graph that computes in its root (``torch.export``'s
    ``module()``); a TorchScript module takes no hooks and no parameters swapped in."""
    if isinstance(prod_module, torch.jit.ScriptModule):
        return ("it is a TorchScript module (torch.jit.script or torch.jit.trace), which kcert can neither hook nor "
                "run with the certified parameters swapped in")
    kind = type(eager_model(prod_module))  # a compiled module: its wrapped one's class
    if kind.forward is nn.Module.forward and kind.__call__ is nn.Module.__call__:  # no forward, no call of its own
        return (f"its class ({kind.__name__}) defines no forward: it holds parameters for a graph that "
                "computes in its root module (torch.export's module(), an fx graph; torch.export.unflatten(program) "
                "keeps an exported program's modules callable)")
    return None


def call_difference(ref_call: tuple[tuple, dict], prod_module: nn.Module) -> str | None:
    """Why prod's module cannot be called with the arguments ref's module receives (``ref_call``, its first call in
    ref's model): its forward's signature does not bind them (another framework's module: ``forward(x, freqs)``
    where ref's receives ``hidden_states=``, ``position_embeddings=``, ``attention_mask=``), in words; None when
    they bind or the signature cannot be read (a builtin forward: the row then finds out)."""
    try:
        signature = inspect.signature(prod_module.forward)
    except (TypeError, ValueError):
        return None
    args, kwargs = ref_call
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = [f"{len(args)} positional"] * bool(args) + [", ".join(map(repr, kwargs))] * bool(kwargs)
        shown = str(signature) if len(str(signature)) <= 100 else str(signature)[:97] + "..."
        return (f"its forward{shown} does not take what ref's module receives ({'; '.join(given) or 'nothing'}): "
                f"{exc}")
    return None


def interface_difference(ref_call: tuple[tuple, dict], prod_call: tuple[tuple, dict],
                         module: nn.Module | None = None) -> str | None:
    """An argument both modules receive in their own models as objects of different kinds (a tensor mask in
    ref's, a ``BlockMask`` in prod's: another attention backend builds another mask), in words (positional
    arguments named after ``module``'s forward); None when every shared argument is of one kind (None on one
    side, a tensor of another dtype or shape on the other, is the same kind: sdpa takes eager's mask)."""
    (ref_args, ref_kw), (prod_args, prod_kw) = ref_call, prod_call
    try:
        params = [p.name for p in inspect.signature(module.forward).parameters.values()] if module else []
    except (TypeError, ValueError):
        params = []
    pairs = [(repr(params[i]) if i < len(params) else f"argument {i}", a, b)
             for i, (a, b) in enumerate(zip(ref_args, prod_args))]
    pairs += [(f"{k!r}", ref_kw[k], prod_kw[k]) for k in ref_kw if k in prod_kw]
    for where, a, b in pairs:
        if a is None or b is None or (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            continue
        if type(a) is not type(b):
            return f"{where} is a {type(a).__name__} in ref's model and a {type(b).__name__} in prod's"
    return None
