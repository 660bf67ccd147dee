"""How a case's kernel pair maps onto a slot of the training model.

A case is mapped by what its kernel computes, read from ref on the case's first draw
(:mod:`kcert.training.recognize`): the structure of its arguments and output and one behaviour per slot,
whatever the arguments are called (``hidden_states`` and ``weight`` as Hugging Face names them map like
the catalogue's ``x`` and ``w``). The slot decides where the kernel sits in the decoder and how it is
called; the roles below are the slot's, bound to the case's own argument names.

| slot | the case's arguments (roles) | where the kernel runs in the model |
| --- | --- | --- |
| ``norm`` | an input ``x`` (..., D); a gain ``w`` (D,) and optionally a bias ``b`` (D,) | every normalisation: before attention and before the MLP in each layer, and before the output head |
| ``activation`` | an input ``x``; no weights | the MLP's activation ``down(act(up(x)))`` in each layer |
| ``gated_activation`` | inputs ``gate`` and ``up``; no weights | the gated MLP's core ``down(act(gate(x), up(x)))`` in each layer |
| ``rope`` | inputs ``q``, ``k`` (batch, heads, seq, head_dim) and integer positions (batch, seq); no weights | the rotary embedding of q and k in every attention |
| ``linear`` | an input ``x`` (tokens, in); a weight ``w`` (out, in) and optionally ``b`` (out,) | every projection: q, k, v, o, the MLP's and the output head |
| ``router`` | an input ``x`` (tokens, hidden); a gate ``w_gate`` (experts, hidden) and optionally ``e_bias`` (experts,); returns dense (tokens, experts) combine weights | the router of every layer's MoE MLP |
| ``router_logits`` | an input of logits (tokens, experts); returns dense combine weights | the same, on logits from the model's own gate |

Every other place uses the catalogue's reference kernel (RMSNorm with one rounding, SwiGLU, NeoX
RoPE, ``F.linear``), the same in both arms. A case that matches no slot, or whose kernels do not
return what the slot needs on the model's shapes, is refused with a :class:`SlotError` naming the
case and the reason.

What a slot takes from the case besides the kernels:

- ``norm``: the initial gains (and biases) of every norm are the case's own weight draw (seed
  ``case_seed``, the seed of the certificate the prediction reads): norm site ``j``, channel
  ``c`` starts at the case's channel ``(j * hidden + c) mod D``, in every training seed. A norm
  defect can depend on the gain's value (Gemma's ``1 + w`` in bf16, a gain of exactly
  0.99609375); starting from the values the certificate was computed on links a certificate's
  bucket to a parameter of the model.
- ``rope``: ``head_dim`` is the case's (the kernels close over their frequency tables); the model
  uses ``hidden // head_dim`` heads (at least one; ``hidden`` grows to ``head_dim`` if smaller).
  Positions are a window of ``seq`` consecutive positions whose start is drawn per sequence from
  the case's ``position_ids`` probe range, so the long positions the certificate probed are seen.
- ``linear``: with ``b`` the model's projections get biases (zero at initialisation).
- ``router`` / ``router_logits``: every layer's MLP becomes a mixture of experts with the case's
  number of experts (small SwiGLU experts, combined with the kernel's weights). A ``router``
  case's gate starts from the case's ``w_gate`` draw (its first ``hidden`` columns) and its
  ``e_bias`` (a selection bias, not trained) is the case's draw.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import numpy as np
import torch

from ..case import Case, Integers
from ..catalog import activations as catalog_activations
from ..catalog import linear as catalog_linear
from ..catalog import norms as catalog_norms
from ..catalog import rope as catalog_rope
from ..errors import SlotError
from .recognize import recognize

SLOTS = ("norm", "activation", "gated_activation", "rope", "linear", "router", "router_logits")
ARMS = ("ref", "prod")


@dataclass(frozen=True, eq=False)
class Slot:
    """A case bound to a slot of the model."""

    kind: str
    case: Case
    weight_draw: dict  # role -> float64 numpy array: the case's weights for case_seed (norm, router slots)
    head_dim: int | None = None  # rope
    positions: tuple[int, int] | None = None  # rope: [low, high) of the case's position probe
    bias: bool = False  # norm / linear: the kernel takes ``b``; router: ``e_bias``
    experts: int | None = None  # router slots
    arguments: dict = field(default_factory=dict)  # role (x, w, b, q, ...) -> the case's argument name
    q_output: int = 0  # rope: which of the kernel's two outputs is q's

    def call(self, kernel: Callable, **roles):
        """``kernel`` called with the slot's roles under the case's argument names."""
        return kernel(**{self.arguments.get(role, role): value for role, value in roles.items()})

    @property
    def where(self) -> str:
        return {
            "norm": "every normalisation: before attention, before the MLP, before the head",
            "activation": "the MLP activation of every layer",
            "gated_activation": "the gated MLP core of every layer",
            "rope": "the rotary embedding of every attention",
            "linear": "every projection (attention, MLP, output head)",
            "router": "the router of every layer's MoE MLP",
            "router_logits": "the routing of every layer's MoE MLP (logits from the model's gate)",
        }[self.kind]

    def kernel(self, arm: str) -> Callable:
        if arm not in ARMS:
            raise ValueError(f"arm must be 'ref' or 'prod', got {arm!r}")
        return getattr(self.case, arm)


def bind(case: Case, case_seed: int = 0) -> Slot:
    """Map ``case`` onto a slot of the model (raises :class:`SlotError` when it cannot)."""
    if not isinstance(case, Case):
        raise SlotError(f"training comparison needs a kcert.Case, got {type(case).__name__}")
    from ..execution import probes

    cpu = torch.device("cpu")
    try:
        draw = probes.draw_weights(case, case_seed, cpu).working
        first = probes.draw_inputs(case, case_seed, 0, cpu).working
    except Exception as exc:  # a probe that cannot be drawn is the case's error
        raise SlotError(f"case {case.name!r}: its probes cannot be drawn: {type(exc).__name__}: {exc}") from exc
    found = recognize(case, first, draw)
    kind, names = found.kind, found.arguments
    roles = {role: draw[name].double().numpy() for role, name in names.items() if name in draw}
    common = dict(arguments=names, q_output=found.q_output)
    if kind == "norm":
        return Slot(kind, case, roles, bias="b" in roles, **common)
    if kind == "rope":
        pos = case.inputs[names["position_ids"]]
        span = (int(pos.low), int(pos.high)) if isinstance(pos, Integers) else (0, 0)
        return Slot(kind, case, {}, head_dim=int(first[names["q"]].shape[-1]), positions=span, **common)
    if kind == "linear":
        return Slot(kind, case, {}, bias="b" in roles, **common)
    if kind == "router":
        return Slot(kind, case, roles, bias="e_bias" in roles, experts=int(roles["w_gate"].shape[0]), **common)
    if kind == "router_logits":
        return Slot(kind, case, {}, experts=int(first[names["router_logits"]].shape[-1]), **common)
    return Slot(kind, case, {}, **common)


# --- the kernels each arm runs --------------------------------------------------------------------------


def _default_rope(head_dim: int) -> Callable:
    frequencies = partial(catalog_rope.default_frequencies, dim=head_dim, base=10000.0)
    return partial(catalog_rope.rope_neox, frequencies=frequencies)


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor of shape {tuple(value.shape)}"
    if isinstance(value, (tuple, list)):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _check(out, slot: Slot, arm: str, shapes: tuple[tuple[int, ...], ...]):
    """The kernel's output must be what the slot feeds on: one floating tensor per expected shape."""
    outs = out if isinstance(out, (tuple, list)) and len(shapes) > 1 else (out,)
    if len(outs) != len(shapes) or not all(isinstance(o, torch.Tensor) and o.is_floating_point()
                                           and tuple(o.shape) == s for o, s in zip(outs, shapes)):
        want = " and ".join(f"a floating tensor of shape {s}" for s in shapes)
        raise SlotError(f"case {slot.case.name!r}: {arm} returns {_describe(out)} in the {slot.kind} slot of the "
                        f"training model, which needs {want}")
    return out


