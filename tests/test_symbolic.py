"""Gate 1's symbolic proof level: the evaluator (execution/symbolic/), the proof (execution/proof.py)
and how judge_algebra combines it with the identity test."""

from __future__ import annotations

import functools
import json
import math

import numpy as np
import pytest
import sympy
import torch
from rich.console import Console

import kcert
from kcert.catalog import moe as M
from kcert.catalog import norms as N
from kcert.catalog import rope as R
from kcert.controls import norms as CN
from kcert.execution import probes
from kcert.execution.realmode import run_real
from kcert.execution.symbolic import (
    SymbolicUnsupported,
    exact,
    run_symbolic,
    symbols_like,
)
from kcert.execution import proof as symbolic_proof
from kcert.execution import symbolic as symbolic_eval
from kcert.execution.algebra import evaluate_algebra
from kcert.execution.proof import candidate_shapes
from kcert.gates.algebra import judge_algebra
from kcert.report import jsonio, terminal
from kcert.report.html import render_html

CPU = torch.device("cpu")
TINY = R.RopeModel("tiny", 16, 10000.0, 4096, functools.partial(R.default_frequencies, dim=16, base=10000.0))
ROPE_TINY = R.rope_operator(TINY)
ROPE_TINY_INTERLEAVED = R.rope_operator(TINY, layout="interleaved")


def judge(case: kcert.Case, **kwargs):
    weights = probes.draw_weights(case, 0, CPU)
    return judge_algebra(evaluate_algebra(case, weights, 0, CPU, points=4, wide_points=4, **kwargs))


def norm_case(name, prod, ref=N.rms_norm):
    return N.RMSNORM.case(name, prod, ref=ref, shape=(2, 16, 64))


def fused_rms_norm(x, w, eps=N.LLAMA_EPS):
    """A fused rewrite of Llama RMSNorm: gain folded first, sum of squares divided by d, a division by
    sqrt instead of a product with rsqrt."""
    x32 = x.float()
    d = x.shape[-1]
    return ((x32 * w.float()) / torch.sqrt(torch.sum(x32 * x32, dim=-1, keepdim=True) / d + eps)).to(x.dtype)


def neox_as_complex(q, k, position_ids, *, frequencies):
    """NeoX RoPE as a complex product on the half-split pairs (x_i, x_{i+d/2}): the same real function
    as rotate_half, written another way."""
    inv_freq, scaling = frequencies(position_ids)
    angles = position_ids.float()[..., None] * inv_freq
    turn = torch.polar(torch.full_like(angles, scaling), angles)[:, None]

    def rotate(x):
        h = x.shape[-1] // 2
        y = torch.complex(x[..., :h].float(), x[..., h:].float()) * turn
        return torch.cat((y.real, y.imag), dim=-1).type_as(x)

    return rotate(q), rotate(k)


# --- the proof, end to end --------------------------------------------------------------------------


def test_proves_llama_rmsnorm_against_a_fused_rewrite():
    a = judge(norm_case("fused", fused_rms_norm))
    assert a.verdict is kcert.Verdict.PASS and a.level == "proof"
    p = a.proof
    assert p.outcome == "proved" and p.reason == ""
    assert p.shape == {"x": (2, 4, 8), "w": (8,)}  # 16 -> 4, 64 -> 8; x's last axis stays in step with w
    assert a.reason.startswith("proved at shape x (2, 4, 8), w (8,)")
    assert p.seconds < 3.0


def test_proves_rope_neox_against_an_equivalent_complex_formulation():
    case = ROPE_TINY.case("neox_complex", functools.partial(neox_as_complex, frequencies=TINY.frequencies), seq=8)
    a = judge(case)
    assert a.verdict is kcert.Verdict.PASS and a.level == "proof", a.reason
    # the frequency rule closes over head_dim 16: that size is kept, the others shrink
    assert a.proof.shape == {"q": (1, 2, 4, 16), "k": (1, 1, 4, 16), "position_ids": (1, 4)}
    assert a.proof.held == ("position_ids",)
    assert a.proof.seconds < 5.0


