"""The fixed set of fake kernels of the adequacy check (docs/kernelbench.md, "Adequacy").

Each fake is a prod built from the case's ref that a good certification must FAIL: it returns zeros;
a constant (the mean of ref's output on replicate 0's draw); its first input passed through (when that
input has the output's shape); ref's output of the previous call (a stale result); ref rounded to
float16 or to bfloat16 and back (only when that format is coarser than the output's harm unit: a finer
rounding is harmless by the case's own scale); ref with one input replaced by a fresh draw of its
probe (one fake per input, the first :data:`MAX_FRESH`). Fakes are plain torch code, so the algebra
gate's real mode runs them like any prod. Every draw they make is seeded from the run's seed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..case import Case, Fixed
from ..execution import seeding
from ..execution.runner import as_outputs
from ..stats.ulp import float_format, harm_format

FAKES_STREAM = 7  # seeding stream of the fresh draws (independent of inputs, weights, algebra, bootstrap)
MAX_FRESH = 4  # inputs that get a "fresh draw" fake each
ROUNDINGS = (torch.float16, torch.bfloat16)


@dataclass(frozen=True)
class Fake:
    """A fake kernel, or the reason it does not apply to this case. ``kind`` says what its being
    identical to ref would mean: "constant", "identity", "rounding", "stale", "input"."""

    name: str
    description: str
    kind: str
    kernel: Callable | None = None
    not_applicable: str = ""
    input: str = ""  # the input a "fresh" fake redraws, or the one "passthrough" returns


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _shaped_like(ref_returns_tensor: bool, outs: tuple) -> object:
    return outs[0] if ref_returns_tensor else outs


def build_fakes(case: Case, ref_outputs: tuple[torch.Tensor, ...], ref_returns_tensor: bool, seed: int,
                device: torch.device) -> list[Fake]:
    """The fakes for ``case``; ``ref_outputs``: ref's outputs on replicate 0's draw (shapes, dtypes and
    the constant fake's value)."""
    ref = case.ref
    shape = lambda outs: _shaped_like(ref_returns_tensor, outs)  # noqa: E731 - keep ref's return structure
    fakes: list[Fake] = []

    def zeros(**kw):
        return shape(tuple(torch.zeros_like(o) for o in as_outputs(ref(**kw), "ref", "fake zeros")))

    fakes.append(Fake("zeros", "returns zeros of ref's shapes and dtypes", "constant", zeros))

    constants = tuple(float(o.detach().to(torch.float64).mean()) for o in ref_outputs)
    specs = tuple((tuple(o.shape), o.dtype) for o in ref_outputs)

    def constant(**kw):
        return shape(tuple(torch.full(s, c, dtype=d, device=device) for (s, d), c in zip(specs, constants)))

    fakes.append(Fake("constant", "returns the mean of ref's output on replicate 0's draw ("
                      + ", ".join(f"{c:.4g}" for c in constants) + ") everywhere", "constant", constant))

    names = list(case.inputs)
    first = names[0]
    if len(ref_outputs) != 1:
        fakes.append(Fake("passthrough", f"returns its first input {first!r}", "identity",
                          not_applicable=f"ref returns {len(ref_outputs)} outputs, not one", input=first))
    else:
        out = ref_outputs[0]
        probe_shape = getattr(case.inputs[first], "shape", None)

        def passthrough(**kw):
            x = kw[first]
            return shape((x.to(out.dtype).clone(),))

        if probe_shape is not None and tuple(probe_shape) == tuple(out.shape):
            fakes.append(Fake("passthrough", f"returns its first input {first!r}", "identity", passthrough,
                              input=first))
        else:
            what = f"shape {tuple(probe_shape)}" if probe_shape is not None else "an undeclared shape"
            fakes.append(Fake("passthrough", f"returns its first input {first!r}", "identity",
                              not_applicable=f"{first!r} has {what}, the output {tuple(out.shape)}", input=first))

    fakes.append(Fake("stale", "returns ref's output of the previous call (ref's own on the first)", "stale",
                      _Stale(ref, shape)))

    for fmt in ROUNDINGS:
        coarser = []
        for o in ref_outputs:
            harm = harm_format(_name(o.dtype), case.training_format)
            coarser.append(float_format(_name(fmt)).significand_bits < float_format(harm).significand_bits)
        label = f"ref rounded to {_name(fmt)} and back"
        if not any(coarser):
            harms = sorted({harm_format(_name(o.dtype), case.training_format) for o in ref_outputs})
            fakes.append(Fake(_name(fmt), label, "rounding", not_applicable=(
                f"{_name(fmt)} is not coarser than the harm unit ({', '.join(harms)} ULP): by the case's own scale "
                f"this rounding is harmless, so the certification is not asked to tell it")))
            continue
        fakes.append(Fake(_name(fmt), label, "rounding", _Rounded(ref, fmt, tuple(coarser), shape)))

    for name in names[:MAX_FRESH]:
        label = f"ref with input {name!r} replaced by a fresh draw of its probe"
        if isinstance(case.inputs[name], Fixed):
            fakes.append(Fake(f"fresh {name}", label, "input", input=name,
                              not_applicable=f"{name!r} is a Fixed probe: every draw is the same tensor"))
            continue
        fakes.append(Fake(f"fresh {name}", label, "input", _Fresh(case, name, seed, device, shape), input=name))
    return fakes


class _Stale:
    """ref's output of the previous call: a result cache that never invalidates."""

    def __init__(self, ref, shape):
        self.ref, self.shape, self.last = ref, shape, None

    def __call__(self, **kw):
        outs = as_outputs(self.ref(**kw), "ref", "fake stale")
        previous = self.last if self.last is not None and all(
            p.shape == o.shape for p, o in zip(self.last, outs)) else outs
        self.last = tuple(o.detach().clone() for o in outs)
        return self.shape(previous)


class _Rounded:
    """ref with the outputs finer than ``fmt`` rounded to ``fmt`` and back (``which``: per output)."""

    def __init__(self, ref, fmt: torch.dtype, which: tuple[bool, ...], shape):
        self.ref, self.fmt, self.which, self.shape = ref, fmt, which, shape

    def __call__(self, **kw):
        outs = as_outputs(self.ref(**kw), "ref", "fake rounding")
        return self.shape(tuple(o.to(self.fmt).to(o.dtype) if w else o for o, w in zip(outs, self.which)))


class _Fresh:
    """ref with input ``name`` replaced by a fresh draw of its probe, the k-th call's draw seeded by
    (seed, stream, k): a kernel that reads another tensor than the one it was given."""

    def __init__(self, case: Case, name: str, seed: int, device, shape):
        self.probe, self.name, self.seed, self.device, self.shape = case.inputs[name], name, seed, device, shape
        self.dtype, self.ref, self.calls = case.dtype, case.ref, 0

    def __call__(self, **kw):
        g = seeding.generator(self.seed, FAKES_STREAM, self.calls, self.device)
        self.calls += 1
        given = kw[self.name]
        precision = torch.float64 if self.dtype == torch.float64 else torch.float32
        fresh = self.probe.sample(g, self.device, precision)
        if fresh.is_floating_point() and given.is_floating_point():
            fresh = fresh.to(given.dtype)
        return self.ref(**{**kw, self.name: fresh})
