"""The precision ladder's figures (docs/method.md, Gate 1, "The precision ladder").

``tuning``: kernel pairs written in torch and run as opaque kernels would be (at each precision, in
their input dtype, or float32 inside whatever the input with one rounding to the input's dtype), 23
of the same real function and 15 with algebraic differences. For each, the ladder's per-rung errors of
prod and ref against the float64 oracle, the judged rung, K and the outcome. The threshold M = 16
was chosen on this set; the opaque controls (``kcert controls --family opaque``) are the validation.

``one-precision``: the opaque negative controls restricted to their working precision (one rung: no
algebra test can run), certified at their declared replicates: what the bias and variance gates
alone decide, i.e. what accepting an untested algebra would let through, and what the one-rung
algebra test (the same-precision comparison) decides.

Run: python benchmarks/precision_ladder.py [tuning] [one-precision] [--dtype bfloat16 float32]
[--rungs default one all] [--only NAME ...] [--dump errors.json]
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import math

import torch
import torch.nn.functional as F

import kcert
from kcert.catalog import activations as A
from kcert.catalog import attention as AT
from kcert.catalog import losses as LS
from kcert.catalog import norms as N
from kcert.catalog import rope as R
from kcert.catalog import softmax as S
from kcert.execution import ladder, probes
from kcert.stats import ladder as rule


def float32_inside(fn):
    """``fn`` computed in float32 whatever the input dtype, one rounding to the input's dtype."""
    def kernel(**kw):
        dtype = next(v.dtype for v in kw.values() if v.is_floating_point())
        return fn(**{k: v.float() if v.is_floating_point() else v for k, v in kw.items()}).to(dtype)
    kernel.__name__ = f"float32_inside({getattr(fn, '__name__', 'kernel')})"
    return kernel


# --- kernels ---------------------------------------------------------------------------------------------

def rms_eps_on_rms(x, w, eps=1e-5):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w


def rms_plain(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rms_blocked_sum(x, w, eps=1e-5):
    ms = x.pow(2).reshape(*x.shape[:-1], 16, -1).sum(-1).sum(-1, keepdim=True) / x.shape[-1]
    return x / torch.sqrt(ms + eps) * w


def gemma_eps_on_rms(x, w, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * (1 + w)


def gemma_plain(x, w, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * (1 + w)


def ln_one_pass(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) / torch.sqrt((x * x).mean(-1, keepdim=True) - m * m + eps) * w + b


def ln_unbiased(x, w, b, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=True) + eps) * w + b


def ln_without_bias(x, w, b, eps=1e-5):
    return (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + eps) * w


def ln_two_pass(x, w, b, eps=1e-5):
    m = x.mean(-1, keepdim=True)
    return (x - m) * torch.rsqrt(((x - m) ** 2).mean(-1, keepdim=True) + eps) * w + b


def gelu_erf_written(x):
    return 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))


def gelu_tanh_written(x, c=math.sqrt(2 / math.pi), a=0.044715):
    return 0.5 * x * (1 + torch.tanh(c * (x + a * x**3)))


def silu_written(x):
    return x / (1 + torch.exp(-x))


def silu_exp2_truncated_log2e(x):
    return x / (1 + torch.exp2(-x * 1.4427))


def softmax_written(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True)


def softmax_exp2(x, log2e=1 / math.log(2)):
    e = torch.exp2((x - x.amax(-1, keepdim=True)) * log2e)
    return e / e.sum(-1, keepdim=True)


def softmax_polynomial_exp(x):
    t = (x - x.amax(-1, keepdim=True)) * (1 / math.log(2))
    n = torch.floor(t)
    f = t - n
    p = 1 + f * (0.6931471805599453 + f * (0.2402265069591007 + f * (0.0555041086648216 + f * 0.009618129107628477)))
    e = p * torch.exp2(n)
    return e / e.sum(-1, keepdim=True)


def mm(x, w):
    return x @ w.t()


def mm_split_k(x, w):
    return sum(x[:, i * 256:(i + 1) * 256] @ w[:, i * 256:(i + 1) * 256].t() for i in range(4))


def mm_scaled(x, w):
    return (x @ w.t()) * (1 + 2**-16)


def mm_dropped_chunk(x, w):
    return x[:, :1020] @ w[:, :1020].t()


