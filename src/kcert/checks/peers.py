"""What other rules would have said (docs/kernelbench.md, "Peer rules").

The common correctness rules of the field, applied to the certification's own samples: the draws of
replicates 0 .. :data:`TRIALS` - 1 (by seed, as the run drew them), with the run's weights. The kernels
are simply called again on those draws (the per-replicate reduction is not touched), so the cost is
``TRIALS`` calls of ref, prod and the float64 oracle. A rule passes when it holds on every trial and
every output:

- ``assert_close``: ``torch.testing.assert_close(prod, ref)`` with its defaults (rtol, atol by dtype:
  float32 1.3e-6 and 1e-5, bfloat16 1.6e-2 and 1e-5, float16 1e-3 and 1e-5; dtypes must match).
- ``kernelbench``: KernelBench's check, ``torch.allclose(ref, prod, atol=tol, rtol=tol)`` with tol 1e-4
  (1e-2 when ref's output is float16 or bfloat16) on 5 trials, after an equal-shape check.
- ``flashattention``: FlashAttention's test rule, prod's largest error against the float64 oracle at
  most twice ref's, plus its forward atol: ``max|prod - o| <= 2 max|ref - o| + 2 max|(o + 0.3 - 0.3) - o|``
  with ``o`` the oracle rounded to float32 (its reference is a float32 computation).
- ``dynamo_same``: ``torch._dynamo.utils.same(ref, prod, fp64_ref=oracle, tol=tol)`` (the torch.compile
  accuracy check: allclose at tol, else prod's RMSE against float64 at most a multiplier, 2 or 3, times
  ref's plus tol / 10), tol as KernelBench's.
"""

from __future__ import annotations

import time

import torch

from ..case import Case
from ..errors import KcertError, RealModeUnsupported
from ..execution import probes
from ..execution.realmode import run_real
from ..execution.runner import as_outputs
from ..results.checks import PeerRuleResult, PeerRulesResult

TRIALS = 5  # KernelBench's correctness trials; every rule runs on the same ones
LOW_PRECISION = (torch.float16, torch.bfloat16)

TITLES = {
    "assert_close": "assert_close (defaults)",
    "kernelbench": "KernelBench allclose",
    "flashattention": "FlashAttention 2x rule",
    "dynamo_same": "dynamo same (fp64 ref)",
}


def tolerance(dtype: torch.dtype) -> float:
    """KernelBench's (and dynamo's accuracy check's) tolerance for an output dtype."""
    return 1e-2 if dtype in LOW_PRECISION else 1e-4


def _max_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a.detach().to(torch.float64) - b.detach().to(device=a.device, dtype=torch.float64)).abs()
    return float(d.nan_to_num(nan=float("inf")).max()) if d.numel() else 0.0


def assert_close_rule(ref: torch.Tensor, prod: torch.Tensor) -> tuple[bool, str]:
    try:
        torch.testing.assert_close(prod, ref)
    except AssertionError as exc:
        lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
        keep = [ln for ln in lines if ln.startswith(("Mismatched", "Greatest", "The values", "dtype", "The failure"))]
        return False, "; ".join((keep or lines)[:3])
    return True, f"max |prod - ref| = {_max_abs(ref, prod):.3g} within the {str(ref.dtype)[6:]} defaults"


def kernelbench_rule(ref: torch.Tensor, prod: torch.Tensor) -> tuple[bool, str]:
    if tuple(ref.shape) != tuple(prod.shape):
        return False, f"output shape {tuple(prod.shape)}, expected {tuple(ref.shape)}"
    tol = tolerance(ref.dtype)
    try:
        ok = bool(torch.allclose(ref, prod, atol=tol, rtol=tol))
    except RuntimeError as exc:
        return False, f"torch.allclose raised: {exc}"
    return ok, f"max |prod - ref| = {_max_abs(ref, prod):.3g} at atol = rtol = {tol:g}"


def flashattention_rule(ref: torch.Tensor, prod: torch.Tensor, oracle: torch.Tensor) -> tuple[bool, str]:
    o = oracle.detach().to(torch.float32)
    atol = 2 * float(((o + 0.3 - 0.3) - o).abs().max()) if o.numel() else 0.0
    e_prod, e_ref = _max_abs(oracle, prod), _max_abs(oracle, ref)
    ok = e_prod <= 2 * e_ref + atol
    return ok, f"max|prod - fp64| = {e_prod:.3g} vs 2 x max|ref - fp64| + atol = 2 x {e_ref:.3g} + {atol:.3g}"


