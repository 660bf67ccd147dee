"""The symbolic proof, Gate 1's proof level (docs/method.md, "Gate 1"): evaluate ref and prod on tensors
of real symbols of a small shape S and simplify ``ref - prod`` to zero. Its outcome ("proved at shape S",
"disproved" with a witness, or "not reached" and why) is evidence: gates/algebra.py judges it together
with the identity test.

Steps, each with its own way of not reaching a proof (``AlgebraProofResult.reason``):

1. **shape** - every probe dimension size N maps to a small size (same N, same small size, so
   dimensions that must match stay matched); candidates shrink to ladders starting at 4 or 8 and,
   for kernels that close over a size (a RoPE frequency rule built for head_dim 128), keep some
   sizes whole. Candidates leaving fewer sizes whole come first, then the cheapest (fewest symbols,
   at most :data:`MAX_SYMBOLS`); the first at which ref and prod both run in float64 real mode and
   return outputs of equal shapes is S. None: "shape" (or "too large").
2. **symbolic run** - floating probes and weights become tensors of distinct real symbols; integer
   and ``Fixed`` probes are held at the values of the identity test's first draw. An operation the
   evaluator does not follow: "unsupported", naming it.
3. **cross-check** - sampled elements of the symbolic outputs, evaluated at a draw, must match float64
   real mode at S (guards against an evaluator error): "mismatch".
4. **decision** - an element whose difference is structurally zero is proved. A float64 real-mode
   difference of at least the fail floor at a draw, confirmed by evaluating the exact difference to
   30 digits, disproves (the witness). Otherwise expand / cancel / radsimp / simplify must reach 0
   (``simplify`` only on differences of at most :data:`SIMPLIFY_MAX_NODES` nodes); if they do not:
   "undecided".

The whole proof runs under a deterministic work budget (:data:`PROOF_BUDGET`, units of
:class:`kcert.execution.symbolic.Deadline`: symbolic elements read and written by the evaluator,
expression nodes simplified or evaluated): "budget". Equal inputs spend equal units, so the outcome
does not depend on the machine or its load. A wall-clock guard (:data:`PROOF_BUDGET_S`) only stops a
hang: "time guard". ``torch.compile``d kernels are evaluated with compilation disabled (their Python
definition; the identity test runs them compiled).
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Callable

import numpy as np
import sympy
import torch

from ..case import Case
from ..certificate import AlgebraProofResult
from . import probes
from .realmode import run_real
from .runner import as_outputs
from .symbolic import (
    Deadline,
    SymbolicTimeout,
    SymbolicUnsupported,
    compilation_disabled,
    expression_size,
    run_symbolic,
    symbols_like,
)

# Work units of one case's proof, shape search included: 2.3x the most any control's proof spends
# (85k units, compiled attention; Llama 3 RoPE 76k; benchmarks/proof_budget.py, docs/method.md). At
# the slowest rate measured on an idle 2-core machine (~5k units/s) a proof it stops takes ~40 s.
PROOF_BUDGET = 200_000
PROOF_BUDGET_S = 300.0  # wall-clock guard against a hang only, 5x above what PROOF_BUDGET allows there
SIMPLIFY_MAX_NODES = 4000  # sympy.simplify is tried only on differences this small (its cost grows fast)
MAX_SYMBOLS = 2048  # RoPE at head_dim 128 (closed over) with 4 tokens needs 1536
LADDER_STARTS = (4, 8)  # 4: the smallest head size at which interleaved and half-split RoPE layouts differ
COLLIDE_PENALTY = 4  # a shape whose sizes collide must need 4x fewer symbols to be tried first
MAX_KEPT = 2  # at most this many distinct sizes kept whole
MAX_SHAPE_TRIES = 12
PROOF_POINTS = 4  # draws used for the cross-check and the witness search: 2 probe draws, 2 wide draws
CROSS_CHECK_ELEMENTS = 16
CROSS_CHECK_TOLERANCE = 1e-6  # relative to the output's scale: an evaluator error is of order one
DIGITS = 30


class _NotReached(Exception):
    def __init__(self, reason: str, note: str):
        super().__init__(note)
        self.reason = reason
        self.note = note


# --- shapes -------------------------------------------------------------------------------------------


def _kind(n: int) -> Callable[[int], bool]:
    if n & (n - 1) == 0:
        return lambda v: v & (v - 1) == 0
    if n % 2 == 0:
        return lambda v: v % 2 == 0
    return lambda v: v % 2 == 1


def _ladder(sizes: list[int], start: int, keep: frozenset[int], distinct: bool = True) -> dict[int, int]:
    """Sizes up to ``start`` stay; larger ones map to the smallest size of the same kind (power of two,
    even, odd) that is at least ``start`` and, when ``distinct``, larger than the sizes below it
    (so two different sizes never collide); sizes in ``keep`` stay whole."""
    mapping, prev = {}, 0
    for n in sorted(sizes):
        if n in keep:
            mapping[n] = n
        elif n <= start:
            mapping[n] = prev = n
        else:
            ok = _kind(n)
            low = max(prev + 1, start) if distinct else start
            mapping[n] = prev = next(v for v in range(low, n + 1) if ok(v))
    return mapping


def candidate_shapes(shapes: dict[str, tuple[int, ...]], symbolic: set[str]
                     ) -> tuple[list[dict[str, tuple[int, ...]]], int]:
    """Small shapes to try, those leaving the fewest sizes (above 4) whole first, then the cheapest
    (fewest symbols); and how many were left out for needing more than :data:`MAX_SYMBOLS` symbols.

    Ladders from 4 and 8 with distinct sizes, so that a kernel using the size of the wrong axis cannot
    agree by coincidence; ladders that let sizes collide (from 4, and from 2 when a size is kept
    whole) are preferred only when they need COLLIDE_PENALTY times fewer symbols (attention's
    seq x seq scores grow fast). The identity test at the probe's own shapes backs every choice."""
    sizes = sorted({d for s in shapes.values() for d in s if d > 1})
    large = [n for n in sizes if n > min(LADDER_STARTS)]
    seen, out = set(), []
    for kept in range(min(MAX_KEPT, len(large)) + 1):
        for keep in itertools.combinations(sorted(large, reverse=True), kept):
            ladders = [(start, True) for start in LADDER_STARTS] + [(min(LADDER_STARTS), False)]
            ladders += [(2, False)] if kept else []
            for start, distinct in ladders:
                m = _ladder(sizes, start, frozenset(keep), distinct)
                small = {k: tuple(m.get(d, d) for d in s) for k, s in shapes.items()}
                key = tuple(sorted(small.items()))
                if key in seen:
                    continue
                seen.add(key)
                cost = sum(int(np.prod(s, dtype=np.int64)) for k, s in small.items() if k in symbolic)
                whole = sum(m[n] == n for n in large)
                out.append((whole, cost * (1 if distinct else COLLIDE_PENALTY), cost, small))
    out.sort(key=lambda c: c[:2])  # shrink every size the kernels allow, then the fewest symbols
    fits = [small for _, _, cost, small in out if cost <= MAX_SYMBOLS]
    return fits, len(out) - len(fits)


