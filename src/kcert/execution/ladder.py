"""The precision ladder's kernel evaluations (docs/method.md, Gate 1, "The precision ladder").

An opaque prod (a Triton launch, a CUDA/C++ extension, a ``torch.library`` custom op, a compiled
backward) cannot run in real mode, but it can usually run at several precisions. This module runs
prod, and ref as a yardstick, at every precision prod accepts, on the same real inputs, and
measures each one's error against the float64 oracle (a :class:`LadderMeasurement`, a record of
execution/evidence.py). The decision (does prod's error shrink with the format, or does it stop at a
floor?) is pure statistics, in :mod:`kcert.stats.ladder`, applied by gates/algebra.py.

- **Rungs.** The candidates are the case's ``prod_precisions`` or :data:`LADDER_DTYPES`. A rung is
  accepted when prod, called with every drawn floating probe in that dtype, returns without an
  exception the same number of outputs with the oracle's shapes and no floating output coarser
  than the rung (a kernel that returns bfloat16 for float32 inputs has not computed at float32).
- **Probe points.** The algebra stream's draws (the identity test's points: ``points`` from the
  probe and ``wide_points`` widened), rounded to every accepted low-precision format in turn, so
  each value is exactly representable at every rung: every rung and the oracle see the same real
  inputs. ``Fixed`` and integer probes are passed as they are at every rung, except a probe that
  ``follows_ladder_rungs`` (a model module's recorded activations and weights), upcast to a float32 or
  float64 rung finer than its own dtype (exact, so the oracle's copy is the same value); weights are the
  run's weights rounded the same way.
- **Errors.** Per output, rung and point, ``max|out - oracle| / max|oracle|`` (the identity test's
  relative discrepancy) for prod and, where ref runs at that rung, for ref, and the paired difference
  ``max|prod - ref| / max|ref|``; the gate takes maxima over groups of points.
  A rung at which prod returns a non-finite value where the oracle is finite is dropped (the
  format's range: float16 overflows at 65504), and says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..case import Case
from ..errors import KernelError, RealModeUnsupported
from . import probes, seeding
from .evidence import LadderMeasurement, RungMeasurement
from .realmode import run_real

# The formats a rung can be, coarse to fine by unit roundoff (bfloat16 2**-8, float16 2**-11, float32
# 2**-24, float64 2**-53). float16 comes after bfloat16: three more significand bits, less range.
LADDER_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
_SIGNIFICAND_BITS = {torch.bfloat16: 8, torch.float16: 11, torch.float32: 24, torch.float64: 53}


def default_precisions(working: torch.dtype) -> tuple[torch.dtype, ...]:
    """The rungs tried when a case declares none: its working dtype and the finer float32 and float64.
    float16 is not tried in a bfloat16 case: its rounding (2**-11) sits between the two, where a floor
    of that size could not be told from a float16 computation (docs/method.md)."""
    return tuple(dict.fromkeys(d for d in (working, torch.float32, torch.float64)
                               if significand_bits(d) >= significand_bits(working)))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def significand_bits(dtype: torch.dtype) -> int:
    return _SIGNIFICAND_BITS[dtype]


class OracleUnavailable(Exception):
    """No float64 oracle: ref cannot run in real mode and the case gives no ``oracle``."""


def _first_line(exc: BaseException, limit: int = 200) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()[0]
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _as_outputs(value) -> tuple[torch.Tensor, ...] | None:
    if isinstance(value, torch.Tensor):
        return (value,)
    if isinstance(value, (tuple, list)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return tuple(value)
    return None


def relative_error(reference: torch.Tensor, value: torch.Tensor) -> float:
    """``max|value - reference| / max|reference|`` (an absolute difference when ``reference`` is
    all zero); inf when ``value`` is non-finite where ``reference`` is not, or the other way round;
    positions where both are equal non-finite values (nan with nan) are left out."""
    a = reference.detach().to(torch.float64)
    b = value.detach().to(device=a.device, dtype=torch.float64)
    if a.numel() == 0:
        return 0.0
    finite_a, finite_b = torch.isfinite(a), torch.isfinite(b)
    if bool((finite_a != finite_b).any()):
        return math.inf
    both = finite_a & finite_b
    odd = ~both & ~((a == b) | (torch.isnan(a) & torch.isnan(b)))
    if bool(odd.any()):
        return math.inf
    if not bool(both.any()):
        return 0.0
    diff = float((b[both] - a[both]).abs().max())
    scale = float(a[both].abs().max())
    return diff / scale if scale > 0 else diff


def _grid_round(value: torch.Tensor, formats: Sequence[torch.dtype]) -> torch.Tensor:
    """``value`` rounded to each format in turn (coarsest significand first), as float64: the result is
    exactly representable in every one (a bfloat16 value is a float16 value unless float16's range or
    subnormals cut it, and then the float16 rounding keeps it a bfloat16 value)."""
    out = value.to(torch.float64)
    for fmt in formats:
        out = out.to(fmt).to(torch.float64)
    return out


def _draw_points(case: Case, seed: int, device, plan: probes.PointPlan):
    """(name -> (probe, sample)) per point: the algebra stream's draws, unrounded (float32 draws, float64
    for a float64 case, as the runner draws them)."""
    precision = torch.float64 if case.dtype == torch.float64 else torch.float32
    out = []
    for i in range(plan.total):
        g = seeding.generator(seed, seeding.ALGEBRA, i, device)
        widen, scale = plan.transform(i)
        values = {}
        for name, probe in case.inputs.items():
            p = probe.widened(widen) if widen != 1.0 else probe
            p = p.scaled(scale) if scale != 1.0 else p
            values[name] = (_handling(probe), p.sample(g, device, precision))
        out.append(values)
    return out


ROUNDS, FOLLOWS, KEPT = "rounds", "follows", "kept"  # how a probe's value reaches a rung


def _handling(probe) -> str:
    if probe.rounds_to_case_dtype:
        return ROUNDS
    return FOLLOWS if probe.follows_ladder_rungs else KEPT


def _upcast(value: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``value`` at rung ``dtype`` when that holds every value of its own dtype exactly (float32 and float64
    hold bfloat16 and float16, float64 holds float32); as it is otherwise."""
    if (value.is_floating_point() and dtype in (torch.float32, torch.float64) and value.dtype in _SIGNIFICAND_BITS
            and _SIGNIFICAND_BITS[value.dtype] < _SIGNIFICAND_BITS[dtype]):
        return value.to(dtype)
    return value