def attention_eager(q, k, v):
    return AT.eager_attention(q, k, v)


def attention_flash(q, k, v):
    return AT.flash_attention(q, k, v)


def attention_sdpa(q, k, v):
    return F.scaled_dot_product_attention(q, AT.repeat_kv(k, 2), AT.repeat_kv(v, 2), is_causal=True)


def attention_scale_off(q, k, v):
    return AT.eager_attention(q, k, v, scale=0.125 * (1 + 1e-5))


def swiglu_float32(gate, up):
    return F.silu(gate) * up


FREQ = functools.partial(R.default_frequencies, dim=128, base=10000.0)
FREQ_OFF = functools.partial(R.default_frequencies, dim=128, base=10000.0 * (1 + 1e-5))


def rope(q, k, position_ids):
    return R.rope_neox(q, k, position_ids, frequencies=FREQ)


def rope_base_off(q, k, position_ids):
    return R.rope_neox(q, k, position_ids, frequencies=FREQ_OFF)


def rope_interleaved(q, k, position_ids):
    qi, ki = R.rope_interleaved(R.neox_to_interleaved(q), R.neox_to_interleaved(k), position_ids, frequencies=FREQ)
    return R.interleaved_to_neox(qi), R.interleaved_to_neox(ki)


def ce_logsumexp(logits, labels):
    z = logits.float()
    return (torch.logsumexp(z, -1) - z.gather(-1, labels[:, None])[:, 0]).mean()


def ce_log_softmax_probs(logits, labels):
    p = torch.softmax(logits.float(), -1)
    return (-torch.log(p.gather(-1, labels[:, None])[:, 0])).mean()


X512 = {"x": kcert.Gaussian((1, 64, 512), shift=0.1)}
W512 = {"w": N.gains(512, "llama")}
GEMMA_W = {"w": N.gains(512, "gemma")}
LN_W = {"w": N.gains(512, "llama"), "b": kcert.Gaussian((512,), std=0.02)}
XA = {"x": kcert.Gaussian((128, 512), shift=0.1)}
LIN_IN, LIN_W = {"x": kcert.Gaussian((64, 1024), shift=0.1)}, {"w": kcert.Gaussian((256, 1024), std=0.03)}
ROPE_IN = {"q": kcert.Gaussian((1, 4, 64, 128), shift=0.1), "k": kcert.Gaussian((1, 2, 64, 128), shift=0.1),
           "position_ids": kcert.Integers((1, 64), 0, 4096)}
CE_IN = {"logits": kcert.Gaussian((256, 512), std=2.0), "labels": kcert.Integers((256,), 0, 512)}
GATED = {"gate": kcert.Gaussian((128, 512), shift=0.1), "up": kcert.Gaussian((128, 512), shift=0.1)}
f32 = float32_inside