def test_catches_the_wrong_rope_layout_with_a_witness():
    case = ROPE_TINY.case("layout", ROPE_TINY_INTERLEAVED.reference, seq=8)
    a = judge(case)
    assert a.verdict is kcert.Verdict.FAIL and a.level == "proof"
    p = a.proof
    assert p.outcome == "disproved"
    w = p.witness
    assert w["output"] in ("output[0]", "output[1]") and len(w["index"]) == 4
    assert w["relative_difference"] >= 1e-9 and w["ref"] != w["prod"]
    assert "sin(" in w["difference"] or "cos(" in w["difference"]
    assert a.reason.startswith("disproved at shape")


def test_catches_eps_added_to_the_rms_with_a_witness():
    a = judge(norm_case("eps_on_rms", CN.rms_norm_eps_on_rms))
    assert a.verdict is kcert.Verdict.FAIL and a.level == "proof"
    w = a.proof.witness
    # eps/rms ~ 1e-5 relative: invisible to bf16 statistics, a clear algebraic difference here
    assert 1e-7 < w["relative_difference"] < 1e-3
    assert "sqrt" in w["difference"] and "1.0e-5" in w["difference"]  # long exact constants print as decimals


def test_a_topk_router_falls_back_to_the_identity_test_naming_the_op():
    case = M.SOFTMAX_TOPK_ROUTER.case("router", M.SOFTMAX_TOPK_ROUTER.reference, tokens=16, n_experts=16)
    a = judge(case)
    assert a.level == "identity test" and a.verdict is kcert.Verdict.PASS
    assert a.proof.outcome == "not reached" and a.proof.reason == "unsupported"
    assert "torch.topk" in a.proof.note and "symbolic proof not reached (unsupported)" in a.reason


def test_proof_can_be_disabled():
    a = judge(norm_case("off", fused_rms_norm), proof=False)
    assert a.proof is None and a.level == "identity test" and a.verdict is kcert.Verdict.PASS


def test_a_spent_budget_falls_back_with_reason(monkeypatch):
    monkeypatch.setattr(symbolic_proof, "PROOF_BUDGET", 100)
    a = judge(norm_case("budget", fused_rms_norm))
    assert a.level == "identity test" and a.proof.reason == "budget" and a.verdict is kcert.Verdict.PASS
    assert "work budget of 100 units ran out" in a.proof.note


def test_the_time_guard_only_stops_a_hang_and_says_so():
    a = judge(norm_case("guard", fused_rms_norm), proof_budget_s=1e-6)
    assert a.level == "identity test" and a.proof.reason == "time guard" and "guard against a hang" in a.proof.note


def test_the_proof_outcome_does_not_depend_on_the_machines_speed(monkeypatch):
    """The budget counts work, not seconds: on a (fake) clock that moves 1 s at each reading, the old
    10 s wall-clock budget ran out after 10 readings (reason "budget"); the proof takes ~70 readings
    and now reaches the same outcome and the same JSON as on an idle machine."""
    case = norm_case("speed", fused_rms_norm)
    reference = judge(case)
    clock = [0.0]

    def slow():
        clock[0] += 1.0
        return clock[0]

    monkeypatch.setattr(symbolic_eval.limits.time, "monotonic", slow)
    loaded = judge(case)
    assert clock[0] > 10.0  # the old wall-clock budget would have run out
    assert loaded.proof.outcome == "proved" and jsonio._proof(loaded.proof) == jsonio._proof(reference.proof)
    assert (loaded.verdict, loaded.level, loaded.reason) == (reference.verdict, reference.level, reference.reason)


def test_a_kernel_closing_over_an_odd_size_falls_back_with_the_shape_reason():
    def prod(x, w):  # reshapes by a size closed over: runs at the probe shape only
        return N.rms_norm(x.reshape(2, 16, 64), w)

    a = judge(norm_case("closed", prod))
    assert a.proof.reason == "shape" and "do not run at the" in a.proof.note and "larger shapes" in a.proof.note
    assert a.verdict is kcert.Verdict.PASS and a.level == "identity test"