def _at_rung(point: dict, weights: dict, dtype: torch.dtype, formats: Sequence[torch.dtype]):
    """Keyword arguments at one rung: drawn floating values on the common grid, in ``dtype``; values that
    follow the rungs upcast to it; the rest as drawn (Fixed tensors in their own dtype, integers)."""
    kwargs = {}
    for name, (handling, value) in {**point, **weights}.items():
        if handling == ROUNDS and value.is_floating_point():
            kwargs[name] = _grid_round(value, formats).to(dtype)
        elif handling == FOLLOWS:
            kwargs[name] = _upcast(value, dtype)
        else:
            kwargs[name] = value
    return kwargs


def _exact(point: dict, weights: dict, formats: Sequence[torch.dtype]):
    kwargs = {}
    for name, (handling, value) in {**point, **weights}.items():
        if handling == ROUNDS and value.is_floating_point():
            kwargs[name] = _grid_round(value, formats)
        else:
            kwargs[name] = value.to(torch.float64) if value.is_floating_point() else value
    return kwargs


def _call(fn: Callable, kwargs: dict):
    with torch.no_grad():
        return fn(**kwargs)


def _oracle_fn(case: Case) -> tuple[Callable[[dict], object], str]:
    if case.oracle is not None:
        return (lambda kw: _call(case.oracle, kw)), "the given oracle"

    def real(kw):
        with torch.no_grad():
            return run_real(lambda: case.ref(**kw), dtype=torch.float64, name="ref")

    return real, "ref in real mode"


def _oracle_at(oracle: Callable[[dict], object], kwargs: dict, case: Case, where: str):
    """The oracle's outputs at one point; a real-mode refusal means no oracle, any other error names the point."""
    try:
        return _as_outputs(oracle(kwargs))
    except RealModeUnsupported as exc:
        raise OracleUnavailable(str(exc)) from exc
    except Exception as exc:
        raise KernelError(f"case {case.name!r}: the oracle raised {_first_line(exc)} at {where}") from exc


def _refusal(outs, oracle_outs, dtype: torch.dtype, role: str) -> str | None:
    """Why ``outs`` (prod's outputs at rung ``dtype``) cannot stand for a run at that precision."""
    if outs is None:
        return f"{role} did not return a tensor or a tuple of tensors"
    if len(outs) != len(oracle_outs):
        return f"{role} returned {len(outs)} outputs, the oracle {len(oracle_outs)}"
    for j, (o, ref) in enumerate(zip(outs, oracle_outs)):
        if tuple(o.shape) != tuple(ref.shape):
            return f"output {j} has shape {tuple(o.shape)}, the oracle's {tuple(ref.shape)}"
        coarser = o.dtype in _SIGNIFICAND_BITS and _SIGNIFICAND_BITS[o.dtype] < _SIGNIFICAND_BITS[dtype]
        if o.is_floating_point() and coarser:
            return (f"output {j} is {dtype_name(o.dtype)} for {dtype_name(dtype)} inputs: it was not computed at "
                    f"{dtype_name(dtype)}")
    return None