def _norm_call(kernel: Callable, bias: bool, slot: Slot, arm: str) -> Callable:
    def call(x, w, b):
        out = slot.call(kernel, x=x, w=w, b=b) if bias else slot.call(kernel, x=x, w=w)
        return _check(out, slot, arm, (tuple(x.shape),))

    return call


def _linear_call(kernel: Callable, bias: bool, slot: Slot, arm: str) -> Callable:
    def call(x, w, b):
        out = slot.call(kernel, x=x, w=w, b=b) if bias else slot.call(kernel, x=x, w=w)
        return _check(out, slot, arm, ((x.shape[0], w.shape[0]),))

    return call


@dataclass(frozen=True)
class Kernels:
    """What one arm's model calls: the case's kernel in its slot, the catalogue's elsewhere.

    norm(x, w, b) and linear(x, w, b) (b None without biases); activation(x) or
    activation(gate, up) when ``gated``; rope(q, k, position_ids) -> (q, k); with a router slot,
    router(x, w_gate, e_bias) -> dense (tokens, experts) combine weights and an MoE MLP."""

    norm: Callable
    activation: Callable
    gated: bool
    rope: Callable
    linear: Callable
    norm_bias: bool = False
    linear_bias: bool = False
    router: Callable | None = None  # router(x (tokens, hidden), w_gate, e_bias) -> (tokens, experts)


