"""The drift a certificate predicts for the model's parameters (norm slots): numpy only.

Derivation (docs/training.md has it in full). The bias gate's sign-aligned statistic of channel
``g`` is ``A_g = mean((prod - ref) sign(ref))`` and ``M_g = mean|ref|``. If prod is ref with the
channel's output scaled, ``prod = ref (1 + delta_g)``, then ``A_g = delta_g M_g``: the certificate
measures the relative gain error ``delta_g = A_g / M_g``. The model trained with prod sees an
effective gain ``ghat (1 + delta_g)`` where the reference model sees ``ghat``. If training drives
the *effective* gain to the same place in both arms (the loss does not care which parameter
produced it), the stored parameter ``w`` of the prod arm must end lower by the amount that
undoes ``delta_g``: to first order

    Delta w_g = -delta_g / r_g,    r_g = d log|y_g| / d w_g = sum(dy_g/dw_g sign(y_g)) / sum|y_g|,

``r_g`` measured on ref by autograd at the case's weights (``1 / w`` for ``y = w n``,
``1 / (1 + w)`` for Gemma's ``y = (1 + w) n``). Only the buckets the certificate finds significant
(``|z| > z*`` on the sign-aligned statistic, whoever the bias is attributed to: training sees
``prod - ref``, not who is right) get a prediction; the others are predicted 0.

This is the full-compensation limit. It assumes (1) ``delta_g`` stays what the certificate
measured while the weights move (the certificate's horizon is one optimizer step at fixed
weights); (2) the compensation happens in this parameter, not in the layer after it (a norm's
gain and the next projection's column share a scale symmetry); (3) the model's activations
behave like the probe's; (4) the backward of prod adds no bias of its own. The measured slope of
drift on prediction (``1``: as predicted, ``0``: none of it) says how far these hold.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..results.training import DriftPrediction
from ..stats import training as tstats


@dataclass(frozen=True)
class ChannelBias:
    """What the certificate says per case channel, for the norm's gain."""

    relative_error: np.ndarray  # delta_g = A_g / M_g (sign-aligned mean over mean |ref|)
    significant: np.ndarray  # bool: |z| above its critical value (z* at the R) on the sign-aligned statistic
    sensitivity: np.ndarray  # r_g = d log|y_g| / d w_g at the case's weights
    z_star: float
    output: str


def unavailable(reason: str) -> DriftPrediction:
    return DriftPrediction(available=False, reason=reason)


def predict(bias: ChannelBias, case_channels: np.ndarray) -> np.ndarray:
    """Predicted full-compensation drift of each model channel (``case_channels``: the case
    channel behind every model channel, concatenated over norm sites)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        per_case = np.where(bias.significant & (bias.sensitivity != 0), -bias.relative_error / bias.sensitivity, 0.0)
    per_case = np.where(np.isfinite(per_case), per_case, 0.0)
    return per_case[case_channels]


def compare_drift(bias: ChannelBias, case_channels: np.ndarray, measured: np.ndarray, moved: np.ndarray,
                  ulp_at_gain: np.ndarray, alpha: float, power: float, history: tuple | None = None,
                  effective: np.ndarray | None = None) -> DriftPrediction:
    """``measured``: (seeds, channels) drift prod - ref of the gains; ``moved``: (seeds, channels)
    |final - initial| of ref's gains; ``ulp_at_gain``: per model channel, the working dtype's
    ULP at the effective gain; ``history``: (steps, (seeds, evaluations, channels) drift) to follow
    the slope over the run; ``effective``: (seeds, channels) ``log(gain x column RMS)`` of prod minus
    ref's: the channel's whole scale, whose full compensation is ``-delta``."""
    predicted = predict(bias, case_channels)
    on = predicted != 0
    if not np.any(on):
        return DriftPrediction(available=True, reason="the certificate finds no significant bucket: no drift predicted",
                               predicted=predicted, channels=0, predicted_rms=0.0)
    slope = tstats.regression_slope(measured, predicted)
    slope_stat = tstats.paired("slope of drift on prediction", np.zeros_like(slope), slope, alpha, power)
    mean = measured[:, on].mean(axis=0)
    sd = measured[:, on].std(axis=0, ddof=1) if measured.shape[0] > 1 else np.full(int(on.sum()), np.nan)
    with np.errstate(divide="ignore", invalid="ignore"):
        travelled = np.median(moved[:, on] / ulp_at_gain[on])
    effective_slope = None
    if effective is not None:
        target = np.where(predicted != 0, -bias.relative_error[case_channels], 0.0)
        effective_slope = tstats.paired("slope of effective scale on -delta", np.zeros(effective.shape[0]),
                                        tstats.regression_slope(effective, target), alpha, power)
    steps = path = None
    if history is not None:
        steps, drifts = history
        path = np.array([[s.mean, s.low, s.high] for s in (
            tstats.paired("slope", np.zeros(drifts.shape[0]), tstats.regression_slope(drifts[:, e], predicted), alpha,
                          power) for e in range(drifts.shape[1]))]).reshape(-1, 3)
    return DriftPrediction(
        available=True,
        reason="full compensation of the certificate's relative gain errors (docs/training.md)",
        predicted=predicted,
        channels=int(on.sum()),
        predicted_rms=float(np.sqrt(np.mean(predicted[on] ** 2))),
        coherent_rms=float(np.sqrt(np.mean(mean ** 2))),
        noise_rms=float(np.sqrt(np.mean(sd ** 2))),
        slope=slope_stat,
        moved_ulps=float(travelled),
        mean_relative_error=float(np.mean(bias.relative_error[case_channels][on])),
        slope_steps=None if steps is None else np.asarray(steps),
        slope_path=path,
        effective_slope=effective_slope,
    )