def measure(case: Case, weights: probes.Draw, seed: int, device, points: int = 8, wide_points: int = 8,
            widen: float = 4.0, candidates: Sequence[torch.dtype] | None = None,
            small_points: int | None = None) -> LadderMeasurement:
    """Run prod (and ref) at every candidate precision prod accepts; see the module docstring.
    ``small_points``: draws scaled to small magnitudes (default ``points // 2``, :class:`probes.PointPlan`).
    Raises :class:`OracleUnavailable` when there is no float64 oracle, :class:`KernelError` when the
    oracle itself raises."""
    if candidates is None:
        candidates = case.prod_precisions or default_precisions(case.dtype)
    candidates = tuple(sorted(dict.fromkeys(candidates), key=significand_bits))
    oracle, oracle_label = _oracle_fn(case)
    plan = probes.PointPlan.for_case(case, points, wide_points, small_points, widen)
    drawn = _draw_points(case, seed, device, plan)
    # the run's weights: drawn values go on the grid like the inputs, Fixed ones stay as they are
    weight_values = {name: (_handling(probe),
                            weights.exact[name] if probe.rounds_to_case_dtype else weights.working[name])
                     for name, probe in case.weights.items()}

    # 1. Which precisions prod accepts: one call at the first point, on the grid of every candidate.
    low = [d for d in candidates if d != torch.float64]
    trial_oracle = _oracle_at(oracle, _exact(drawn[0], weight_values, low), case, "the precision ladder's first point")
    if trial_oracle is None:
        raise KernelError(f"case {case.name!r}: the oracle must return a tensor or a tuple of tensors")
    refused: dict[torch.dtype, str] = {}
    for d in candidates:
        try:
            outs = _as_outputs(_call(case.prod, _at_rung(drawn[0], weight_values, d, low)))
        except Exception as exc:  # noqa: BLE001 - any refusal means "not accepted", and says why
            refused[d] = f"prod raised {_first_line(exc)}"
            continue
        why = _refusal(outs, trial_oracle, d, "prod")
        if why is not None:
            refused[d] = why
    accepted = [d for d in candidates if d not in refused]

    # 2. The grid: every accepted low-precision format (the coarsest decides what is representable).
    grid = [d for d in accepted if d != torch.float64]
    exact_points = [_exact(p, weight_values, grid) for p in drawn]
    oracle_outs = [_oracle_at(oracle, kw, case, f"precision ladder point {i}") for i, kw in enumerate(exact_points)]
    n_out = len(oracle_outs[0])
    names = tuple(case.output_name(j, n_out) for j in range(n_out))

    # 3. Every accepted rung at every point.
    rungs = []
    for d in candidates:
        if d in refused:
            rungs.append(RungMeasurement(dtype_name(d), False, refused[d]))
            continue
        prod_err: list[list[float]] = [[] for _ in range(n_out)]  # per output, per point
        ref_err: list[list[float]] = [[] for _ in range(n_out)]
        pair_err: list[list[float]] = [[] for _ in range(n_out)]  # |prod - ref| relative to ref's peak
        reason, ref_reason = "", ""
        out_dtypes: tuple[str, ...] = ()
        for i, point in enumerate(drawn):
            kwargs = _at_rung(point, weight_values, d, grid)
            try:
                outs = _as_outputs(_call(case.prod, kwargs))
            except Exception as exc:  # noqa: BLE001
                reason = f"prod raised {_first_line(exc)} at point {i}"
                break
            why = _refusal(outs, oracle_outs[i], d, "prod")
            if why is not None:
                reason = f"{why} (point {i})"
                break
            out_dtypes = out_dtypes or tuple(dtype_name(o.dtype) for o in outs)
            for j in range(n_out):
                prod_err[j].append(relative_error(oracle_outs[i][j], outs[j]))
            if not ref_reason:
                try:
                    routs = _as_outputs(_call(case.ref, kwargs))
                    why = _refusal(routs, oracle_outs[i], d, "ref")
                    if why is not None:
                        raise ValueError(why)
                    for j in range(n_out):
                        ref_err[j].append(relative_error(oracle_outs[i][j], routs[j]))
                        pair_err[j].append(relative_error(routs[j], outs[j]))
                except Exception as exc:  # noqa: BLE001 - ref is only the yardstick here
                    ref_reason = f"{_first_line(exc)} at point {i}"
        if reason:
            rungs.append(RungMeasurement(dtype_name(d), False, reason))
            continue
        nonfinite = [(j, i) for j in range(n_out) for i, e in enumerate(prod_err[j]) if math.isinf(e)]
        if nonfinite:
            j, i = nonfinite[0]
            rungs.append(RungMeasurement(dtype_name(d), False, f"{names[j]}: prod returns non-finite values where the "
                                         f"float64 oracle is finite at {plan.describe(i)} (the format's range), "
                                         f"rung dropped"))
            continue
        def finite_or_none(errs):
            return tuple(tuple(None if math.isinf(e) else e for e in per_point) for per_point in errs)

        ref_points = finite_or_none(ref_err) if not ref_reason else ()
        pair_points = finite_or_none(pair_err) if not ref_reason else ()
        rungs.append(RungMeasurement(dtype_name(d), True, "", tuple(max(e) for e in prod_err),
                                     tuple(None if ref_reason or math.isinf(max(e)) else max(e) for e in ref_err),
                                     ref_reason, out_dtypes, tuple(tuple(e) for e in prod_err), ref_points,
                                     pair_points))
    return LadderMeasurement(oracle_label, dtype_name(grid[0]) if grid else "float64", points, wide_points, names,
                             tuple(rungs), plan.small_points, tuple(plan.describe(i) for i in range(plan.total)))