# (name, same real function?, ref, prod, inputs, weights)
PAIRS = [
    ("rms_norm, float32 inside", True, N.rms_norm, f32(rms_plain), X512, W512),
    ("rms_norm, input dtype", True, N.rms_norm, rms_plain, X512, W512),
    ("rms_norm, blocked sum", True, N.rms_norm, f32(rms_blocked_sum), X512, W512),
    ("rms_norm_hf vs rms_norm", True, N.rms_norm, N.rms_norm_hf, X512, W512),
    ("gemma rms_norm, input dtype", True, N.gemma_rms_norm, gemma_plain, X512, GEMMA_W),
    ("layer_norm one-pass, float32 inside", True, N.layer_norm, f32(ln_one_pass), X512, LN_W),
    ("layer_norm one-pass, mean offset 5", True, N.layer_norm, f32(ln_one_pass),
     {"x": kcert.Gaussian((1, 64, 512), shift=5.0)}, LN_W),
    ("layer_norm two-pass, input dtype", True, N.layer_norm, ln_two_pass, X512, LN_W),
    ("gelu erf written out, input dtype", True, A.gelu_erf, gelu_erf_written, XA, {}),
    ("gelu erf written out, float32 inside", True, A.gelu_erf, f32(gelu_erf_written), XA, {}),
    ("gelu tanh written out", True, A.gelu_tanh, gelu_tanh_written, XA, {}),
    ("silu written out", True, A.silu, silu_written, XA, {}),
    ("softmax written out, float32 inside", True, S.softmax, f32(softmax_written), S.softmax_inputs(), {}),
    ("softmax online (32 lanes)", True, S.softmax, S.online_softmax, S.softmax_inputs(), {}),
    ("softmax exp2 with float32 log2(e)", True, S.softmax, f32(softmax_exp2), S.softmax_inputs(), {}),
    ("matmul split-k, input dtype", True, mm, mm_split_k, LIN_IN, LIN_W),
    ("matmul split-k, float32 inside", True, mm, f32(mm_split_k), LIN_IN, LIN_W),
    ("attention flash (float32 inside)", True, attention_eager, attention_flash, AT.attention_inputs(), {}),
    ("attention sdpa", True, attention_eager, attention_sdpa, AT.attention_inputs(), {}),
    ("swiglu float32, one rounding", True, A.swiglu, f32(swiglu_float32), GATED, {}),
    ("rope interleaved layout", True, rope, rope_interleaved, ROPE_IN, {}),
    ("cross-entropy logsumexp", True, LS.cross_entropy, ce_logsumexp, CE_IN, {}),
    ("cross-entropy log(softmax)", True, LS.cross_entropy, ce_log_softmax_probs, CE_IN, {}),
    ("rms_norm eps on the RMS, float32 inside", False, N.rms_norm, f32(rms_eps_on_rms), X512, W512),
    ("rms_norm eps on the RMS, input dtype", False, N.rms_norm, rms_eps_on_rms, X512, W512),
    ("gemma eps (1e-6) on the RMS, input dtype", False, N.gemma_rms_norm, gemma_eps_on_rms, X512, GEMMA_W),
    ("layer_norm unbiased variance", False, N.layer_norm, f32(ln_unbiased), X512, LN_W),
    ("layer_norm without its bias", False, N.layer_norm, f32(ln_without_bias), X512, LN_W),
    ("gelu tanh where erf is meant", False, A.gelu_erf, f32(gelu_tanh_written), XA, {}),
    ("gelu tanh, c = 0.7978", False, A.gelu_tanh, f32(functools.partial(gelu_tanh_written, c=0.7978)), XA, {}),
    ("gelu tanh, a = 0.0447", False, A.gelu_tanh, f32(functools.partial(gelu_tanh_written, a=0.0447)), XA, {}),
    ("silu, exp2 with log2(e) = 1.4427", False, A.silu, f32(silu_exp2_truncated_log2e), XA, {}),
    ("softmax, exp2 with log2(e) = 1.4427", False, S.softmax, f32(functools.partial(softmax_exp2, log2e=1.4427)),
     S.softmax_inputs(), {}),
    ("softmax, polynomial exp", False, S.softmax, f32(softmax_polynomial_exp), S.softmax_inputs(), {}),
    ("matmul scaled by 1 + 2^-16", False, mm, f32(mm_scaled), LIN_IN, LIN_W),
    ("matmul missing 4 of 1024 terms", False, mm, f32(mm_dropped_chunk), LIN_IN, LIN_W),
    ("attention scale x (1 + 1e-5)", False, attention_eager, attention_scale_off, AT.attention_inputs(), {}),
    ("rope base x (1 + 1e-5)", False, rope, rope_base_off, ROPE_IN, {}),
]


def _rung_mode(mode: str, dtype: torch.dtype):
    if mode == "all":
        return ladder.LADDER_DTYPES
    if mode == "one":
        return (dtype,)
    return None


