"""``kcert.training.compare``: train with ref's kernel and with prod's, seed by seed, and compare."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ..case import Case
from ..errors import KcertError, ParameterError
from ..settings import DEFAULTS
from ..stats.ulp import ulp
from . import checkpoint as ckpt
from . import prediction as pred
from ..stats import training as tstats
from .config import QUICK, TrainingConfig
from .model import norm_sites, site_name
from ..results.training import CertificateSummary, DriftResult, SeedRun, TrainingComparison, TrainingVerdict
from .slots import Slot, bind, case_channels, gain_sensitivity
from .train import build, model_shape, train_arm

METRICS = ("final_loss", "loss_curve", "mean_drift", "drift")
Progress = Callable[[int, int, str], None]


def _seeds(seeds) -> tuple[int, ...]:
    if isinstance(seeds, bool):
        raise ParameterError(f"seeds must be a count >= 2 or a sequence of seeds, got {seeds!r}")
    if isinstance(seeds, int):
        if seeds < 2:
            raise ParameterError(f"seeds must be >= 2 (a paired comparison needs a spread), got {seeds}")
        return tuple(range(seeds))
    try:
        out = tuple(int(s) for s in seeds)
    except (TypeError, ValueError):
        raise ParameterError(f"seeds must be a count >= 2 or a sequence of seeds, got {seeds!r}") from None
    if len(out) < 2 or len(set(out)) != len(out) or min(out) < 0:
        raise ParameterError(f"seeds must name at least two distinct seeds >= 0, got {list(out)}")
    return out


def _config(config: TrainingConfig | None, quick: bool, steps: int | None) -> TrainingConfig:
    if config is not None and not isinstance(config, TrainingConfig):
        raise ParameterError(f"config must be a kcert.training.TrainingConfig, got {type(config).__name__}")
    config = config or (QUICK if quick else TrainingConfig())
    if steps is not None:
        if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
            raise ParameterError(f"steps must be an integer >= 1, got {steps!r}")
        config = config.replace(steps=steps, eval_every=min(config.eval_every, steps))
    return config


def _certificate(case: Case, certificate, predict: bool, replicates: int, case_seed: int, algebra_proof: bool):
    if not predict:
        return None
    if certificate is None:
        from ..certification import certify

        return certify(case, replicates=replicates, seed=case_seed, algebra_proof=algebra_proof)
    if getattr(certificate, "case", None) != case.name:
        raise ParameterError(f"certificate is for case {getattr(certificate, 'case', None)!r}, not {case.name!r}")
    return certificate


def _summary(cert) -> CertificateSummary | None:
    if cert is None:
        return None
    from ..verdict import Verdict

    significant = 0
    if cert.bias:
        b = cert.bias[0]
        test = next((t for t in b.tests if t.statistic == "sign_aligned"), None)
        if test is not None:
            significant = int(np.sum(test.significant))
    findings = sum(b.count(Verdict.FAIL) + b.count(Verdict.WARN) for b in cert.bias)
    return CertificateSummary(verdict=cert.verdict.value, gates={g: v.value for g, v in cert.gates.items()},
                              replicates=cert.provenance.replicates, seed=cert.provenance.seed,
                              bias_findings=findings, significant=significant)


def _channel_bias(slot: Slot, cert, case_seed: int) -> pred.ChannelBias | str:
    """The certificate's per-channel relative gain errors, or why there are none."""
    if slot.kind != "norm":
        return (f"no per-parameter prediction for a {slot.kind} case: its bias buckets are not parameters of "
                f"the model (derived for norm gains only)")
    if not cert.bias:
        return "the certificate has no bias result (bias gate skipped)"
    b = cert.bias[0]
    test = next((t for t in b.tests if t.statistic == "sign_aligned"), None)
    if test is None:
        return "the certificate was made without the sign-aligned statistic"
    with np.errstate(divide="ignore", invalid="ignore"):
        delta = np.where(b.reference_magnitude > 0, test.mean / b.reference_magnitude, 0.0)
    significant = test.significant
    sensitivity = gain_sensitivity(slot, case_seed)
    if delta.shape != sensitivity.shape:
        return (f"the certificate's output {b.output!r} has {delta.size} buckets, the norm's gain "
                f"{sensitivity.size} channels")
    return pred.ChannelBias(delta, significant, sensitivity, b.thresholds.z_star, b.output)