def test_semantic_rounding_is_refused_by_name():
    def prod(x, w):
        return kcert.semantic_round(N.rms_norm(x, w).float(), torch.bfloat16)

    a = judge(norm_case("semantic", prod))
    assert a.proof.reason == "unsupported" and "semantic_round" in a.proof.note


def test_data_dependent_masks_are_refused():
    def prod(x, w):
        y = N.rms_norm(x, w)
        return torch.where(y.abs() > 1e30, torch.zeros_like(y), y)  # a value-driven mask: never taken

    a = judge(norm_case("mask", prod))
    assert a.proof.reason == "unsupported" and "comparison" in a.proof.note
    assert a.verdict is kcert.Verdict.PASS


def test_a_size_dependent_code_path_is_never_a_silent_pass():
    def only_large(x, w):  # wrong only when the hidden size is large, as a tiled kernel could be
        y = N.rms_norm(x, w)
        return y * 1.001 if x.shape[-1] > 32 else y

    def only_small(x, w):
        y = N.rms_norm(x, w)
        return y * 1.001 if x.shape[-1] <= 32 else y

    large = judge(norm_case("large", only_large))
    assert large.proof.outcome == "proved" and large.verdict is kcert.Verdict.FAIL
    assert large.level == "identity test"
    assert [d.code for d in large.diagnostics] == ["proof_disagrees_with_identity"]
    small = judge(norm_case("small", only_small))
    assert small.proof.outcome == "disproved" and small.verdict is kcert.Verdict.WARN
    assert any(d.code == "proof_disagrees_with_identity" for d in small.diagnostics)


def test_certify_reports_the_level_in_every_format():
    case = N.RMSNORM.case("report", fused_rms_norm, shape=(1, 8, 32))
    cert = kcert.certify(case, replicates=16)
    assert cert.algebra.level == "proof"
    payload = jsonio.to_dict(cert)["gates"]["algebra"]
    assert payload["level"] == "proof" and payload["proof"]["outcome"] == "proved"
    assert payload["proof"]["shape"] == {"x": [1, 4, 8], "w": [8]}
    json.dumps(payload, allow_nan=False)
    console = Console(record=True, width=160)
    terminal.render(cert, console)
    assert "algebra · level proof" in console.export_text()
    assert "level proof" in render_html([cert])
    off = kcert.certify(case, replicates=16, algebra_proof=False)
    assert off.algebra.proof is None and jsonio.to_dict(off)["gates"]["algebra"]["proof"] is None


# --- shapes ----------------------------------------------------------------------------------------------


def test_candidate_shapes_keep_equal_sizes_in_step_and_try_the_cheapest_first():
    shapes = {"x": (2, 64, 128), "w": (128,), "pos": (2, 64)}
    cands, too_large = candidate_shapes(shapes, {"x", "w"})
    assert too_large >= 1  # keeping both 64 and 128 whole needs more than MAX_SYMBOLS
    assert cands[0] == {"x": (2, 4, 8), "w": (8,), "pos": (2, 4)}
    for c in cands:
        assert c["x"][-1] == c["w"][0] and c["x"][:2] == c["pos"]
    whole = [sum(a == b for a, b in zip(c["x"], shapes["x"]) if a > 2) for c in cands]
    assert whole == sorted(whole)  # sizes are kept whole only after every shrink was tried
    assert any(c["w"] == (128,) for c in cands)  # for kernels that close over a size


# --- the evaluator -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value, expected", [
    (1e-6, sympy.Rational(1, 10**6)), (0.044715, sympy.Rational(44715, 10**6)), (2 / 3, sympy.Rational(2, 3)),
    (8 ** -0.5, 1 / sympy.sqrt(8)), (math.pi / 2, sympy.pi / 2), (-0.5, sympy.Rational(-1, 2)),
    (math.inf, sympy.oo), (3, sympy.Integer(3)),
])
def test_literals_are_read_as_the_simplest_number_that_rounds_to_them(value, expected):
    got = exact(value)
    assert got == expected or sympy.simplify(got - expected) == 0


