"""The algebra gate's evaluation (docs/method.md, "Gate 1"): the kernel runs behind its verdict.

- **Identity test**: ref and prod (or the case's ``oracle`` / ``prod_math`` where a side cannot run
  in real mode) on the algebra stream's draws (``points`` probe draws, then ``wide_points`` widened by
  ``widen``), in float64 and in float32 real mode; per output the largest relative discrepancy.
- **Symbolic proof** (execution/proof.py): tried on the same sides and draws when ``proof``.
- **Precision ladder** (execution/ladder.py): when prod cannot run in real mode and there is
  something to compare it with.

:func:`evaluate_algebra` returns an :class:`~kcert.execution.evidence.AlgebraEvidence`;
:func:`kcert.gates.algebra.judge_algebra` judges it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

import torch

from ..case import Case
from ..errors import KernelError, RealModeUnsupported
from ..stats.identity import FAIL_FLOOR
from . import ladder as ladder_run
from . import probes
from .evidence import AlgebraEvidence, IdentityOutput
from .realmode import run_real
from .runner import as_outputs


def relative_discrepancy(a: torch.Tensor, b: torch.Tensor) -> float:
    """max |a - b| / max |a| over the elements where a and b differ; 0 when identical (nan with
    nan and equal infinities count as identical), inf when they differ at a non-finite value."""
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    if a.numel() == 0:
        return 0.0
    # Fast path, four passes: when every difference is finite (so are a and b), an equal pair
    # contributes 0 to the maximum anyway. The general path below made ~15 full-size passes and
    # was half of a RoPE certification's fixed cost (benchmarks/overhead.py).
    diff = float(torch.sub(a, b).abs_().max())
    if math.isfinite(diff):
        lo, hi = (float(v) for v in torch.aminmax(a))
        scale = max(-lo, hi)
        return diff / scale if scale > 0 else diff
    same = (a == b) | (torch.isnan(a) & torch.isnan(b))
    if bool(same.all()):
        return 0.0
    if bool((~same & ~(torch.isfinite(a) & torch.isfinite(b))).any()):
        return math.inf
    diff = float(torch.where(same, 0.0, (a - b).abs()).max())
    finite = a[torch.isfinite(a)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    return diff / scale if scale > 0 else diff


def evaluate_algebra(case: Case, weights: probes.Draw, seed: int, device, points: int = 8, wide_points: int = 8,
                     widen: float = 4.0, proof: bool = True, proof_budget_s: float | None = None,
                     small_points: int | None = None) -> AlgebraEvidence:
    """Run the algebra gate's evaluations for ``case`` (``weights``: the run's weights); see the module
    docstring. ``small_points``: draws scaled to small magnitudes after the probe and wide ones (default
    ``points // 2``; :class:`kcert.execution.probes.PointPlan`). ``proof_budget_s``: the proof's hang
    guard (default ``execution.proof.PROOF_BUDGET_S``). Raises :class:`KernelError` when ref and prod
    return different numbers of outputs in real mode."""
    sides = {"ref": (case.ref, "ref in real mode", case.oracle, "the given oracle"),
             "prod": (case.prod, "prod in real mode", case.prod_math, "the given prod_math")}
    chosen: dict[str, tuple[Callable, str]] = {}
    skip_reasons = []
    opaque = ""
    plan = probes.PointPlan.for_case(case, points, wide_points, small_points, widen)
    draws = [plan.draw(case, seed, i, device) for i in range(plan.total)]
    results: dict[str, dict[torch.dtype, list]] = {}
    for role, (kernel, kernel_label, math_def, math_label) in sides.items():
        candidates = [(kernel, kernel_label)] + ([(math_def, math_label)] if math_def is not None else [])
        last_error = None
        for fn, label in candidates:
            try:
                results[role] = _run_real(fn, label, draws, weights)
                chosen[role] = (fn, label)
                break
            except RealModeUnsupported as exc:
                last_error = exc
        if role not in chosen:
            what = "math definition (Case(oracle=...))" if role == "ref" else "real definition (Case(prod_math=...))"
            skip_reasons.append(f"{role} cannot run in real mode and no {what} was given: {last_error}")
            if role == "prod":
                opaque = opaque_kind(str(last_error))

    def evidence(**found) -> AlgebraEvidence:
        return AlgebraEvidence(points, wide_points, chosen.get("ref", (None, "unavailable"))[1],
                               chosen.get("prod", (None, "unavailable"))[1], ladder_run.dtype_name(case.dtype),
                               case.accept_untested_algebra, tuple(skip_reasons), small_points=plan.small_points,
                               training_dtype=case.training_format, prod_opaque=opaque, **found)

    if skip_reasons:
        if "prod" in chosen:
            return evidence()  # prod runs in real mode; ref has no oracle: nothing to compare prod with
        try:
            return evidence(ladder=ladder_run.measure(case, weights, seed, device, points, wide_points, widen,
                                                      small_points=plan.small_points))
        except ladder_run.OracleUnavailable as exc:
            return evidence(no_oracle=str(exc))

    n_out = len(results["ref"][torch.float64][0])
    if any(len(o) != n_out for role in results for dt in results[role] for o in results[role][dt]):
        raise KernelError(f"case {case.name!r}: ref and prod return different numbers of outputs in real mode")
    outputs = []
    for j in range(n_out):
        d = {}
        for dt in (torch.float64, torch.float32):
            values = [relative_discrepancy(a[j], b[j]) for a, b in zip(results["ref"][dt], results["prod"][dt])]
            if dt == torch.float32:
                values = [v for v in values if math.isfinite(v)] or [math.inf]
            d[dt] = max(values)
        outputs.append(IdentityOutput(case.output_name(j, n_out), d[torch.float64], d[torch.float32]))
    if not proof:
        return evidence(outputs=tuple(outputs))
    from .proof import (  # SymPy is imported only when a proof is tried (~1.4 s)
        PROOF_BUDGET_S,
        prove,
    )

    attempt = prove(case, chosen["ref"], chosen["prod"], draws, weights, FAIL_FLOOR,
                    PROOF_BUDGET_S if proof_budget_s is None else proof_budget_s, wide_from=points)
    return evidence(outputs=tuple(outputs), proof=attempt)


# What real mode stopped at, in the words of its refusal (execution/realmode.py), and what that makes prod.
_OPAQUE_KINDS = (
    (("data_ptr", "untyped_storage", "__cuda_array_interface__", "__dlpack__", "storage"),
     "it reads raw storage: a Triton launch or a C/C++/CUDA extension"),
    (("numpy",), "it leaves torch through .numpy(): a numpy body, or Triton's CPU interpreter"),
    (("custom operator", "::", "torch.ops."), "a custom operator, whose body kcert cannot evaluate in float64"),
)


def opaque_kind(refusal: str) -> str:
    """Why prod is opaque to real mode, in a short clause, from real mode's refusal message."""
    called = re.search(r"cannot follow `([^`]+)`", refusal)
    what = called.group(1) if called else ""
    for keys, text in _OPAQUE_KINDS:
        if any(k in what or k in refusal[:200] for k in keys):
            return f"{text}: `{what}`" if what else text
    return f"kcert cannot evaluate it in float64: `{what}`" if what else "kcert cannot evaluate it in float64"


def _run_real(fn: Callable, label: str, draws, weights) -> dict:
    out = {}
    for dt in (torch.float64, torch.float32):
        values = []
        for i, draw in enumerate(draws):
            kwargs = {**draw.exact, **weights.exact}
            with torch.no_grad():
                values.append(as_outputs(run_real(lambda kw=kwargs: fn(**kw), dtype=dt, name=label), label,
                                         f"algebra point {i}"))
        out[dt] = values
    return out
