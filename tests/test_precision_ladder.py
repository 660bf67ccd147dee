"""The algebra gate's precision ladder: the rule (kcert.stats.ladder), the evaluations
(kcert.execution.ladder), the gate, an accepted untested algebra, and its reports."""

import json
import math
import subprocess
import sys

import numpy as np
import pytest
import torch

import kcert
from kcert.catalog import norms as N
from kcert.errors import CaseError, ParameterError
from kcert.execution import ladder as run
from kcert.execution import probes
from kcert.report import jsonio
from kcert.stats import ladder as L
from kcert.verdict import Verdict, combine

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py

SHAPE = (1, 8, 256)


# --- opaque kernels: custom ops real mode cannot see into ------------------------------------------------


@torch.library.custom_op("kcert_test_ladder::rms", mutates_args=())
def opaque_rms(x: torch.Tensor, w: torch.Tensor, eps_on_rms: bool) -> torch.Tensor:
    """float32 inside whatever the input, numpy body."""
    a, g = x.detach().float().numpy(), w.detach().float().numpy()
    ms = np.mean(a * a, axis=-1, keepdims=True, dtype=np.float32)
    rms = np.sqrt(ms) + np.float32(1e-5) if eps_on_rms else np.sqrt(ms + np.float32(1e-5))
    return torch.from_numpy((a / rms * g).astype(np.float32)).to(x.dtype)


@opaque_rms.register_fake
def _(x, w, eps_on_rms):
    return torch.empty_like(x)


