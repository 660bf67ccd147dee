"""The diagnosis pass of a configuration that did not PASS: which aggregation prod computes.

It re-evaluates the first ``D`` replicates of the certification (the same draws) with ref, prod and
the oracle, and per output measures what :func:`kcert.stats.aggregation.judge_aggregation` judges:
the deviation, ref's own rounding, the ratio prod/ref, and the residual of every *hypothesis*.

Hypotheses come from the cells of the configuration (rank ``r``'s micro-batch ``i``). The oracle is
evaluated once per non-empty cell on the whole batch with every label outside the cell ignored:
``O_j``, the cell's own token-mean loss and its gradients, with the forward of the whole batch (so
positions that attend across cells keep their context). For a token-mean loss the oracle is
exactly the token-weighted sum ``sum_j (N_j / N) O_j`` (``N_j`` the cell's valid labels); an output
for which that identity does not hold at replicate 0 (an auxiliary loss over the whole batch, a
batch statistic) gets no hypotheses. The hypotheses recombine the ``O_j``: within a rank, token
weighted or the plain mean of the micro-batches' means; across ranks, token weighted, the plain mean
of the ranks' means, or rank 0's alone (a gradient never reduced: its own mean, or its share of the
batch's token sum); each times 1 or a constant of
the configuration (``k``, ``1/n``, ``window/k``...). A grad norm gets its own: the global norm, the
norm of rank ``r``'s shards alone, the replicated parameters counted once per rank.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np
import torch

from ..execution import probes
from ..execution.realmode import run_real
from ..stats.aggregation import Hypothesis, constant_names, judge_aggregation
from ..stats.ladder import UNIT_ROUNDOFF
from .batch import Cell, diagnosis_cells, unpack
from .case import StepCase
from .config import StepConfig
from .model import Parameters
from .results import OutputDiagnosis
from .spec import Step

DECOMPOSITION_TOLERANCE = 1e-9  # relative: the oracle's cells add up to it (float64 rounding is ~1e-15)
CPU = torch.device("cpu")


def _flat(t: torch.Tensor) -> np.ndarray:
    return t.detach().to(torch.float64).reshape(-1).numpy()


def _rel(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    return float(np.linalg.norm(a - b) / scale) if scale > 0 else (0.0 if np.array_equal(a, b) else math.inf)


def _repack(batch: dict) -> torch.Tensor:
    return torch.stack([batch["input_ids"], batch["attention_mask"], batch["labels"]])


# --- hypotheses: recombinations of the cells ---------------------------------------------------------


def _weightings(cells: list[Cell], config: StepConfig) -> list[tuple[str, str, str, np.ndarray]]:
    """(code, short, text, weights over the cells) of each aggregation; the oracle's is ``N_j / N``."""
    tokens = np.array([c.tokens for c in cells], np.float64)
    ranks = sorted({c.rank for c in cells}, key=lambda r: -1 if r is None else r)
    m, n = config.micro_batches, len(ranks)
    share = "sequence chunk" if config.split == "tensor" else "rank"
    within = [("token", "", "")]
    if m > 1:
        within.append(("mean", "mean of micro-batch means",
                       f"the mean over the {m} micro-batches of each micro-batch's own token mean (a token weighs "
                       f"1 / ({m} x its micro-batch's valid tokens), not 1 / the batch's: it depends on the valid-token "
                       f"counts of the micro-batches)"))
    across = [("token", "", "")]
    if n > 1:
        across += [("mean", f"mean of {share} means",
                    f"the mean over the {n} {share}s of each {share}'s own mean (it depends on the {share}s' "
                    f"valid-token shares)"),
                   ("rank0", f"{share} 0's own mean alone",
                    f"{share} 0's own mean alone, never reduced across the {n} {share}s"),
                   ("share0", f"{share} 0's share alone",
                    f"{share} 0's share of the batch's token sum alone (normalized by the whole batch's tokens), "
                    f"never reduced across the {n} {share}s")]
        if share != "rank":
            across = [(c, s_, t + " (rank 0's positions under sequence parallelism)" if c in ("rank0", "share0") else t)
                      for c, s_, t in across]
    out = []
    for (w_code, w_short, w_text), (a_code, a_short, a_text) in product(within, across):
        weights = np.zeros(len(cells))
        members = {r: np.array([i for i, c in enumerate(cells) if c.rank == r]) for r in ranks}
        for r, idx in members.items():
            inner = tokens[idx] / tokens[idx].sum() if w_code == "token" else np.full(idx.size, 1.0 / idx.size)
            outer = {"token": tokens[idx].sum() / tokens.sum(), "mean": 1.0 / len(members),
                     "rank0": 1.0 if r == ranks[0] else 0.0,
                     "share0": tokens[idx].sum() / tokens.sum() if r == ranks[0] else 0.0}[a_code]
            weights[idx] = inner * outer
        short = ", ".join(t for t in (w_short, a_short) if t) or "token-weighted (ref's)"
        text = "; ".join(t for t in (w_text, a_text) if t) or "the token-weighted mean over the whole batch"
        out.append((f"{w_code}/{a_code}", short, text, weights))
    return out