def test_a_float_that_is_no_simple_number_stays_its_decimal():
    v = math.sqrt(2 / math.pi)  # gelu's constant written as a float: not equal to sqrt(2/pi) as a real
    assert exact(v) == sympy.Rational(repr(v))


F = torch.nn.functional
KERNELS = {  # each a handful of supported ops on x (3, 4), w (4, 4), b (4,)
    "linear_gelu_silu": lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh") + F.silu(x) * torch.sigmoid(b),
    "gelu_erf_relu": lambda x, w, b: F.gelu(x) - F.relu(x - 0.25) + torch.tanh(x).abs(),
    "softmax_family": lambda x, w, b: torch.softmax(x, -1) + torch.log_softmax(x, dim=0).exp() * x.logsumexp(-1, True),
    "reductions": lambda x, w, b: (x.mean(0, keepdim=True) ** 2 + 1).rsqrt() * x.var(1, keepdim=True) + x.square().sum()
    + x.norm(dim=-1, keepdim=True) + x.amax(-1, keepdim=True) - torch.clamp(x, min=-0.5, max=0.5).cumsum(0),
    "norms": lambda x, w, b: F.layer_norm(x, (4,), w[0], b) + F.rms_norm(x, (4,), b, 1e-6),
    "products": lambda x, w, b: torch.einsum("ij,kj->ik", x, w) + x @ w.t() + torch.outer(x[:, 0], b)[:, :4]
    + torch.bmm(x[None], w[None])[0] + torch.addmm(b, x, w, beta=0.5),
    "layout": lambda x, w, b: torch.cat(x.chunk(2, -1)[::-1], -1).transpose(0, 1).reshape(2, 6).permute(1, 0)
    .flatten().unflatten(0, (3, 4)) + torch.stack(x.split([1, 3], -1)[1].unbind(1), 1).repeat(1, 2)[:, :4]
    + x.flip(0).roll(1, 1) + x[torch.tensor([2, 0, 1])].narrow(1, 0, 4) + x.unsqueeze(0).expand(2, -1, -1)[1],
    "indexing": lambda x, w, b: x.gather(1, torch.tensor([[0, 1, 2, 3]] * 3).flip(1)) + x.index_select(0, torch.tensor(
        [1, 1, 0])) + torch.where(torch.eye(3, 4, dtype=torch.bool), x, -x) + x.masked_fill(torch.eye(3, 4) > 0, 2.0),
    "complex": lambda x, w, b: torch.view_as_real(torch.view_as_complex(x.reshape(3, 2, 2)) * torch.polar(
        torch.ones(2), torch.tensor([0.3, -1.2]))).flatten(1) + torch.tril(x) - torch.triu(x, 1),
    "factories": lambda x, w, b: x * torch.arange(4) / 3 + torch.full((3, 4), 0.1) + torch.zeros_like(x)
    + torch.ones(4) * 1e-6 + x.new_tensor([1.0, 2.0, 3.0, 4.0]) + torch.linspace(0, 1, 4),
    "inplace": lambda x, w, b: _inplace(x),
}


def _inplace(x):
    y = torch.zeros(3, 4)
    y[:, 1:] = x[:, :3]
    y[0] += 1.5
    y.mul_(2).add_(x, alpha=0.5)
    return y


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_symbolic_evaluation_matches_float64_torch(name):
    kernel = KERNELS[name]
    g = torch.Generator().manual_seed(0)
    values = {"x": torch.randn(3, 4, generator=g, dtype=torch.float64),
              "w": torch.randn(4, 4, generator=g, dtype=torch.float64),
              "b": torch.rand(4, generator=g, dtype=torch.float64) + 0.5}
    syms = {k: symbols_like(k, tuple(v.shape)) for k, v in values.items()}
    (out,) = run_symbolic(kernel, syms)
    want = run_real(kernel, **values)  # float64 real mode: the semantics the evaluator follows
    subs = {s: sympy.Float(float(val), 30) for k in values
            for s, val in zip(syms[k].sym.reshape(-1), values[k].reshape(-1).tolist())}
    got = np.array([complex(e.xreplace(subs).evalf(20)).real for e in out.reshape(-1)])
    assert out.shape == tuple(want.shape)
    np.testing.assert_allclose(got, want.numpy().reshape(-1), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kernel, op", [
    (lambda x: torch.topk(x, 2, dim=-1).values, "torch.topk"),
    (lambda x: x.argmax(-1).float(), "Tensor.argmax"),
    (lambda x: x + torch.randn(x.shape), "torch.randn"),
    (lambda x: x * 2 if bool(x.sum() > 0) else x, "comparison"),
    (lambda x: x.view(torch.int32).float(), "view(dtype)"),
])
def test_unsupported_operations_are_named(kernel, op):
    with pytest.raises(SymbolicUnsupported) as info:
        run_symbolic(kernel, {"x": symbols_like("x", (2, 4))})
    assert op in str(info.value)