def _run_seed(slot: Slot, config: TrainingConfig, seed: int, tick, cache: dict | None) -> SeedRun:
    arms, finals = {}, {}
    for arm in ("ref", "prod"):
        key = _cache_key(slot, arm, config, seed) if cache is not None else None
        if key is not None and key in cache:
            arms[arm], finals[arm] = cache[key]
            tick(config.steps, arm)
            continue
        try:
            run, params = train_arm(slot, arm, config, seed, on_step=lambda a=arm: tick(1, a))
        except KcertError:
            raise
        except Exception as exc:  # the kernel, called on the model's tensors, is the case's to fix
            from ..errors import KernelError

            raise KernelError(f"case {slot.case.name!r}: training with {arm}'s kernel in the {slot.kind} slot failed "
                              f"(seed {seed}): {type(exc).__name__}: {exc}") from exc
        arms[arm], finals[arm] = run, params
        if key is not None:
            cache[key] = (run, params)
    initial = {n: t.detach() for n, t in build(slot, "ref", config, seed).p.items()}
    apart = math.sqrt(sum(float((finals["prod"][n] - finals["ref"][n]).double().pow(2).sum()) for n in initial))
    moved = math.sqrt(sum(float((finals["ref"][n] - initial[n]).double().pow(2).sum()) for n in initial))
    return SeedRun(seed=seed, ref=arms["ref"], prod=arms["prod"], distance=apart / moved if moved > 0 else math.nan)


def _cache_key(slot: Slot, arm: str, config: TrainingConfig, seed: int):
    """Runs that are the same computation: the same kernel object in the same slot, dtype, initial
    norm weights, model and seed (a benchmark comparing several cases of one operator trains
    their shared reference once)."""
    draw = tuple((k, v.tobytes()) for k, v in sorted(slot.weight_draw.items()))
    return (slot.kernel(arm), slot.kind, slot.case.dtype, draw, slot.head_dim, slot.positions, slot.bias, config, seed)


def _drift(runs: Sequence[SeedRun], slot: Slot, config: TrainingConfig, alpha: float, power: float) -> DriftResult:
    sites = norm_sites(config.layers)
    hidden, _ = model_shape(slot, config)
    names = [f"norm{j}_w" for j in range(sites)]
    ref = np.stack([np.concatenate([r.ref.norm_params[n] for n in names]) for r in runs])
    prod = np.stack([np.concatenate([r.prod.norm_params[n] for n in names]) for r in runs])
    d = prod - ref
    statistic, p = tstats.sign_flip_test(d)
    labels = tuple(f"{site_name(j, config.layers)}:{c}" for j in range(sites) for c in range(hidden))
    spread = ref.std(axis=0, ddof=1) if len(runs) > 1 else np.full(d.shape[1], np.nan)
    mean = tstats.paired("mean gain drift", ref.mean(axis=1), prod.mean(axis=1), alpha, power)
    return DriftResult(differences=d, channel_names=labels, seed_spread=spread, statistic=statistic, p_value=p,
                       mean=mean)


def _prediction(slot: Slot, cert, config: TrainingConfig, runs, drift: DriftResult, case_seed: int, alpha: float,
                power: float) -> pred.DriftPrediction:
    if cert is None:
        return pred.unavailable("no certificate (prediction switched off)")
    bias = _channel_bias(slot, cert, case_seed)
    if isinstance(bias, str):
        return pred.unavailable(bias)
    sites = norm_sites(config.layers)
    hidden, _ = model_shape(slot, config)
    channels = np.concatenate([case_channels(slot, j, hidden) for j in range(sites)])
    initial = slot.weight_draw["w"][channels]
    moved = np.stack([np.abs(np.concatenate([r.ref.norm_params[f"norm{j}_w"] for j in range(sites)]) - initial)
                      for r in runs])
    with np.errstate(divide="ignore"):
        gain = np.abs(1.0 / bias.sensitivity[channels])
    spacing = np.asarray(ulp(np.where(np.isfinite(gain), gain, 1.0), str(slot.case.dtype)), np.float64)
    return pred.compare_drift(bias, channels, drift.differences, moved, spacing, alpha, power, _history(runs, sites),
                              _effective(runs, sites, initial, 1.0 / bias.sensitivity[channels]))