def _hypotheses(cell_outputs: list[np.ndarray], weightings, constants: dict[str, float]):
    """(code, short, text, prediction) for every weighting times 1 and every constant and reciprocal."""
    scales = [("", 1.0)] + constant_names(constants)
    out = []
    for code, short, text, w in weightings:
        base = sum(wi * o for wi, o in zip(w, cell_outputs) if wi != 0)
        for label, v in scales:
            if not label:
                out.append((code, short, text, base))
            elif code == "token/token":  # a constant times ref's aggregation
                out.append((f"{code}x{v:.6g}", f"ref's x {v:.4g} = {label}", f"ref's x {v:.4g} = {label}", v * base))
            else:
                out.append((f"{code}x{v:.6g}", f"{v:.4g} x {short}", f"{v:.4g} ({label}) x {text}", v * base))
    return out


def _norm_hypotheses(oracle_grads: dict[str, np.ndarray], step: Step, config: StepConfig):
    """(code, text, predicted norm) for a grad norm: global, rank r's shards alone, replicated counted n times."""
    sharded = {n for n in oracle_grads if config.split == "tensor" and n in step.shards}
    rep = sum(float(np.sum(g ** 2)) for n, g in oracle_grads.items() if n not in sharded)
    out = [("global", "the global gradient norm (ref's)", math.sqrt(rep + sum(
        float(np.sum(oracle_grads[n] ** 2)) for n in sharded)))]
    if config.world > 1 and sharded:
        for r in range(config.world):
            local = rep
            for n in sharded:
                full = torch.from_numpy(oracle_grads[n])  # shaped as the parameter
                local += float(torch.tensor_split(full, config.world, step.shards[n])[r].pow(2).sum())
            out.append((f"rank{r}", f"the norm of rank {r}'s own shards alone (not reduced across the ranks)",
                        math.sqrt(local)))
        out.append(("replicated_n", f"the norm with every replicated parameter counted once per rank ({config.world})",
                    math.sqrt(config.world * rep + sum(float(np.sum(oracle_grads[n] ** 2)) for n in sharded))))
    return out


# --- the pass -----------------------------------------------------------------------------------------


def _views(names: tuple[str, ...], layout) -> list[tuple[str, int, object]]:
    """(name, output index, index into the flat output) of every quantity diagnosed: the loss, the
    whole gradient and each parameter's slice of it, the grad norm."""
    out = []
    for j, name in enumerate(names):
        out.append((name, j, slice(None)))
        if name == "grad":
            out += [(f"grad.{p}", j, slice(layout.offsets[i], layout.offsets[i + 1])) for i, p in enumerate(layout.names)]
    return out


