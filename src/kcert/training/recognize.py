"""Which slot of the training model a case's kernel fills, read from what the kernel is, not from what
its arguments are called.

A case's kernels take keyword arguments named as the user likes (``hidden_states`` and ``weight`` as
Hugging Face writes them, ``x`` and ``w`` as kcert's catalogue does). The slot is found in two steps:

1. **structure**: how many floating and integer inputs and weights, their shapes, and what ref returns on
   the case's first draw (one tensor or a tuple, of which shape);
2. **behaviour**: one property each slot's kernel has and its neighbours lack, checked by calling ref on
   that draw with one thing changed (ref defines what the pair computes):

   | slot | structure | behaviour |
   | --- | --- | --- |
   | ``norm`` | one input (..., D); one or two weights (D,); output like the input | invariant to the input's scale: f(2x) = f(x); of two (D,) weights the bias is the one whose change moves every row alike |
   | ``linear`` | one input (..., in); a weight (out, in), optionally one (out,); output (..., out) | affine: f(2x) - 2 f(x) is the same row for every row (the bias, or zero) |
   | ``router`` | as ``linear``, output (tokens, experts) | not affine, non-negative (combine weights) |
   | ``activation`` | one input, no weight, output like the input | elementwise: changing one element changes that output element alone |
   | ``router_logits`` | one input (tokens, experts), no weight, output like it | not elementwise (a routing row is renormalised), non-negative |
   | ``gated_activation`` | two inputs of one shape, no weight, output like them | linear in one of them (``up``): f(g, 2u) = 2 f(g, u); the other is ``gate`` |
   | ``rope`` | two floating inputs (batch, heads, seq, head_dim), one integer input (positions), no weight; two outputs | linear in each: zeroing one input zeroes its own output, which says which output is whose |

Scaling by 2 is exact in every floating format, so these identities hold to the last bit in most
kernels; they are checked to a tolerance of :data:`TOLERANCE` of the output's scale, far below the
order-one differences of a kernel without the property. The result maps each of the slot's roles
(``x``, ``w``, ``b``, ``gate``, ``up``, ``q``, ``k``, ``position_ids``, ``w_gate``, ``e_bias``,
``router_logits``) to the case's own argument name.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..case import Case
from ..errors import SlotError

TOLERANCE = 0.02  # of max|output|: above bf16 rounding (2^-8), far below a property's violation (order one)


@dataclass(frozen=True)
class Recognized:
    """A case's slot and, per role of the slot, the case's argument name; for rope, which of ref's two
    outputs belongs to ``q`` (the other is ``k``'s)."""

    kind: str
    arguments: dict
    q_output: int = 0


def _signature(case: Case) -> str:
    return f"inputs {sorted(case.inputs)}, weights {sorted(case.weights)}"


def _close(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | float | None = None) -> bool:
    a, b = a.double(), b.double()
    if a.shape != b.shape or not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        return False
    if scale is None:
        scale = max(float(a.abs().max()), float(b.abs().max()), 1e-30)
    return float((a - b).abs().max()) <= TOLERANCE * scale


class _Probe:
    """Calls ref on the case's first draw with some arguments changed (under no_grad, on the CPU)."""

    def __init__(self, case: Case, inputs: dict, weights: dict):
        self.case, self.base = case, {**inputs, **weights}

    def __call__(self, **changed):
        try:
            with torch.no_grad():
                return self.case.ref(**{**self.base, **changed})
        except Exception as exc:  # noqa: BLE001 - ref failing on its own draw is the case's error
            raise SlotError(f"case {self.case.name!r}: ref raised {type(exc).__name__} on the case's own draw while "
                            f"kcert read which slot it fills: {exc}") from exc


def _single(out) -> torch.Tensor | None:
    return out if isinstance(out, torch.Tensor) and out.is_floating_point() else None


def recognize(case: Case, inputs: dict[str, torch.Tensor], weights: dict[str, torch.Tensor]) -> Recognized:
    """The slot ``case``'s kernel fills (see the module's table), from ref called on ``inputs`` and
    ``weights`` (one draw, working precision); :class:`SlotError` naming what was found when none fits."""
    floating = [k for k, v in inputs.items() if v.is_floating_point()]
    integer = [k for k, v in inputs.items() if not v.is_floating_point()]
    matrices = [k for k, v in weights.items() if v.dim() == 2]
    vectors = [k for k, v in weights.items() if v.dim() == 1]
    call = _Probe(case, inputs, weights)
    found = None
    if len(floating) == 1 and not integer and len(weights) == len(matrices) + len(vectors):
        x = floating[0]
        out = _single(call())
        if out is not None and not weights and out.shape == inputs[x].shape:
            found = _one_input(call, x, inputs[x], out)
        elif out is not None and vectors and not matrices and out.shape == inputs[x].shape:
            found = _norm(call, x, inputs[x], vectors, weights, out)
        elif out is not None and len(matrices) == 1 and len(vectors) <= 1:
            found = _projection(call, x, inputs[x], matrices[0], vectors, weights, out)
    elif len(floating) == 2 and not integer and not weights:
        found = _gated(call, floating, inputs)
    elif len(floating) == 2 and len(integer) == 1 and not weights:
        found = _rope(call, floating, integer[0], inputs)
    if isinstance(found, Recognized):
        return found
    why = f" ({found})" if isinstance(found, str) else ""
    raise SlotError(
        f"case {case.name!r} cannot be mapped onto the training model: its arguments ({_signature(case)}) match "
        f"no slot{why}. Slots, read from what ref computes: norm (one input (..., D), a (D,) gain [and bias], "
        f"scale-invariant), linear (one input, a (out, in) weight [and (out,) bias], affine), router (one input, "
        f"a (experts, hidden) gate [and (experts,) bias], non-negative combine weights), activation (one input, "
        f"elementwise), router_logits (one (tokens, experts) input, non-negative, not elementwise), "
        f"gated_activation (two inputs, linear in one), rope (two floating inputs and integer positions, two "
        f"outputs); docs/training.md")


def _one_input(call, x: str, value: torch.Tensor, out: torch.Tensor) -> Recognized | str:
    changed = value.clone()
    flat = changed.view(-1)
    flat[0] = flat[0] + 4 * (value.abs().max() + 1)  # a large change of one element
    moved = (call(**{x: changed}).double() - out.double()).abs().view(-1)
    scale = max(float(out.abs().max()), 1e-30)
    others = float(moved[1:].max()) if moved.numel() > 1 else 0.0
    if others <= TOLERANCE * scale * 1e-3:
        return Recognized("activation", {"x": x})
    if value.dim() == 2 and float(out.min()) >= 0:
        return Recognized("router_logits", {"router_logits": x})
    return ("one input and no weight, but ref is neither elementwise (an activation) nor non-negative over 2-D "
            "logits (a router)")


def _norm(call, x: str, value: torch.Tensor, vectors: list[str], weights: dict, out: torch.Tensor) -> Recognized | str:
    d = value.shape[-1]
    if len(vectors) > 2 or any(weights[v].shape != (d,) for v in vectors):
        return f"one input and (D,) weights, but not one or two weights of the input's last size D = {d}"
    if not _close(call(**{x: 2 * value}), out):
        return "one input and (D,) weights, but ref's output changes with the input's scale: not a normalisation"
    if len(vectors) == 1:
        return Recognized("norm", {"x": x, "w": vectors[0]})
    biases = [v for v in vectors if _moves_rows_alike(call, v, weights[v], out)]
    if len(biases) != 1:
        return "a normalisation with two (D,) weights, but not one gain and one bias (a bias moves every row alike)"
    gain = next(v for v in vectors if v != biases[0])
    return Recognized("norm", {"x": x, "w": gain, "b": biases[0]})


def _moves_rows_alike(call, name: str, value: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether adding 1 to the weight ``name`` adds the same row to every row of ref's output."""
    delta = (call(**{name: value + 1}).double() - out.double()).reshape(-1, out.shape[-1])
    return bool(delta.abs().max() > 0) and _close(delta, delta[:1].expand_as(delta), float(delta.abs().max()))


def _projection(call, x: str, value: torch.Tensor, matrix: str, vectors: list[str], weights: dict,
                out: torch.Tensor) -> Recognized | str:
    w = weights[matrix]
    rows, cols = w.shape
    if value.shape[-1] != cols or out.shape != (*value.shape[:-1], rows) or \
            any(weights[v].shape != (rows,) for v in vectors):
        return (f"one input and a {tuple(w.shape)} weight, but the shapes are not a projection (..., {cols}) -> "
                f"(..., {rows}) with an optional ({rows},) bias")
    offset = (call(**{x: 2 * value}).double() - 2 * out.double()).reshape(-1, rows)
    if _close(offset, offset[:1].expand_as(offset), max(float(out.abs().max()), 1e-30)):
        roles = {"x": x, "w": matrix} | ({"b": vectors[0]} if vectors else {})
        return Recognized("linear", roles)
    if value.dim() == 2 and float(out.min()) >= 0:
        return Recognized("router", {"x": x, "w_gate": matrix} | ({"e_bias": vectors[0]} if vectors else {}))
    return "one input and a projection's weights, but ref is neither affine (a linear) nor non-negative (a router)"


def _gated(call, names: list[str], inputs: dict) -> Recognized | str:
    a, b = names
    if inputs[a].shape != inputs[b].shape:
        return "two inputs of different shapes: not a gated activation"
    out = _single(call())
    if out is None or out.shape != inputs[a].shape:
        return "two inputs, but ref does not return one floating tensor of their shape"
    linear = [n for n in names if _close(call(**{n: 2 * inputs[n]}), 2 * out.double())]
    if not linear:
        return "two inputs, but ref is linear in neither (a gated activation is linear in `up`)"
    up = linear[-1] if len(linear) == 2 else linear[0]  # linear in both (a product): the later one is `up`
    return Recognized("gated_activation", {"gate": a if up == b else b, "up": up})


def _rope(call, names: list[str], positions: str, inputs: dict) -> Recognized | str:
    if any(inputs[n].dim() != 4 for n in names) or inputs[names[0]].shape[-1] != inputs[names[1]].shape[-1]:
        return "two floating inputs and an integer one, but not q and k of shape (batch, heads, seq, head_dim)"
    out = call()
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(_single(o) is not None for o in out)):
        return "two floating inputs and positions, but ref does not return two tensors (rotated q and k)"
    zeroed = call(**{names[1]: torch.zeros_like(inputs[names[1]])})
    silent = [i for i in (0, 1) if float(zeroed[i].abs().max()) == 0 and float(out[i].abs().max()) > 0]
    if len(silent) != 1:
        return "two floating inputs and positions, but zeroing one input does not zero exactly one output"
    q_output = 1 - silent[0]
    if out[q_output].shape != inputs[names[0]].shape:
        return "two floating inputs and positions, but the outputs do not keep their inputs' shapes"
    return Recognized("rope", {"q": names[0], "k": names[1], "position_ids": positions}, q_output)