@torch.library.custom_op("kcert_test_ladder::rms_bf16_only", mutates_args=())
def opaque_rms_bf16_only(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16:
        raise TypeError("bfloat16 only")
    return opaque_rms(x, w, False)


@opaque_rms_bf16_only.register_fake
def _(x, w):
    return torch.empty_like(x)


def rms_case(prod, name="opaque", **fields):
    return kcert.Case(name=name, ref=N.rms_norm, prod=prod, inputs=dict(N.RMSNORM.inputs(shape=SHAPE)),
                      weights=dict(N.RMSNORM.weights(shape=SHAPE)), **fields)


def correct(x, w):
    return opaque_rms(x, w, False)


def eps_on_rms(x, w):
    return opaque_rms(x, w, True)


# --- the rule --------------------------------------------------------------------------------------------


def rung(dtype, prod, ref, out=None):
    return L.Rung(dtype, out or dtype, prod, ref)


def test_rounding_that_falls_with_the_format_passes_at_the_finest_resolved_rung():
    d = L.decide([rung("bfloat16", 3e-3, 3e-3), rung("float32", 1.2e-7, 1.4e-7), rung("float64", 2e-16, 0.0)],
                 "bfloat16")
    assert d.outcome == L.PASS and d.judged == 2
    # float64's yardstick: ref's float32 error in unit roundoffs carried down (ref is the oracle there)
    assert d.yardsticks[2] == pytest.approx(2.0**-53 * 1.4e-7 / 2.0**-24)


def test_a_floor_far_below_the_coarse_rounding_fails_at_the_rung_that_reaches_it():
    # gpt-neox #1342 measured: 5e-6 at float32 and float64 (float32 inside), ref 1.4e-7
    d = L.decide([rung("bfloat16", 3.4e-3, 3.4e-3), rung("float32", 5.1e-6, 1.4e-7), rung("float64", 5.1e-6, 1.4e-7)],
                 "bfloat16")
    assert d.outcome == L.FAIL and d.judged == 1 and d.amplification == pytest.approx(5.1e-6 / 1.4e-7)


def test_a_saturated_float64_rung_is_not_judged():
    # a kernel that computes float64 inputs in float32: its float64 error is its float32 error
    d = L.decide([rung("float32", 1.2e-7, 1.4e-7), rung("float64", 1.2e-7, 1e-16)], "bfloat16")
    assert d.judged == 0 and d.outcome == L.PASS


def test_nothing_finer_than_the_harm_unit_is_not_resolved():
    # one bfloat16 rung: the resolution is 16 bfloat16 roundoffs, far above a quarter of a harm ULP
    d = L.decide([rung("bfloat16", 3e-3, 3e-3)], "bfloat16")
    assert d.outcome == L.UNRESOLVED and d.resolution_harm == pytest.approx(16 * 3.9e-3 / 2.0**-8, rel=0.01)
    # float32 case, float32-capped kernel: the same-precision comparison resolves 2.2e-6 relative, 16 float32
    # roundoffs: 1/1000 of a bf16 harm ULP, an algebra test in a bf16 training run, none in a float32 one
    rungs = [rung("float32", 1.2e-7, 1.4e-7), rung("float64", 1.2e-7, 1e-16)]
    d = L.decide(rungs, "float32", "bfloat16")
    assert d.outcome == L.PASS and d.judged == 0 and d.internal == (0, 0)
    assert d.resolution_harm == pytest.approx(16 * 1.2e-7 / 2.0**-8) and d.bound == "oracle"  # prod's own error
    assert L.decide(rungs, "float32", "float32").outcome == L.UNRESOLVED


def test_prod_minus_ref_bounds_a_difference_under_a_shared_rounding():
    # RoPE with angles computed at float32 on both sides: each side's error is 1.6e-4 (0.64 of a bf16 harm
    # ULP times 16 is not far below it), but prod and ref round the same angles: prod - ref is 3e-7
    shared = L.decide([L.Rung("float32", "float32", 1.6e-4, 1.6e-4, 3e-7)], "float32", "bfloat16")
    assert shared.outcome == L.PASS and shared.bound == "ref" and shared.resolution == pytest.approx(16 * 3e-7)
    # a RoPE base off by 1e-5 differs from ref by 1.4e-3: within 16x the yardstick, and not resolved
    off = L.decide([L.Rung("float32", "float32", 1.4e-3, 1.6e-4, 1.4e-3)], "float32", "bfloat16")
    assert off.outcome == L.UNRESOLVED and off.bound == "yardstick"
    # the paired bound never goes below the unit roundoff of the precision the rung computes at: a
    # float32-inside prod bitwise equal to a float32-inside ref at float64 inputs is a float32 computation
    same = L.decide([L.Rung("float32", "float32", 1.6e-4, 1.6e-4, 0.0)], "float32", "bfloat16")
    assert same.resolution == pytest.approx(16 * 2.0**-24)
    saturated = L.decide([L.Rung("float32", "float32", 1.4e-7, 1.4e-7, 0.0),
                          L.Rung("float64", "float64", 1.4e-7, 1.4e-7, 0.0)], "bfloat16")
    assert saturated.internal == (0, 0) and saturated.resolution == pytest.approx(16 * 2.0**-24)


def test_prods_own_error_bounds_a_difference_when_it_is_far_more_accurate_than_ref():
    # prod computes float64 in float64; ref upcasts to float32 whatever its inputs (HF-style): its float64
    # rung carries float32 errors, but prod's own 2e-16 bounds a difference at float64's rounding
    d = L.decide([rung("float32", 1.2e-7, 1.4e-7), L.Rung("float64", "float64", 2e-16, 1.4e-7, 1.4e-7)], "float32",
                 "float32")
    assert d.outcome == L.PASS and d.judged == 1 and d.bound == "oracle"
    assert d.resolution == pytest.approx(16 * 2e-16)


def test_one_rung_beyond_its_multiple_fails():
    # the same-precision comparison: prod 22x ref at float32 (label smoothing over V - 1 in a fused loss)
    d = L.decide([rung("float32", 3.0e-6, 1.36e-7)], "float32", "bfloat16")
    assert d.outcome == L.FAIL and d.amplification == pytest.approx(3.0e-6 / 1.36e-7)
    # under the fail floor a float64 rung's floor only warns, as before
    assert L.decide([rung("float64", 1e-12, 1e-16)], "float64").outcome == L.WARN


def test_a_fixed_internal_precision_is_judged_against_that_precision():
    # a rotary kernel computing in float32 whatever its inputs; the float32 rung's error is the rounding of
    # large angles, equal on both sides; float64 inputs make it 8.3e-8: a float32 computation, not a floor
    d = L.decide([rung("float32", 5.35e-5, 5.35e-5), rung("float64", 8.3e-8, 0.0)], "float32", "bfloat16")
    assert d.outcome != L.FAIL and d.internal == (0, 0) and max(d.amplifications) <= 1.0
    # the yardstick alone would resolve 16 x 5.35e-5 (0.22 harm ULP); prod's own float64-rung error, 8.3e-8,
    # bounds a difference directly
    assert d.outcome == L.PASS and d.judged == 1 and d.bound == "oracle"
    assert d.resolution_harm == pytest.approx(16 * 8.3e-8 / 2.0**-8)
    # a kernel that does compute at float64 is judged against float64's yardstick
    d = L.decide([rung("float32", 1.2e-7, 1.4e-7), rung("float64", 2e-16, 0.0)], "float32", "float32")
    assert d.internal == (0, 1) and d.judged == 1 and d.outcome == L.PASS
    # and a floor at float64 below float32's reach (1e-12 relative) is still seen there
    d = L.decide([rung("float32", 1.2e-7, 1.4e-7), rung("float64", 1e-8, 0.0)], "float32", "float32")
    assert d.internal[1] == 0, "1e-8 is not M times below float32's unit roundoff: a float32 computation"


def test_a_flat_floor_far_above_the_coarse_rounding_fails():
    d = L.decide([rung("bfloat16", 9.4e-2, 3.1e-3), rung("float32", 9.4e-2, 2.2e-7)], "bfloat16")
    assert d.outcome == L.FAIL and d.judged == 0


def test_an_output_finer_than_its_rung_uses_its_own_unit_roundoff():
    # a float32 loss from bfloat16 logits: float32 rounding at every rung
    d = L.decide([rung("bfloat16", 1.1e-7, 9.6e-8, "float32"), rung("float32", 1.1e-7, 9.6e-8)], "bfloat16")
    assert d.outcome == L.PASS and d.judged == 0


def test_a_tiny_unexplained_floor_at_float64_warns():
    d = L.decide([rung("float32", 1e-7, 1e-7), rung("float64", 1e-12, 0.0)], "float32")
    assert d.judged == 1 and d.outcome == L.WARN


def test_exact_at_every_rung_passes():
    d = L.decide([rung("bfloat16", 0.0, 0.0), rung("float32", 0.0, 0.0)], "bfloat16")
    assert d.outcome == L.PASS and d.amplification == 0


# --- the evaluations ----------------------------------------------------------------------------------


def measure(case):
    return run.measure(case, probes.draw_weights(case, 0, torch.device("cpu")), 0, torch.device("cpu"), 2, 2)


def test_every_rung_sees_the_same_real_inputs_and_refusals_are_recorded():
    seen = {}

    def prod(x, w):
        seen.setdefault(x.dtype, []).append(x.double())
        if x.dtype == torch.float16:
            raise RuntimeError("no half kernel")
        return N.rms_norm(x, w).to(torch.bfloat16) if x.dtype == torch.float32 else N.rms_norm(x, w)

    m = measure(rms_case(prod, prod_precisions=(torch.float64, torch.float16, torch.float32, torch.bfloat16)))
    rungs = {r.dtype: r for r in m.rungs}
    assert [r.dtype for r in m.rungs] == ["bfloat16", "float16", "float32", "float64"]
    assert not rungs["float16"].accepted and "no half kernel" in rungs["float16"].reason
    assert not rungs["float32"].accepted and "bfloat16 for float32 inputs" in rungs["float32"].reason
    assert rungs["bfloat16"].accepted and rungs["float64"].accepted and m.grid == "bfloat16"
    # the accepted rungs got identical real values at every point (drawn on the bfloat16 grid)
    for a, b in zip(seen[torch.bfloat16][1:], seen[torch.float64][1:]):
        assert torch.equal(a, b)


def test_a_rung_where_prod_overflows_is_dropped():
    def prod(x, w):
        y = N.rms_norm(x, w)
        return y * math.inf if x.dtype == torch.float32 else y

    m = measure(rms_case(prod))
    f32 = next(r for r in m.rungs if r.dtype == "float32")
    assert not f32.accepted and "non-finite" in f32.reason


# --- the gate ----------------------------------------------------------------------------------------------


def test_opaque_prod_passes_through_the_ladder_and_the_defect_fails():
    good = kcert.certify(rms_case(correct), replicates=128, seed=0)
    assert good.verdict is Verdict.PASS and good.algebra.level == "precision ladder"
    assert good.algebra.level_text == "precision ladder (float32 vs bfloat16)"
    bad = kcert.certify(rms_case(eps_on_rms), replicates=128, seed=0)
    assert bad.gates["algebra"] is Verdict.FAIL and bad.gates["bias"] is Verdict.PASS
    assert "floor" in bad.algebra.reason and "float32" in bad.algebra.reason


def test_reports_show_the_rungs_and_the_level():
    from rich.console import Console

    from kcert.report import html, terminal

    cert = kcert.certify(rms_case(eps_on_rms), replicates=128, seed=0)
    console = Console(record=True, width=200)
    terminal.render(cert, console)
    text = console.export_text()
    assert "algebra · level precision ladder (float32 vs bfloat16)" in text
    assert "output: FAIL, judged at float32" in text and "on the small-magnitude points" in text
    assert "largest at draw" in text and "scaled by 2^-" in text
    page = html.render_html([cert])
    assert "precision ladder (float32 vs bfloat16)" in page and "<th>precision</th>" in page
    d = jsonio.to_dict(cert)["gates"]["algebra"]
    assert d["small_points"] == 4 and d["ladder"]["outputs"][0]["points"] == "small"
    json.dumps(d, allow_nan=False)


def test_small_magnitude_points_expose_an_eps_placement_at_the_working_precision_alone():
    # eps on the RMS is 5e-6 relative at unit scale, a few bf16 hundredths of an ULP; at inputs scaled
    # by 2**-10 and 2**-20 the eps dominates the mean square and the difference is of order one
    cert = kcert.certify(rms_case(eps_on_rms, prod_precisions=(torch.bfloat16,)), replicates=128, seed=0)
    assert cert.algebra.ladder.accepted == ("bfloat16",)
    assert cert.gates["algebra"] is Verdict.FAIL and cert.algebra.level_text == "same-precision comparison at bfloat16"
    out = cert.algebra.ladder.outputs[0]
    assert out.points == "small" and out.amplification > 1e3
    # accepting an untested algebra does not accept a measured difference
    accepted = kcert.certify(rms_case(eps_on_rms, prod_precisions=(torch.bfloat16,), accept_untested_algebra=True),
                             replicates=128, seed=0)
    assert accepted.gates["algebra"] is Verdict.FAIL and accepted.verdict is Verdict.FAIL


def test_declared_precisions_restrict_the_ladder():
    cert = kcert.certify(rms_case(correct, prod_precisions=(torch.bfloat16,)), replicates=128, seed=0)
    assert cert.algebra.ladder.accepted == ("bfloat16",)
    assert cert.gates["algebra"] is Verdict.SKIPPED and cert.verdict is Verdict.WARN
    reason = cert.algebra.reason
    assert "accept_untested_algebra" in reason and "real mode" not in reason
    # what was tried comes before what the user can do
    assert reason.index("tried for prod") < reason.index("What you can do")
    assert "prod (a custom operator" in reason


def test_a_float32_only_kernel_passes_by_default_in_a_float32_case():
    float32_case = dict(dtype=torch.float32, prod_precisions=(torch.float32,))
    good = kcert.certify(rms_case(correct, **float32_case), replicates=128, seed=0)
    assert good.gates["algebra"] is Verdict.PASS, good.algebra.reason
    assert good.algebra.level_text == "same-precision comparison at float32"
    assert "bfloat16 harm ULPs" in good.algebra.reason
    # a float32 training run declares a float32 harm unit: 16 float32 roundoffs are not far below it
    strict = kcert.certify(rms_case(correct, training_dtype=torch.float32, **float32_case), replicates=128, seed=0)
    assert strict.gates["algebra"] is Verdict.SKIPPED and "float32 harm ULPs" in strict.algebra.reason


def test_the_ladder_runs_when_ref_is_opaque_but_an_oracle_is_given():
    case = kcert.Case(name="both_opaque", ref=lambda x, w: opaque_rms(x, w, False), prod=eps_on_rms,
                      oracle=N.rms_norm, inputs=dict(N.RMSNORM.inputs(shape=SHAPE)),
                      weights=dict(N.RMSNORM.weights(shape=SHAPE)))
    cert = kcert.certify(case, replicates=128, seed=0)
    assert cert.algebra.level == "precision ladder" and cert.gates["algebra"] is Verdict.FAIL
    assert cert.algebra.ladder.oracle == "the given oracle"


def test_one_precision_warns_unless_the_untested_algebra_is_accepted():
    case = rms_case(opaque_rms_bf16_only)
    plain = kcert.certify(case, replicates=128, seed=0)
    assert plain.gates["algebra"] is Verdict.SKIPPED and plain.verdict is Verdict.WARN
    assert not plain.algebra.untested_accepted and plain.algebra.level_text == "none"
    for cert in (kcert.certify(case, replicates=128, seed=0, accept_untested_algebra=True),
                 kcert.certify(rms_case(opaque_rms_bf16_only, accept_untested_algebra=True), replicates=128, seed=0)):
        assert cert.gates["algebra"] is Verdict.SKIPPED and cert.verdict is Verdict.PASS
        assert cert.algebra.untested_accepted and cert.algebra.level_text == "none (accepted)"
        assert "bias gate's floor of 0.25 ULP" in cert.algebra.untested_limit
        assert cert.algebra.untested_limit in cert.algebra.reason
        d = jsonio.to_dict(cert)["gates"]["algebra"]
        assert d["untested_accepted"] is True and d["level_text"] == "none (accepted)"
        assert d["ladder"]["rungs"][1]["accepted"] is False and "bfloat16 only" in d["ladder"]["rungs"][1]["reason"]
        json.dumps(d, allow_nan=False)


def test_acceptance_never_hides_a_failing_gate():
    gates = {"algebra": Verdict.SKIPPED, "bias": Verdict.FAIL, "variance": Verdict.PASS}
    assert combine(gates, ("algebra",)) is Verdict.FAIL
    assert combine({**gates, "bias": Verdict.PASS}, ("algebra",)) is Verdict.PASS
    assert combine({**gates, "bias": Verdict.PASS}) is Verdict.WARN
    assert combine({**gates, "algebra": Verdict.WARN, "bias": Verdict.PASS}, ("algebra",)) is Verdict.WARN


def test_gradients_keep_the_ladder_settings():
    g = kcert.gradients(rms_case(correct, prod_precisions=[torch.bfloat16, torch.float32],
                                 accept_untested_algebra=True))
    assert g.prod_precisions == (torch.bfloat16, torch.float32) and g.accept_untested_algebra


def test_settings_are_validated():
    with pytest.raises(CaseError, match="prod_precisions must be a non-empty sequence"):
        rms_case(correct, prod_precisions=(torch.int32,))
    with pytest.raises(CaseError, match="prod_precisions"):
        rms_case(correct, prod_precisions=())
    with pytest.raises(CaseError, match="accept_untested_algebra must be True or False"):
        rms_case(correct, accept_untested_algebra="yes")
    with pytest.raises(ParameterError, match="accept_untested_algebra must be True or False"):
        kcert.certify(rms_case(correct), replicates=8, accept_untested_algebra=1)


CASE_FILE = '''
import numpy as np, torch, kcert
from kcert.catalog import norms as N

@torch.library.custom_op("kcert_cli_ladder::rms_bf16", mutates_args=())
def rms_bf16(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    if x.dtype != torch.bfloat16:
        raise TypeError("bfloat16 only")
    a, g = x.float().numpy(), w.float().numpy()
    ms = np.mean(a * a, axis=-1, keepdims=True, dtype=np.float32)
    return torch.from_numpy((a / np.sqrt(ms + np.float32(1e-5)) * g).astype(np.float32)).to(x.dtype)

@rms_bf16.register_fake
def _(x, w):
    return torch.empty_like(x)

case = kcert.Case(name="bf16_only", ref=N.rms_norm, prod=rms_bf16, inputs=dict(N.RMSNORM.inputs(shape=(1, 4, 128))),
                  weights=dict(N.RMSNORM.weights(shape=(1, 4, 128))))
'''


def test_cli_accepts_an_untested_algebra_only_when_asked(tmp_path, capsys):
    from kcert.cli import main

    path = tmp_path / "cases.py"
    path.write_text(CASE_FILE)
    args = ["certify", str(path), "--replicates", "128", "--no-algebra-proof"]
    # the plain run in this process (a process start is much of its cost); the accepted one in its own, as
    # the case file registers its custom op once per process
    assert main(args) == 3, capsys.readouterr().err[-2000:]
    base = [sys.executable, "-m", "kcert", *args]
    out = tmp_path / "cert.json"
    accepted = subprocess.run(base + ["--accept-untested-algebra", "--json", str(out)], capture_output=True,
                              text=True, timeout=300)
    assert accepted.returncode == 0, accepted.stderr[-2000:]
    data = json.loads(out.read_text())
    assert data["verdict"] == "PASS" and data["gates"]["algebra"]["verdict"] == "SKIPPED"
    assert "--accept-untested-algebra" in data["provenance"]["command"]
    assert "algebra untested, accepted" in accepted.stdout + accepted.stderr