def diagnose(step: Step, config: StepConfig, built: StepCase, params: Parameters, seed: int,
             replicates: int) -> tuple[OutputDiagnosis, ...]:
    """Diagnose the outputs of ``built`` over its first ``replicates`` replicates (module docstring)."""
    case, layout = built.case, built.layout
    names = tuple(case.output_names)
    views = _views(names, layout)
    weights = probes.draw_weights(case, seed, CPU)
    ignore = step.batch.ignore_index
    rows = {v: {"deviation": [], "ref_error": [], "ratio": [], "scaled": []} for v, _, _ in views}
    residuals: dict[str, dict[str, list]] = {v: {} for v, _, _ in views}
    texts: dict[str, str] = {}
    decomposable = {v: False for v, _, _ in views}
    shares: dict[str, list] = {}
    dtypes = {}
    for r in range(replicates):
        draw = probes.draw_inputs(case, seed, r, CPU)
        working = {**draw.working, **weights.working}
        exact = {**draw.exact, **weights.exact}
        with torch.no_grad():
            ref_out = [_flat(t) for t in built.ref(**working)]
            prod_out = [_flat(t) for t in built.prod(**working)]
            raw = run_real(lambda: built.ref(**exact), dtype=torch.float64, name="ref")
            oracle = [_flat(t) for t in raw]
        if r == 0:
            dtypes = {name: str(t.dtype).removeprefix("torch.") for name, t in zip(names, built.ref(**working))}
        batch = unpack(draw.working["batch"], ignore)
        cells = diagnosis_cells(batch, config, ignore, f"step {step.name!r}")
        _record_shares(shares, cells, config)
        live = [c for c in cells if c.tokens > 0]
        with torch.no_grad():
            cell_out = [[_flat(t) for t in run_real(lambda c=c: built.ref(**{**exact, "batch": _repack(c.only(batch, ignore))}),
                                                    dtype=torch.float64, name="ref")] for c in live]
        weightings = _weightings(live, config)
        tokens = np.array([c.tokens for c in live], np.float64)
        grads = {}
        if "grad_norm" in names:
            g = oracle[names.index("grad")]
            grads = {n: layout.slice(g, i).reshape(layout.shapes[i]) for i, n in enumerate(layout.names)}
        for view, j, part in views:
            p, f, o = prod_out[j][part], ref_out[j][part], oracle[j][part]
            scale = float(np.linalg.norm(o))
            ratio = float(np.dot(p, o) / np.dot(o, o)) if scale > 0 else math.nan
            row = rows[view]
            row["deviation"].append(_rel(p, o, scale))
            row["ref_error"].append(_rel(f, o, scale))
            row["ratio"].append(ratio)
            row["scaled"].append(_rel(p, ratio * o, scale) if math.isfinite(ratio) else math.inf)
            if view == "grad_norm":
                for code, text, value in _norm_hypotheses(grads, step, config):
                    texts[f"{view}:{code}"] = (text, text)
                    residuals[view].setdefault(code, []).append(abs(float(p[0]) - value) / scale if scale > 0 else math.inf)
                continue
            cells_j = [c[j][part] for c in cell_out]
            if r == 0:
                whole = sum((t / tokens.sum()) * c for t, c in zip(tokens, cells_j))
                decomposable[view] = bool(live) and _rel(whole, o, scale) <= DECOMPOSITION_TOLERANCE
            if not decomposable[view]:
                continue
            for code, short, text, pred in _hypotheses(cells_j, weightings, config.quantities()):
                texts[f"{view}:{code}"] = (short, text)
                residuals[view].setdefault(code, []).append(_rel(p, pred, scale))
    disagreement = dict(built.prod.disagreement)
    quantities = {k: np.asarray(v, np.float64) for k, v in shares.items()}
    out = []
    for view, j, _ in views:
        row = rows[view]
        hyps = tuple(Hypothesis(code, texts[f"{view}:{code}"][1], np.asarray(v, np.float64), texts[f"{view}:{code}"][0],
                                reference=code in ("token/token", "global"))
                     for code, v in residuals[view].items())
        unit = UNIT_ROUNDOFF.get(dtypes[names[j]], 2.0**-24)
        finding = judge_aggregation(row["deviation"], row["ref_error"], row["ratio"], row["scaled"], unit,
                                    config.quantities(), hyps, quantities)
        param = view.removeprefix("grad.") if view.startswith("grad.") else None
        rank = disagreement.get(param) if param is not None and config.world > 1 else None
        out.append(OutputDiagnosis(view, finding, replicates, decomposable[view] or view == "grad_norm", rank))
    return tuple(out)


def _record_shares(shares: dict, cells: list[Cell], config: StepConfig) -> None:
    """Per-replicate valid-token shares of each rank and each micro-batch (what an aggregation
    defect's size depends on)."""
    total = sum(c.tokens for c in cells) or 1
    if config.world > 1:
        what = "rank {}'s sequence chunk" if config.split == "tensor" else "rank {}"
        for r in range(config.world):
            shares.setdefault(f"valid-token share of {what.format(r)}", []).append(
                sum(c.tokens for c in cells if c.rank == r) / total)
    if config.micro_batches > 1:
        for i in range(config.micro_batches):
            shares.setdefault(f"valid-token share of micro-batch {i}", []).append(
                sum(c.tokens for c in cells if c.micro == i) / total)