def _slice(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    return t[tuple(slice(0, s) for s in shape)].detach().cpu().clone()


# --- evaluation -------------------------------------------------------------------------------------


def _real_outputs(fn: Callable, label: str, kwargs: dict) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        return tuple(o.detach().to(torch.float64).cpu()
                     for o in as_outputs(run_real(lambda: fn(**kwargs), dtype=torch.float64, name=label), label,
                                         "the proof's small shape"))


def _numeric(e, subs: dict, digits: int = 15, deadline: Deadline | None = None) -> complex:
    """``e`` at the point ``subs`` (symbols -> Floats of DIGITS digits). xreplace rebuilds the
    expression, which evaluates Max, Abs & co. on numbers (evalf's own subs leaves some unevaluated)."""
    if deadline is not None:
        deadline.spend(expression_size(e))
    free = getattr(e, "free_symbols", set())
    value = e.xreplace({s: subs[s] for s in free}).evalf(digits)
    try:
        return complex(value)
    except TypeError:
        return complex("nan")


def _scale(values: np.ndarray) -> float:
    finite = np.abs(values[np.isfinite(values)])
    return float(finite.max()) if finite.size and finite.max() > 0 else 1.0


_CANONICAL = (
    ("expand", sympy.expand),
    ("cancel", lambda e: sympy.cancel(sympy.together(e))),
    ("radsimp", lambda e: sympy.expand(sympy.radsimp(e))),
    ("simplify", sympy.simplify),
)


def _zero_by(d, deadline: Deadline, order: list[int]) -> str | None:
    """The name of the canonicalisation that takes ``d`` to 0, or None; ``order`` moves the step that
    worked last to the front (elements of one output usually need the same step)."""
    if d.has(sympy.tanh, sympy.sinh, sympy.cosh):
        d = d.rewrite(sympy.exp)
    size = expression_size(d)
    for i in list(order):
        if _CANONICAL[i][0] == "simplify" and size > SIMPLIFY_MAX_NODES:
            continue
        deadline.check()
        deadline.spend(size)
        if _CANONICAL[i][1](d) == 0:
            order.remove(i)
            order.insert(0, i)
            return _CANONICAL[i][0]
    return None


def _readable(e, digits: int = 6):
    """``e`` with its long exact constants as decimals of ``digits`` digits: a kernel's float constant,
    converted exactly, reads 282842712474619/400000000000000; people read 0.707107 (small ratios such
    as 1/2 stay)."""
    atoms = getattr(e, "atoms", None)
    if atoms is None:
        return e
    long = {r: sympy.Float(r, digits) for r in atoms(sympy.Rational) if not r.is_Integer and r.q > 1000}
    return e.xreplace(long) if long else e


def _short(e, limit: int = 300, digits: int = 6) -> str:
    text = str(_readable(e, digits))
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- the proof ---------------------------------------------------------------------------------------


def prove(case: Case, ref: tuple[Callable, str], prod: tuple[Callable, str], draws: list[probes.Draw],
          weights: probes.Draw, fail_floor: float, budget_s: float = PROOF_BUDGET_S,
          points: int = PROOF_POINTS, wide_from: int | None = None, budget: int | None = None) -> AlgebraProofResult:
    """Try to prove (or disprove) ``ref == prod`` as real functions at a small shape.

    ``draws``: the identity test's draws (probe draws, then wide ones from index ``wide_from``); the
    witness search and the cross-check use ``points`` of them, half probe, half wide. ``budget``: work
    units (default :data:`PROOF_BUDGET`, read when called); ``budget_s``: the hang guard in seconds.
    Compiled kernels run with compilation disabled throughout (their Python definition)."""
    started = time.perf_counter()
    budget = PROOF_BUDGET if budget is None else budget
    deadline = Deadline(budget_s, budget)
    state: dict = {"shape": {}, "held": ()}
    try:
        with deadline.alarm(), compilation_disabled():
            result = _prove(case, ref, prod, draws, weights, fail_floor, deadline, points, wide_from, state)
    except SymbolicTimeout as exc:
        if exc.kind == "work":
            note, reason = f"the proof's work budget of {budget:,} units ran out", "budget"
        else:
            note, reason = (f"the proof's time guard of {budget_s:g} s ran out (a guard against a hang; the "
                            "outcome may depend on the machine)"), "time guard"
        result = AlgebraProofResult(outcome="not reached", note=note, shape=state["shape"], held=state["held"],
                                    reason=reason)
    except _NotReached as exc:
        result = AlgebraProofResult(outcome="not reached", note=exc.note, shape=state["shape"], held=state["held"],
                                    reason=exc.reason)
    return AlgebraProofResult(outcome=result.outcome, note=result.note, shape=result.shape, held=result.held,
                              reason=result.reason, seconds=time.perf_counter() - started, witness=result.witness)


def _pick_points(n: int, points: int, wide_from: int | None) -> list[int]:
    if wide_from is None or wide_from >= n:
        return list(range(min(points, n)))
    narrow = list(range(min(points - points // 2, wide_from)))
    wide = list(range(wide_from, min(wide_from + points // 2, n)))
    return narrow + wide


def _prove(case, ref, prod, draws, weights, fail_floor, deadline, points, wide_from, state) -> AlgebraProofResult:
    probe_of = {**case.inputs, **case.weights}
    first = {**draws[0].exact, **weights.exact}
    symbolic = {k for k, v in first.items() if probe_of[k].rounds_to_case_dtype and v.is_floating_point()}
    held = tuple(k for k in first if k not in symbolic)
    state["held"] = held
    if not symbolic:
        raise _NotReached("shape", "no floating probe or weight to make symbolic")
    shapes = {k: tuple(v.shape) for k, v in first.items()}
    candidates, too_large = candidate_shapes(shapes, symbolic)
    if not candidates:
        raise _NotReached("too large", f"every small shape tried needs more than {MAX_SYMBOLS} symbols")

    # 1. the smallest shape at which both kernels run. A failure that names a probe size the shape
    # shrank (F.rms_norm's "normalized_shape=[1024]") means a kernel closes over that size: the
    # shapes that shrink it are not tried any more.
    failures = []
    closed: set[int] = set()
    chosen = None
    tries = 0
    for small in candidates:
        if tries == MAX_SHAPE_TRIES:
            break
        if _shrunk(shapes, small) & closed:
            continue
        tries += 1
        deadline.check()
        kwargs = {k: _slice(v, small[k]) for k, v in first.items()}
        try:
            r = _real_outputs(ref[0], ref[1], kwargs)
            p = _real_outputs(prod[0], prod[1], kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure (RealModeUnsupported included) rules this shape out
            failures.append(f"{_describe(small)}: {type(exc).__name__}: {_short(exc, 160)}")
            closed |= _sizes_named(exc, shapes, small)
            continue
        if len(r) != len(p) or any(a.shape != b.shape for a, b in zip(r, p)):
            failures.append(f"{_describe(small)}: ref and prod return outputs of different shapes")
            continue
        chosen = small
        break
    if chosen is None:
        larger = (f" ({too_large} larger shapes, keeping more sizes whole, would need more than {MAX_SYMBOLS} "
                  "symbols)") if too_large else ""
        kept = (f"; a kernel closes over size {', '.join(map(str, sorted(closed)))} (named by its error), and no "
                f"shape keeping it whole fits in {MAX_SYMBOLS} symbols") if closed else ""
        raise _NotReached("shape",
                          f"the kernels do not run at the {len(failures)} small shapes tried (they close over a "
                          f"probe size, or need sizes of a particular form){larger}{kept}: " + "; ".join(failures[:3]))
    state["shape"] = {k: chosen[k] for k in shapes}
    names = [case.output_name(j, len(r)) for j in range(len(r))]

    # 2. symbolic evaluation
    sym_kwargs = {k: symbols_like(k, chosen[k]) if k in symbolic else _slice(v, chosen[k]) for k, v in first.items()}
    sides = {}
    for role, (fn, label) in (("ref", ref), ("prod", prod)):
        try:
            sides[role] = run_symbolic(fn, sym_kwargs, deadline)
        except SymbolicUnsupported as exc:
            raise _NotReached("unsupported", f"{role} uses an operation the symbolic evaluator does not follow: "
                                             f"{exc}") from None
        except SymbolicTimeout:
            raise
        except Exception as exc:  # noqa: BLE001 - the kernel raised under symbolic evaluation
            raise _NotReached("error", f"{role} raised {type(exc).__name__} under symbolic evaluation: "
                                       f"{_short(exc, 200)}") from None
        deadline.check()
    if any(a.shape != b.shape for a, b in zip(sides["ref"], sides["prod"])) or len(sides["ref"]) != len(r):
        raise _NotReached("mismatch", "the symbolic outputs do not have the shapes of the real-mode outputs")

    # 3. numeric points: real mode at S, and the symbols' values there
    picked = _pick_points(len(draws), points, wide_from)
    real = []
    for i in picked:
        values = {**draws[i].exact, **weights.exact}
        kwargs = {k: _slice(values[k] if k in symbolic else first[k], chosen[k]) for k in first}
        real.append((i, kwargs, _real_outputs(ref[0], ref[1], kwargs), _real_outputs(prod[0], prod[1], kwargs)))
        deadline.check()
    subs_at = [_substitution(sym_kwargs, kw, symbolic) for _, kw, _, _ in real]
    _cross_check(sides, names, real, subs_at, deadline)

    # 4. decide, output by output
    witness = None
    pending = []
    for j, name in enumerate(names):
        rs, ps = sides["ref"][j], sides["prod"][j]
        for idx in np.ndindex(*rs.shape):
            if rs[idx] - ps[idx] != 0:
                pending.append((j, idx))
        for n, (i, _, r_out, p_out) in enumerate(real):
            a, b = r_out[j].numpy(), p_out[j].numpy()
            scale = _scale(a)
            with np.errstate(invalid="ignore"):
                rel = np.abs(a - b) / scale
            rel = np.where(np.isnan(a) & np.isnan(b), 0.0, rel)
            rel = np.where(np.isnan(rel), np.inf, rel)
            k = np.unravel_index(int(np.argmax(rel)), rel.shape) if rel.size else None
            if k is not None and rel[k] >= fail_floor and (witness is None or rel[k] > witness[0]):
                witness = (float(rel[k]), j, tuple(int(v) for v in k), n, i, float(a[k]), float(b[k]), scale)
    if witness is not None:
        return _disproof(witness, sides, names, subs_at, fail_floor, state)
    order = list(range(len(_CANONICAL)))
    used = set()
    for j, idx in pending:
        d = sides["ref"][j][idx] - sides["prod"][j][idx]
        step = _zero_by(d, deadline, order)
        used.add(step)
        if step is None:
            value = _numeric(d, subs_at[0], DIGITS)
            size = abs(value) / _scale(real[0][2][j].numpy())
            what = (f"numerically zero to {DIGITS} digits but not simplified to 0" if size < 10.0**-(DIGITS - 5)
                    else f"a real difference of relative size {size:.3g} (below the fail floor {fail_floor:g}: "
                         "e.g. constants written differently)")
            raise _NotReached("undecided", f"{names[j]} at {list(idx)}: ref - prod = {_short(d, 200)} is {what}")
    counted = sum(a.size for a in sides["ref"])
    how = f" ({len(pending)} of them after {' / '.join(sorted(used))})" if pending else " (structurally identical)"
    return AlgebraProofResult(
        outcome="proved",
        note=f"proved at shape {_describe(state['shape'])}: ref - prod simplifies to 0 for all {counted} output "
        f"elements{how}" + (f"; held at one draw's values: {', '.join(held)}" if held else ""),
        shape=state["shape"], held=held)


def _shrunk(shapes: dict, small: dict) -> set[int]:
    """The probe sizes that ``small`` shrinks."""
    return {n for k, s in shapes.items() for n, m in zip(s, small[k]) if n != m}


def _sizes_named(exc: BaseException, shapes: dict, small: dict) -> set[int]:
    """Probe sizes that ``small`` shrank and that the error message names (as a whole number), unless
    the number is also a size of ``small`` (then it may name that one)."""
    named = {int(t) for t in re.findall(r"(?<![\w.])\d+(?![\w.])", str(exc))}
    kept = {m for s in small.values() for m in s}
    return (named & _shrunk(shapes, small)) - kept


def _describe(small: dict) -> str:
    return ", ".join(f"{k} {tuple(v)}" for k, v in small.items())


def _substitution(sym_kwargs: dict, kwargs: dict, symbolic: set[str]) -> dict:
    subs = {}
    for k in symbolic:
        symbols = sym_kwargs[k].sym.reshape(-1)
        values = kwargs[k].to(torch.float64).reshape(-1).tolist()
        subs.update({s: sympy.Float(v, DIGITS) for s, v in zip(symbols, values)})
    return subs


def _cross_check(sides: dict, names: list[str], real: list, subs_at: list[dict], deadline: Deadline) -> None:
    """Sampled elements of the symbolic outputs must equal float64 real mode at the first draw."""
    rng = np.random.default_rng(0)
    subs = subs_at[0]
    for role, col in (("ref", 2), ("prod", 3)):
        for j, name in enumerate(names):
            exprs = sides[role][j]
            values = real[0][col][j].numpy()
            scale = _scale(values)
            flat = list(np.ndindex(*exprs.shape))
            picks = rng.choice(len(flat), size=min(CROSS_CHECK_ELEMENTS, len(flat)), replace=False) if flat else []
            for p in picks:
                idx = flat[int(p)]
                deadline.check()
                got, want = _numeric(exprs[idx], subs, deadline=deadline), complex(values[idx])
                if not np.isfinite(want) and not np.isfinite(got):
                    continue
                if not abs(got - want) <= CROSS_CHECK_TOLERANCE * scale:
                    raise _NotReached("mismatch", f"the symbolic evaluation of {role} gives {got.real:.6g} at "
                                                  f"{name}{list(idx)} where float64 real mode gives {want.real:.6g}: "
                                                  "kcert's symbolic evaluator does not reproduce an operation of "
                                                  "this kernel")


def _disproof(witness: tuple, sides: dict, names: list[str], subs_at: list[dict], fail_floor: float,
              state: dict) -> AlgebraProofResult:
    rel, j, idx, n, i, a, b, scale = witness
    d = sides["ref"][j][idx] - sides["prod"][j][idx]
    exact_diff = abs(_numeric(d, subs_at[n], DIGITS))
    if math.isnan(exact_diff) and math.isfinite(a) != math.isfinite(b):
        exact_diff = math.inf  # one side is NaN or infinite where the other is finite: not the same function
    if d == 0 or not exact_diff >= fail_floor * scale:
        raise _NotReached("undecided", f"float64 real mode differs at {names[j]}{list(idx)} (relative {rel:.3g}) "
                                       f"but the exact difference there is {exact_diff:.3g}: rounding, not algebra")
    expr = _short(sympy.expand(d) if sympy.count_ops(d) < 200 else d, digits=12)  # a witness: constants may differ late
    info = {"output": names[j], "index": list(idx), "point": i, "ref": a, "prod": b,
            "relative_difference": float(exact_diff / scale), "difference": expr}
    note = (f"disproved at shape {_describe(state['shape'])}: {names[j]} at {list(idx)}: ref - prod = {expr}, "
            f"{exact_diff / scale:.3g} of the output's scale at algebra draw {i} (ref {a:.6g}, prod {b:.6g})")
    return AlgebraProofResult(outcome="disproved", note=note, shape=state["shape"], held=state["held"], witness=info)