def _effective(runs, sites: int, initial: np.ndarray, gain: np.ndarray) -> np.ndarray | None:
    """(seeds, channels) ``log|ghat x column RMS|`` of prod minus ref's at the end, ``ghat`` the gain
    as the kernel applies it (``1/r`` at the initial weights, moved as the stored gain moved);
    None when the runs did not record the columns."""
    keys = [f"norm{j}_downstream" for j in range(sites)]
    if not all(k in r.ref.norm_params and k in r.prod.norm_params for r in runs for k in keys):
        return None

    def scale(arm):
        w = np.concatenate([arm.norm_params[f"norm{j}_w"] for j in range(sites)])
        columns = np.concatenate([arm.norm_params[k] for k in keys])
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.log(np.abs(gain + (w - initial)) * columns)

    out = np.stack([scale(r.prod) - scale(r.ref) for r in runs])
    return np.where(np.isfinite(out), out, 0.0)


def _history(runs, sites: int) -> tuple | None:
    """(evaluation steps, (seeds, evaluations, channels) gain drift) when every run kept the same
    evaluations (None after a non-finite run)."""
    steps = runs[0].ref.eval_steps
    if any(not (r.ref.finite and r.prod.finite) or not np.array_equal(r.ref.eval_steps, steps)
           or not r.ref.norm_trajectory for r in runs):
        return None

    def gains(arm):
        return np.concatenate([arm.norm_trajectory[f"norm{j}_w"] for j in range(sites)], axis=1)

    return steps, np.stack([gains(r.prod) - gains(r.ref) for r in runs])


def _verdict(runs, final, curve, drift, adjusted: dict, alpha: float) -> tuple[TrainingVerdict, str]:
    prod_bad = [r.seed for r in runs if not r.prod.finite and r.ref.finite]
    ref_bad = [r.seed for r in runs if not r.ref.finite]
    if prod_bad:
        return TrainingVerdict.DIFFERS, f"prod's loss became non-finite in seeds {prod_bad}, where ref's did not"
    if ref_bad:
        return TrainingVerdict.INCONCLUSIVE, f"ref's own loss became non-finite in seeds {ref_bad}"
    if len(runs) < 3:
        return TrainingVerdict.INCONCLUSIVE, f"{len(runs)} seeds: at least 3 are needed for a verdict"
    hits = [m for m in METRICS if adjusted.get(m, math.nan) < alpha]
    if hits:
        words = {"final_loss": f"final loss (prod - ref {final.mean:+.3g}, p = {adjusted['final_loss']:.2g})",
                 "loss_curve": f"loss curve (mean prod - ref {curve.mean:+.3g}, p = {adjusted['loss_curve']:.2g})",
                 "mean_drift": f"mean norm-gain drift ({drift.mean.mean:+.3g}, p = {adjusted['mean_drift']:.2g})",
                 "drift": f"norm-gain drift pattern (sign-flip p = {adjusted['drift']:.2g})"}
        return TrainingVerdict.DIFFERS, "detected in " + "; ".join(words[m] for m in hits) + \
            f" (Holm-adjusted over {len(METRICS)} metrics, alpha = {alpha:g})"
    if not final.detectable <= final.seed_spread:
        return TrainingVerdict.INCONCLUSIVE, (
            f"no difference detected, but the final-loss test could only see differences of {final.detectable:.3g} "
            f"(power {final.power:.0%}), more than the seed-to-seed spread {final.seed_spread:.3g}: add seeds")
    return TrainingVerdict.INDISTINGUISHABLE, (
        f"no metric differs (smallest Holm-adjusted p = {min(v for v in adjusted.values() if not math.isnan(v)):.2g}); "
        f"the final-loss test detects {final.detectable:.3g} = {final.detectable / final.seed_spread:.2g} "
        f"seed-to-seed spreads with power {final.power:.0%}" if final.seed_spread > 0 else
        "no metric differs; every seed gave identical results")


