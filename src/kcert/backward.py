"""Backward certification: a case's gradients certified as a case of their own (docs/method.md).

:func:`gradients` turns a :class:`~kcert.Case` into a new case whose kernels return the forward
outputs (optionally) and the gradients of those outputs with respect to the floating inputs and
weights, contracted with a *cotangent* (the upstream gradient ``dL/dy``) drawn per replicate. The
three gates then run unchanged on the gradients:

- the cotangent is one more input probe per output, so it is drawn by the ordinary probe machinery
  from ``(seed, replicate)``, rounded to the case dtype like an upstream gradient in bf16 training,
  and the oracle gets the exact float64 copy of the same values; the cotangent probes come after
  the case's own inputs, so the original inputs of replicate ``r`` are drawn exactly as in the
  forward case;
- the default oracle is the wrapped ref run in real mode: autograd follows the float64 graph, and
  the backward of a custom ``torch.autograd.Function`` runs inside the mode, so its casts become
  float64 too; a given ``oracle`` (or ``prod_math``) is differentiated by autograd in float64;
- ref and prod are differentiated the same way, so a prod whose backward is hand-written (a
  ``torch.autograd.Function``, a fused kernel with its own backward) is certified against ref's
  autograd gradients.

Output shapes (for the cotangent probes) come from one dry evaluation of ref, forward and backward,
on the ``meta`` device (no data, no arithmetic: instant at any size) with the probe shapes of
replicate 0; a ref that cannot run on ``meta`` (data-dependent control flow, ``item()``) is
evaluated once on CPU instead. The same evaluation checks that every output requires grad and that
every differentiated tensor reaches an output.

Buckets (where a gradient defect localises): an input gradient is bucketed like an activation, per
feature channel (its last axis); a weight gradient per *parameter channel*, its leading axis: one
bucket per element of a gain or bias ``(d,)``, one per output row of a linear weight ``(out, in)``
(a row is one output feature's weights: the reductions of a weight-gradient kernel that can go
wrong, over tokens and over chunks, run per element and fold into the row's mean; per element
buckets would multiply the buckets, and the false-alarm budget, by ``in``). Scalars get one bucket.
Override with ``buckets=``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .case import Axes, BucketSpec, Case, Fixed, Gaussian, Probe
from .errors import CaseError, KernelError
from .execution import probes

try:  # the engine entry behind torch.autograd.grad (see _backward)
    from torch.autograd.graph import _engine_run_backward
except ImportError:  # pragma: no cover - older or newer torch
    _engine_run_backward = None

__all__ = ["DEFAULT_COTANGENT_SHIFT", "DEFAULT_COTANGENT_STD", "gradients"]

DEFAULT_COTANGENT_SHIFT = 0.1  # docs/method.md, "Gate 2": shifted probes keep multiplicative defects visible
DEFAULT_COTANGENT_STD = 1.0

CotangentSpec = Probe | Callable[[tuple[int, ...]], Probe]


@dataclass(frozen=True)
class _Plan:
    """What a differentiated kernel needs: which arguments to differentiate, which arguments are
    cotangents (one per output, in output order), what to return."""

    case: str
    wrt: tuple[str, ...]
    cotangents: tuple[str, ...]
    output_names: tuple[str, ...]
    include_forward: bool


class _Differentiated:
    """``fn`` made to return ``(outputs..., gradients...)``: the gradients of ``sum_i <output_i,
    cotangent_i>`` with respect to ``plan.wrt``. Works in real mode (the oracle) as in working
    precision, and with hand-written backward passes."""

    def __init__(self, fn: Callable[..., Any], role: str, plan: _Plan):
        self.fn = fn
        self.role = role
        self.plan = plan
        self.__name__ = f"gradients({getattr(fn, '__name__', role)})"

    def __call__(self, **kwargs):
        plan = self.plan
        cotangents = [kwargs.pop(name) for name in plan.cotangents]
        with torch.enable_grad():  # the runner calls kernels under no_grad
            leaves = []
            for name in plan.wrt:
                # a leaf of its own per call: a kernel that writes into a saved tensor cannot corrupt
                # the weights shared by later replicates (replicate r depends on (seed, r) alone)
                leaf = kwargs[name].detach().clone().requires_grad_()
                if not leaf.requires_grad:  # e.g. an evaluator's tensor subclass without autograd
                    raise KernelError(f"case {plan.case!r}: {self.role} is evaluated on {type(leaf).__name__} "
                                      f"tensors that do not track gradients; this evaluation cannot "
                                      f"differentiate it")
                kwargs[name] = leaf
                leaves.append(leaf)
            outputs = _as_tuple(self.fn(**kwargs), self.role, plan.case)
            if len(outputs) != len(plan.output_names):
                raise KernelError(f"case {plan.case!r}: {self.role} returns {len(outputs)} outputs, "
                                  f"{len(plan.output_names)} when the gradient case was made")
            upstream = []
            for out, cot, name in zip(outputs, cotangents, plan.output_names):
                if not out.requires_grad:
                    raise KernelError(
                        f"case {plan.case!r}: {name} of {self.role} does not require grad, so it has no backward "
                        f"(a kernel run without an autograd.Function around it, or a detached output)"
                    )
                if tuple(cot.shape) != tuple(out.shape):
                    raise KernelError(f"case {plan.case!r}: {name} of {self.role} has shape {tuple(out.shape)} but "
                                      f"its cotangent has shape {tuple(cot.shape)}")
                # a fresh buffer in the output's dtype, owned by autograd like a real upstream
                # gradient: a backward that writes into it (Liger-Kernel #370) cannot alter the draw
                upstream.append(cot.detach().to(dtype=out.dtype, copy=True))
            grads = _backward(outputs, leaves, upstream)
        forward = tuple(o.detach() for o in outputs) if plan.include_forward else ()
        # detached: a backward that writes the gradient into a saved input and returns that tensor
        # (Liger-Kernel's SwiGLU) hands back the leaf itself, which requires grad
        return forward + tuple(g.detach() for g in grads)


def _backward(outputs, leaves, upstream) -> tuple[torch.Tensor, ...]:
    """``torch.autograd.grad`` with unused leaves given zero gradients, run so that a hand-written
    backward is evaluated in real mode when the call is.

    ``torch.autograd.grad`` dispatches through the active torch-function mode, and a mode runs the
    functions it handles with itself popped off the mode stack: the engine, and with it the Python
    ``backward`` of every custom ``autograd.Function``, would then run outside real mode (its
    ``dy.float()`` a real float32 cast in the float64 oracle). The engine entry that
    ``torch.autograd.grad`` itself calls keeps the mode on the stack (checked by
    tests/test_backward.py on torch 2.13)."""
    if _engine_run_backward is None:  # a torch without the entry: autograd's own front door
        grads = torch.autograd.grad(outputs, leaves, upstream, allow_unused=True)
    else:
        grads = _engine_run_backward(tuple(outputs), tuple(upstream), False, False, tuple(leaves), True,
                                     accumulate_grad=False)
    return tuple(torch.zeros_like(leaf) if g is None else g for g, leaf in zip(grads, leaves))


def _as_tuple(value, role: str, case: str) -> tuple[torch.Tensor, ...]:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    raise KernelError(f"case {case!r}: {role} must return a tensor or a non-empty tuple of tensors, "
                      f"got {type(value).__name__}")


# --- the dry evaluation ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _DryRun:
    shapes: tuple[tuple[int, ...], ...]
    requires_grad: tuple[bool, ...]
    unused: tuple[str, ...]  # wrt names no output depends on
    device: str


def _dry_run(case: Case, values: dict[str, torch.Tensor], wrt: tuple[str, ...]) -> _DryRun:
    """Run ref forward and backward once: on ``meta`` if it can, else on CPU with real values."""
    try:
        return _evaluate(case, {k: v.to("meta") for k, v in values.items()}, wrt, "meta")
    except CaseError:
        raise
    except Exception:  # noqa: BLE001, S110 - data-dependent code cannot run on meta; CPU decides
        pass
    try:
        return _evaluate(case, values, wrt, "cpu")
    except CaseError:
        raise
    except Exception as exc:  # reported with the case
        raise CaseError(f"case {case.name!r}: ref raised {type(exc).__name__} when differentiated once on CPU to "
                        f"learn its output shapes: {exc}") from exc


def _evaluate(case: Case, values: dict[str, torch.Tensor], wrt: tuple[str, ...], device: str) -> _DryRun:
    kwargs = dict(values)
    leaves = []
    for name in wrt:
        kwargs[name] = kwargs[name].detach().clone().requires_grad_()
        leaves.append(kwargs[name])
    with torch.enable_grad():
        outputs = _as_tuple(case.ref(**kwargs), "ref", case.name)
        n = len(outputs)
        names = [case.output_name(i, n) for i in range(n)]
        for out, name in zip(outputs, names):
            if not out.is_floating_point():
                raise CaseError(f"case {case.name!r}: {name} of ref has dtype {out.dtype}; only floating outputs have "
                                f"gradients")
        live = [o for o in outputs if o.requires_grad]
        grads = torch.autograd.grad(live, leaves, [torch.ones_like(o) for o in live], allow_unused=True) if live \
            else (None,) * len(leaves)
    return _DryRun(
        shapes=tuple(tuple(o.shape) for o in outputs),
        requires_grad=tuple(o.requires_grad for o in outputs),
        unused=tuple(name for name, g in zip(wrt, grads) if g is None),
        device=device,
    )


# --- validation helpers ----------------------------------------------------------------------------


def _resolve_wrt(case: Case, wrt, values: dict[str, torch.Tensor]) -> tuple[str, ...]:
    where = f"gradients(case {case.name!r})"
    declared = {**case.inputs, **case.weights}
    if wrt is None:
        # every floating probe that is drawn, not declared constant: Fixed tensors are positions,
        # labels, masks, captured activations (pass wrt= to differentiate one anyway)
        chosen = tuple(k for k, p in declared.items() if not isinstance(p, Fixed) and values[k].is_floating_point())
        if not chosen:
            raise CaseError(f"{where}: the case has no floating input or weight to differentiate (inputs "
                            f"{sorted(case.inputs)}, weights {sorted(case.weights)}); Integers and Fixed probes "
                            f"are left out unless named in wrt")
        return chosen
    if isinstance(wrt, str):
        wrt = (wrt,)
    try:
        wrt = tuple(wrt)
    except TypeError:
        raise CaseError(f"{where}: wrt must be a name or a sequence of names, got {wrt!r}") from None
    if not wrt:
        raise CaseError(f"{where}: wrt must name at least one input or weight, got an empty sequence")
    for name in wrt:
        if not isinstance(name, str) or name not in declared:
            raise CaseError(f"{where}: wrt names {name!r}, which is not an input or weight of the case "
                            f"(inputs {sorted(case.inputs)}, weights {sorted(case.weights)})")
        if not values[name].is_floating_point():
            raise CaseError(f"{where}: wrt names {name!r}, a {values[name].dtype} tensor; only floating inputs and "
                            f"weights have gradients")
    if len(set(wrt)) != len(wrt):
        raise CaseError(f"{where}: wrt names an argument twice: {list(wrt)}")
    return wrt


def _cotangent_probe(spec, shape: tuple[int, ...], output: str, where: str) -> Probe:
    if spec is None:
        return Gaussian(shape, shift=DEFAULT_COTANGENT_SHIFT, std=DEFAULT_COTANGENT_STD)
    if isinstance(spec, Probe):
        probe = spec
    elif callable(spec):
        probe = spec(shape)
        if not isinstance(probe, Probe):
            raise CaseError(f"{where}: the cotangent function for {output} must return a kcert probe, got "
                            f"{type(probe).__name__}")
    else:
        raise CaseError(f"{where}: cotangent for {output} must be a kcert probe or a function shape -> probe, got "
                        f"{type(spec).__name__}")
    got = getattr(probe, "shape", None)
    if got is not None and tuple(got) != tuple(shape):
        raise CaseError(f"{where}: the cotangent probe for {output} has shape {tuple(got)} but {output} has shape "
                        f"{tuple(shape)}")
    return probe


def _cotangent_name(index: int, count: int, taken: set[str], where: str) -> str:
    name = "cotangent" if count == 1 else f"cotangent_{index}"
    if name in taken:
        raise CaseError(f"{where}: the case already has an argument named {name!r}, the name of the cotangent "
                        f"probe; rename that argument")
    return name


def _default_bucket(ndim: int, is_weight: bool) -> BucketSpec:
    if ndim == 0:
        return Axes()
    return Axes(0) if is_weight else Axes(-1)


def _check_spec(spec, ndim: int, where: str) -> BucketSpec:
    if not isinstance(spec, BucketSpec):
        raise CaseError(f"{where}: must be kcert.Axes(...) or kcert.Labels(fn), got {spec!r}")
    if isinstance(spec, Axes):
        spec.resolve(ndim, where)  # raises a CaseError naming the mismatch
    return spec


# --- the transformation ------------------------------------------------------------------------------


def gradients(
    case: Case,
    wrt: str | Sequence[str] | None = None,
    *,
    cotangent: CotangentSpec | Mapping[str, CotangentSpec] | None = None,
    buckets: BucketSpec | Mapping[str, BucketSpec] | None = None,
    include_forward: bool = True,
    name: str | None = None,
) -> Case:
    """A case certifying the gradients of ``case`` (backward kernels) with the same three gates.

    The new case's kernels take the case's probes plus one cotangent per output (named
    ``cotangent``, or ``cotangent_<i>`` for several outputs) and return the forward outputs, then
    one gradient per ``wrt`` name, named ``grad_<name>``. ref and prod are differentiated the same
    way (autograd, or their own hand-written backward); the oracle is the wrapped ref in real mode,
    or a given ``oracle`` differentiated in float64 (module docstring, docs/tutorial.md).

    Parameters
    ----------
    case : kcert.Case
        The forward case.
    wrt : str or sequence of str, optional
        The inputs and weights to differentiate, by name; default every floating input and weight
        except ``Fixed`` ones.
    cotangent : probe, callable or dict, optional
        The upstream gradient of each output, redrawn per replicate: a probe (its shape must be the
        output's), a function ``shape -> probe``, or a dict output name -> either; default
        ``Gaussian(shape, shift=0.1)``. A scalar loss trained with ``loss.backward()`` has the
        cotangent ``kcert.Fixed(torch.tensor(1.0))``.
    buckets : kcert.Axes, kcert.Labels or dict, optional
        A spec for every gradient or a dict ``wrt name -> spec``; default the last axis for inputs,
        the leading (parameter channel) axis for weights.
    include_forward : bool, default True
        Also certify the forward outputs (with the case's own buckets).
    name : str, optional
        The new case's name; default ``"<case>_grad"``.

    Returns
    -------
    kcert.Case
        The gradient case, certified like any other (:func:`kcert.certify`). Its output shapes come
        from one dry evaluation of ref, forward and backward, on the ``meta`` device (or once on CPU
        when ref cannot run there).

    Raises
    ------
    kcert.CaseError
        If an argument is malformed, or the dry evaluation finds an output that does not require
        grad, a ``wrt`` argument no output depends on, or a cotangent probe of the wrong shape.

    Examples
    --------
    SiLU written out against torch's fused one; autograd differentiates both:

    >>> import torch, kcert
    >>> def silu(x):
    ...     return torch.nn.functional.silu(x)
    >>> def silu_composed(x):
    ...     return x * torch.sigmoid(x)
    >>> case = kcert.Case(name="silu", ref=silu, prod=silu_composed,
    ...                   inputs={"x": kcert.Gaussian((4, 16), shift=0.1)})
    >>> grads = kcert.gradients(case)
    >>> grads.name, grads.output_names
    ('silu_grad', ('output', 'grad_x'))
    >>> sorted(grads.inputs)  # the cotangent is redrawn per replicate, like x
    ['cotangent', 'x']
    >>> print(kcert.certify(grads, replicates=64).verdict)  # composed in bf16: several roundings
    WARN

    The WARN is the variance gate's: the composed gradient carries several bf16 roundings (its largest
    error about 1.5 harm ULP against ref's 0.5), and at this R the bound with one tail shape per side
    is not under the PASS line (docs/method.md, Gate 3); more replicates narrow it.
    """
    if not isinstance(case, Case):
        raise CaseError(f"gradients: case must be a kcert.Case, got {type(case).__name__}")
    where = f"gradients(case {case.name!r})"
    if not isinstance(include_forward, bool):
        raise CaseError(f"{where}: include_forward must be True or False, got {include_forward!r}")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise CaseError(f"{where}: name must be a non-empty string, got {name!r}")

    cpu = torch.device("cpu")
    draw = probes.draw_inputs(case, 0, 0, cpu)
    weights = probes.draw_weights(case, 0, cpu)
    values = {**draw.working, **weights.working}
    wrt = _resolve_wrt(case, wrt, values)
    dry = _dry_run(case, values, wrt)

    n = len(dry.shapes)
    out_names = tuple(case.output_name(i, n) for i in range(n))
    for out_name, needs in zip(out_names, dry.requires_grad):
        if not needs:
            raise CaseError(f"{where}: {out_name} of ref does not require grad, so it has no gradient with respect "
                            f"to {list(wrt)}: it is computed without autograd (under no_grad, detached, or from "
                            f"integer operations); certify a kernel that returns only differentiable outputs")
    if dry.unused:
        raise CaseError(f"{where}: no output of ref depends on {list(dry.unused)}; their gradients would be "
                        f"identically zero. Leave them out of wrt")

    # cotangents: one probe per output, after the case's own inputs (so those draw as before)
    if isinstance(cotangent, Mapping):
        unknown = sorted(set(cotangent) - set(out_names))
        if unknown:
            raise CaseError(f"{where}: cotangent names outputs {unknown}, but the outputs are {list(out_names)}")
        per_output = [cotangent.get(o) for o in out_names]
    else:
        per_output = [cotangent] * n
    taken = set(case.inputs) | set(case.weights)
    cot_names, cot_probes = [], {}
    for i, (out_name, shape) in enumerate(zip(out_names, dry.shapes)):
        cname = _cotangent_name(i, n, taken, where)
        cot_names.append(cname)
        cot_probes[cname] = _cotangent_probe(per_output[i], shape, out_name, where)

    # gradient outputs: names and buckets
    grad_names = tuple(f"grad_{w}" for w in wrt)
    clash = sorted(set(grad_names) & set(out_names))
    if clash and include_forward:
        raise CaseError(f"{where}: output names {clash} are taken by forward outputs; pass include_forward=False "
                        f"or rename the outputs")
    if isinstance(buckets, Mapping):
        unknown = sorted(set(buckets) - set(wrt))
        if unknown:
            raise CaseError(f"{where}: buckets names {unknown}, which are not differentiated (wrt {list(wrt)})")
        chosen = {w: buckets.get(w) for w in wrt}
    else:
        chosen = {w: buckets for w in wrt}
    grad_specs = []
    for w, gname in zip(wrt, grad_names):
        ndim = values[w].dim()
        spec = chosen[w]
        if spec is None:
            spec = _default_bucket(ndim, w in case.weights)
        grad_specs.append(_check_spec(spec, ndim, f"{where}, buckets for {gname}"))

    forward_specs = [case.bucket_spec(i, n) for i in range(n)] if include_forward else []
    plan = _Plan(case.name, wrt, tuple(cot_names), out_names, include_forward)

    def wrap(fn, role):
        return None if fn is None else _Differentiated(fn, role, plan)

    described = ", ".join(f"{c}: {p.describe().get('kind')}" for c, p in cot_probes.items())
    text = f"gradients w.r.t. {', '.join(wrt)} (cotangents {described})"
    return Case(
        name=name if name is not None else f"{case.name}_grad",
        ref=wrap(case.ref, "ref"),
        prod=wrap(case.prod, "prod"),
        inputs={**case.inputs, **cot_probes},
        weights=dict(case.weights),
        buckets=tuple(forward_specs + grad_specs),
        dtype=case.dtype,
        oracle=wrap(case.oracle, "oracle"),
        prod_math=wrap(case.prod_math, "prod_math"),
        output_names=(out_names if include_forward else ()) + grad_names,
        description=f"{case.description}; {text}" if case.description else text,
        prod_precisions=case.prod_precisions,  # the precision ladder's rungs: the gradients run at them too
        accept_untested_algebra=case.accept_untested_algebra,
    )