def tuning(dtype: torch.dtype, rungs_mode: str, only: list[str], dump: list | None = None) -> None:
    """Each pair's ladder at ``dtype`` (rungs: the default, ``all`` four formats, or ``one``: the working
    precision alone, the same-precision comparison) judged by the gate as shipped; per output the
    outcome, the judged rung, K, the point group it rests on and the resolution in harm ULPs."""
    from kcert.execution.evidence import AlgebraEvidence
    from kcert.gates.algebra import judge_algebra

    name_of = ladder.dtype_name(dtype)
    print(f"\n## {name_of} case, rungs: {rungs_mode}\n")
    print(f"{'pair':44s} {'same':5s} {'output':10s} {'outcome':13s} {'judged':9s} {'K':>9s} {'group':6s} "
          f"{'res/harm':>9s}  prod / ref error per rung")
    for name, same, ref, prod, inputs, weights in PAIRS:
        if only and not any(o in name for o in only):
            continue
        case = kcert.Case(name="tuning", ref=ref, prod=prod, inputs=inputs, weights=weights, dtype=dtype,
                          prod_precisions=_rung_mode(rungs_mode, dtype))
        m = ladder.measure(case, probes.draw_weights(case, 0, torch.device("cpu")), 0, torch.device("cpu"))
        evidence = AlgebraEvidence(m.points, m.wide_points, "ref in real mode", "unavailable", name_of, False,
                                   ("prod cannot run in real mode",), ladder=m, small_points=m.small_points,
                                   training_dtype=case.training_format)
        result = judge_algebra(evidence)
        accepted = [r for r in m.rungs if r.accepted]
        for j, out in enumerate(result.ladder.outputs):
            errors = " ".join(f"{r.dtype}: {r.prod_error[j]:.1e}/{(r.ref_error[j] or 0):.1e}" for r in accepted)
            print(f"{name:44s} {'yes' if same else 'no':5s} {out.output:10s} {out.outcome:13s} {out.judged:9s} "
                  f"{out.amplification:9.3g} {out.points:6s} {out.resolution_harm:9.2g}  {errors}", flush=True)
            if dump is not None:
                dump.append({"pair": name, "same": same, "dtype": name_of, "rungs": rungs_mode, "output": out.output,
                             "outcome": out.outcome, "judged": out.judged, "K": out.amplification,
                             "group": out.points, "resolution_harm": out.resolution_harm,
                             "per_rung": [{"dtype": r.dtype, "out": r.output_dtypes[j],
                                           "prod": list(r.prod_point_errors[j]),
                                           "ref": list(r.ref_point_errors[j]) if r.ref_point_errors else None}
                                          for r in accepted],
                             "points": [m.points, m.wide_points, m.small_points]})


def one_precision(only: list[str]) -> None:
    from kcert.controls.registry import all_controls

    print(f"{'opaque negative':40s} algebra  bias  variance  verdict (one rung)  if accepted  ladder")
    for control in all_controls():
        if control.family != "opaque" or control.kind != "negative" or (only and control.name not in only):
            continue
        case = control.build()
        case = dataclasses.replace(case, prod_precisions=(case.dtype,))
        cert = kcert.certify(case, replicates=control.replicates, seed=0)
        accepted = kcert.certify(case, replicates=control.replicates, seed=0, accept_untested_algebra=True)
        g = cert.gates
        judged = [o for o in cert.algebra.ladder.outputs if o.judged] if cert.algebra.ladder is not None else []
        worst = max(judged, key=lambda o: (o.verdict.severity, o.amplification), default=None)
        ladder_text = (f"{worst.outcome} at {worst.judged}, K {worst.amplification:.3g}, "
                       f"resolution {worst.resolution_harm:.2g} harm ULP" if worst else "no rung")
        print(f"{control.name:40s} {g['algebra'].value:8s} {g['bias'].value:5s} {g['variance'].value:9s} "
              f"{cert.verdict.value:19s} {accepted.verdict.value:10s} {ladder_text}", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("parts", nargs="*", choices=["tuning", "one-precision"], default=["tuning"])
    p.add_argument("--dtype", nargs="*", default=["bfloat16"], choices=["bfloat16", "float16", "float32"],
                   help="the cases' working dtype(s) for the tuning part")
    p.add_argument("--rungs", nargs="*", default=["default"], choices=["default", "all", "one"],
                   help="rungs of the tuning part: the default, all four formats, or the working dtype alone")
    p.add_argument("--only", nargs="*", default=[])
    p.add_argument("--dump", metavar="JSON", help="write every output's per-point errors to this file")
    args = p.parse_args()
    torch.set_num_threads(1)
    dump = [] if args.dump else None
    if "tuning" in args.parts:
        for dt in args.dtype:
            for mode in args.rungs:
                tuning(getattr(torch, dt), mode, args.only, dump)
    if dump is not None:
        import json
        with open(args.dump, "w") as f:
            json.dump(dump, f)
    if "one-precision" in args.parts:
        one_precision(args.only)


if __name__ == "__main__":
    main()