def compare(case: Case, steps: int | None = None, seeds: int | Sequence[int] | None = None, *,
            config: TrainingConfig | None = None, quick: bool = False, alpha: float = 0.05, power: float = 0.8,
            certificate=None, predict: bool = True, replicates: int | None = None, case_seed: int = 0,
            algebra_proof: bool = True, checkpoint: str | None = None, resume: bool = False,
            progress: Progress | None = None, cache: dict | None = None) -> TrainingComparison:
    """Train the model of ``case``'s slot with ref's kernel and with prod's, for each seed, and
    compare the runs paired by seed (docs/training.md).

    ``steps``: the horizon (default the config's: 300, or 120 with ``quick``); ``seeds``: a count
    (seeds 0..K-1) or the seeds (default 8, 4 with ``quick``); ``config``: a :class:`TrainingConfig` (``quick`` picks the small
    one); ``alpha``: the family-wise level over the three metrics (Holm); ``power``: for the
    detectable differences. ``certificate``: the case's :class:`~kcert.Certificate` for the
    prediction, or None to certify here (``replicates``, default 1024, 256 with ``quick``, seed
    ``case_seed``); ``predict=False`` skips both. ``checkpoint``: a JSON file that records every
    finished seed; ``resume=True`` reuses the seeds it holds (same case, settings and kcert version).
    ``progress(steps_done, steps_total, label)`` is called as training advances. ``cache``: a dict
    shared between calls to train a kernel shared by several cases once (benchmarks).
    """
    started = time.perf_counter()
    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    seed_list = _seeds((4 if quick else 8) if seeds is None else seeds)
    config = _config(config, quick, steps)
    for name, value in (("alpha", alpha), ("power", power)):
        if not (isinstance(value, float) and 0 < value < 1):
            raise ParameterError(f"{name} must be a number in (0, 1), got {value!r}")
    if isinstance(case_seed, bool) or not isinstance(case_seed, int) or case_seed < 0:
        raise ParameterError(f"case_seed must be an integer >= 0, got {case_seed!r}")
    if resume and checkpoint is None:
        raise ParameterError("resume=True needs checkpoint, the file to resume from")
    replicates = replicates or (256 if quick else DEFAULTS["replicates"])
    slot = bind(case, case_seed)
    fingerprint = ckpt.fingerprint(case, slot, config, case_seed)
    done = ckpt.load(checkpoint, fingerprint) if resume else {}
    resumed = tuple(s for s in seed_list if s in done)
    if checkpoint is not None:
        ckpt.check_writable(checkpoint)
    cert = _certificate(case, certificate, predict, replicates, case_seed, algebra_proof)

    total = 2 * config.steps * len(seed_list)
    state = {"done": 2 * config.steps * sum(1 for s in seed_list if s in done)}

    def tick(n, arm):
        state["done"] += n
        if progress is not None:
            progress(state["done"], total, f"seed {state['seed']} {arm}")

    threads = torch.get_num_threads()
    torch.set_num_threads(config.threads)
    try:
        runs = []
        for seed in seed_list:
            if seed in done:
                runs.append(done[seed])
                continue
            state["seed"] = seed
            run = _run_seed(slot, config, seed, tick, cache)
            runs.append(run)
            done[seed] = run
            if checkpoint is not None:
                ckpt.save(checkpoint, fingerprint, done)
    finally:
        torch.set_num_threads(threads)

    final = tstats.paired("final loss", [r.ref.final_loss for r in runs], [r.prod.final_loss for r in runs],
                          alpha, power)
    curve = tstats.paired("mean loss-curve difference", [float(np.mean(r.ref.train_loss)) for r in runs],
                          [float(np.mean(r.prod.train_loss)) for r in runs], alpha, power)
    drift = _drift(runs, slot, config, alpha, power)
    adjusted = tstats.holm({"final_loss": final.p_value, "loss_curve": curve.p_value, "mean_drift": drift.mean.p_value,
                            "drift": drift.p_value})
    verdict, reason = _verdict(runs, final, curve, drift, adjusted, alpha)
    prediction = _prediction(slot, cert, config, runs, drift, case_seed, alpha, power)
    return TrainingComparison(
        case=case.name, slot=slot.kind, where=slot.where, dtype=str(case.dtype).removeprefix("torch."),
        config=config.describe(), seeds=seed_list, runs=tuple(runs), final_loss=final, loss_curve=curve,
        drift=drift, adjusted_p=adjusted, verdict=verdict, reason=reason, alpha=alpha, power=power,
        prediction=prediction, certificate=_summary(cert), wall_time_s=time.perf_counter() - started,
        resumed_seeds=resumed,
        entropy_rate=config.language.entropy_rate,
    )