def test_integer_inputs_run_natively_and_floats_made_from_them_stay_exact():
    def kernel(x, pos):
        freq = 1.0 / (10000.0 ** (torch.arange(0, 4, 2, dtype=torch.int64).float() / 4))
        return x * torch.cos(pos.float()[:, None] * freq)

    (out,) = run_symbolic(kernel, {"x": symbols_like("x", (2, 2)), "pos": torch.tensor([3, 5])})
    x = sympy.Symbol("x[1,1]", real=True)
    assert sympy.simplify(out[1, 1] - x * sympy.cos(sympy.Rational(5, 100))) == 0


def test_rms_norm_proof_spends_a_small_part_of_the_budget(monkeypatch):
    spent = []

    class Recorded(symbolic_proof.Deadline):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            spent.append(self)

    monkeypatch.setattr(symbolic_proof, "Deadline", Recorded)
    case = norm_case("fast", fused_rms_norm)
    weights = probes.draw_weights(case, 0, CPU)
    a = judge_algebra(evaluate_algebra(case, weights, 0, CPU, points=2, wide_points=2))
    again = judge_algebra(evaluate_algebra(case, weights, 0, CPU, points=2, wide_points=2))
    assert a.proof.outcome == again.proof.outcome == "proved"
    assert spent[0].spent == spent[1].spent < symbolic_proof.PROOF_BUDGET / 20  # deterministic, and cheap


def closing_over(width):
    def prod(x, w):  # F.rms_norm with the width closed over, as a module built for one hidden size does
        return torch.nn.functional.rms_norm(x.float(), [width], w.float(), eps=N.LLAMA_EPS).to(x.dtype)

    return prod


def test_a_kernel_closing_over_its_width_is_not_tried_at_shapes_that_shrink_it():
    calls = []
    prod = closing_over(64)

    def counted(x, w):
        calls.append(tuple(x.shape))
        return prod(x, w)

    a = judge(norm_case("closed_width", counted))
    assert a.proof.outcome == "proved" and all(s[-1] == 64 for s in a.proof.shape.values() if s)
    shrunk = [s for s in calls if s[-1] != 64]
    assert len(shrunk) == 1  # one failure names the width; the next shape keeps it whole (before: 4 tries)


def test_a_kernel_closing_over_a_large_width_stops_after_the_first_shape():
    calls = []
    prod = closing_over(1024)

    def counted(x, w):
        calls.append(tuple(x.shape))
        return prod(x, w)

    case = N.RMSNORM.case("wide", counted, ref=N.rms_norm, shape=(2, 8, 1024))
    a = judge(case)
    assert a.proof.reason == "shape" and "closes over size 1024" in a.proof.note
    assert len([s for s in calls if s[-1] != 1024]) == 1
    assert a.verdict is kcert.Verdict.PASS and a.level == "identity test"


def test_a_compiled_prod_is_proved_with_compilation_disabled():
    compiled = torch.compile(fused_rms_norm, backend="eager", fullgraph=True)
    a = judge(norm_case("compiled", compiled))
    assert a.proof.outcome == "proved" and a.level == "proof", a.proof.note