def kernels(slot: Slot, arm: str, head_dim: int) -> Kernels:
    k = slot.kernel(arm)
    norm = lambda x, w, b: catalog_norms.rms_norm(x, w)  # noqa: E731
    activation, gated = (lambda gate, up: catalog_activations.swiglu(gate, up)), True
    rope = _default_rope(head_dim)
    linear = lambda x, w, b: catalog_linear.linear(x, w)  # noqa: E731
    if slot.kind == "norm":
        norm = _norm_call(k, slot.bias, slot, arm)
    elif slot.kind == "activation":
        activation, gated = (lambda x: _check(slot.call(k, x=x), slot, arm, (tuple(x.shape),))), False
    elif slot.kind == "gated_activation":
        activation = lambda gate, up: _check(slot.call(k, gate=gate, up=up), slot, arm,  # noqa: E731
                                             (tuple(gate.shape),))
    elif slot.kind == "rope":
        def rope(q, kk, position_ids):
            out = _check(slot.call(k, q=q, k=kk, position_ids=position_ids), slot, arm,
                         (tuple(q.shape), tuple(kk.shape)) if slot.q_output == 0 else (tuple(kk.shape), tuple(q.shape)))
            return (out[0], out[1]) if slot.q_output == 0 else (out[1], out[0])
    elif slot.kind == "linear":
        linear = _linear_call(k, slot.bias, slot, arm)
    router = None
    if slot.kind == "router":
        def router(x, w_gate, e_bias):
            extra = {"e_bias": e_bias} if slot.bias else {}
            return _check(slot.call(k, x=x, w_gate=w_gate, **extra), slot, arm, ((x.shape[0], w_gate.shape[0]),))
    elif slot.kind == "router_logits":
        def router(x, w_gate, e_bias):
            logits = catalog_linear.linear(x, w_gate)  # the model's gate, in the working dtype
            return _check(slot.call(k, router_logits=logits), slot, arm, (tuple(logits.shape),))
    return Kernels(norm, activation, gated, rope, linear, norm_bias=slot.kind == "norm" and slot.bias,
                   linear_bias=slot.kind == "linear" and slot.bias, router=router)


def initial_norm_weights(slot: Slot, sites: int, hidden: int) -> list[dict[str, np.ndarray]]:
    """The initial gain (and bias) of every norm site: the case's draw for a norm slot (site ``j``,
    channel ``c`` <- case channel ``(j * hidden + c) mod D``), ones otherwise."""
    if slot.kind != "norm":
        return [{"w": np.ones(hidden)} for _ in range(sites)]
    out = []
    for j in range(sites):
        index = case_channels(slot, j, hidden)
        out.append({name: values[index] for name, values in slot.weight_draw.items()})
    return out


def initial_router(slot: Slot, hidden: int) -> dict[str, np.ndarray]:
    """A ``router`` case's gate (its first ``hidden`` columns, wrapping around) and selection bias;
    empty for other slots (the model draws its own gate)."""
    if slot.kind != "router":
        return {}
    gate = slot.weight_draw["w_gate"]
    out = {"w_gate": gate[:, np.arange(hidden) % gate.shape[1]]}
    if slot.bias:
        out["e_bias"] = slot.weight_draw["e_bias"]
    return out


def case_channels(slot: Slot, site: int, hidden: int) -> np.ndarray:
    """The case's channel behind each channel of norm site ``site``."""
    d = slot.weight_draw["w"].shape[0]
    return (site * hidden + np.arange(hidden)) % d


def gain_sensitivity(slot: Slot, case_seed: int = 0) -> np.ndarray:
    """``r_g = sum(dy_g / dw_g * sign(y_g)) / sum|y_g|`` per case channel: the relative change of a
    norm's output per unit of its stored gain, measured on ref by autograd in float32 at the case's
    weights and its first input draw (``1 / w`` for ``y = w n``, ``1 / (1 + w)`` for ``(1 + w) n``)."""
    from ..execution import probes

    if slot.kind != "norm":
        raise SlotError(f"case {slot.case.name!r}: gain sensitivity is defined for norm slots, not {slot.kind}")
    cpu = torch.device("cpu")
    x = probes.draw_inputs(slot.case, case_seed, 0, cpu).working[slot.arguments["x"]].float()
    weights = {k: torch.as_tensor(v, dtype=torch.float32) for k, v in slot.weight_draw.items()}
    w = weights["w"].clone().requires_grad_()
    with torch.enable_grad():
        y = slot.call(slot.case.ref, x=x, w=w, **({"b": weights["b"]} if slot.bias else {})).float()
        (y * torch.sign(y).detach()).sum().backward()
    total = y.detach().abs().reshape(-1, y.shape[-1]).sum(0)
    with np.errstate(divide="ignore", invalid="ignore"):
        return (w.grad.double() / total.double()).numpy()