def dynamo_same_rule(ref: torch.Tensor, prod: torch.Tensor, oracle: torch.Tensor) -> tuple[bool, str]:
    from torch._dynamo.utils import same

    messages: list[str] = []

    def log(fmt, *args):
        messages.append(fmt % args if args else str(fmt))

    tol = tolerance(ref.dtype)
    ok = bool(same(ref, prod, fp64_ref=oracle, tol=tol, log_error=log))
    rmse = lambda a, b: float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2)))  # noqa: E731
    detail = (f"RMSE vs fp64: prod {rmse(oracle, prod):.3g}, ref {rmse(oracle, ref):.3g} (allclose at tol {tol:g} "
              f"first)")
    if not ok and messages:
        detail = f"{detail}; {messages[-1]}"
    return ok, detail


def run_peer_rules(case: Case, weights: probes.Draw, seed: int, device: torch.device,
                   trials: int = TRIALS) -> PeerRulesResult:
    """Apply every rule to replicates ``0 .. trials - 1`` of ``case`` (``weights``: the run's)."""
    started = time.perf_counter()
    samples = []
    oracle_note = ""
    try:
        for r in range(trials):
            draw = probes.draw_inputs(case, seed, r, device)
            working = {**draw.working, **weights.working}
            exact = {**draw.exact, **weights.exact}
            with torch.no_grad():
                ref = as_outputs(case.ref(**working), "ref", "peer rules")
                prod = as_outputs(case.prod(**working), "prod", "peer rules")
                oracle = None
                if not oracle_note:
                    try:
                        raw = case.oracle(**exact) if case.oracle is not None else \
                            run_real(lambda: case.ref(**exact), dtype=torch.float64, name="ref")
                        oracle = as_outputs(raw, "oracle", "peer rules")
                    except RealModeUnsupported as exc:
                        oracle_note = f"no float64 oracle: {exc}"
            samples.append((r, ref, prod, oracle))
    except (KcertError, Exception) as exc:  # noqa: BLE001 - a rule that cannot run says why, never stops a run
        return PeerRulesResult(trials=tuple(range(trials)), rules=(), seconds=time.perf_counter() - started,
                               note=f"the kernels could not be re-run on the first draws: {type(exc).__name__}: {exc}")

    rules = []
    for rule in ("assert_close", "kernelbench", "flashattention", "dynamo_same"):
        needs_oracle = rule in ("flashattention", "dynamo_same")
        if needs_oracle and oracle_note:
            rules.append(PeerRuleResult(rule=rule, title=TITLES[rule], passed=None, detail=oracle_note))
            continue
        passed, worst_detail, worst_trial = True, "", None
        for r, ref, prod, oracle in samples:
            if len(ref) != len(prod):
                passed, worst_detail, worst_trial = False, f"{len(prod)} outputs, expected {len(ref)}", r
                break
            for j in range(len(ref)):
                try:
                    if rule == "assert_close":
                        ok, detail = assert_close_rule(ref[j], prod[j])
                    elif rule == "kernelbench":
                        ok, detail = kernelbench_rule(ref[j], prod[j])
                    elif rule == "flashattention":
                        ok, detail = flashattention_rule(ref[j], prod[j], oracle[j])
                    else:
                        ok, detail = dynamo_same_rule(ref[j], prod[j], oracle[j])
                except Exception as exc:  # noqa: BLE001 - a rule's own crash is that rule's failure
                    ok, detail = False, f"raised {type(exc).__name__}: {exc}"
                if len(ref) > 1:
                    detail = f"output {j}: {detail}"
                if not ok:
                    passed, worst_detail, worst_trial = False, f"trial {r}: {detail}", r
                    break
                if not worst_detail:
                    worst_detail = detail
            if not passed:
                break
        if passed:
            worst_detail = f"all {len(samples)} trials; first: {worst_detail}"
        rules.append(PeerRuleResult(rule=rule, title=TITLES[rule], passed=passed, detail=worst_detail,
                                    worst_trial=worst_trial))
    return PeerRulesResult(trials=tuple(r for r, *_ in samples), rules=tuple(rules),
                           seconds=time.perf_counter() - started)
