"""Figures of a training comparison: plain functions that read a result and return PNG bytes.

matplotlib through :class:`matplotlib.figure.Figure` and the Agg canvas only (no pyplot, no global
state), imported when a figure is drawn."""

from __future__ import annotations

import numpy as np

from ..results.training import TrainingComparison
from .plots import _figure, _png, _style  # one look for every kcert figure

REF, PROD, BAND, GREY = "#0969da", "#cf222e", "#fa8072", "#6e7781"


def _window(steps: int) -> int:
    return max(1, steps // 20)


def loss_curves(result: TrainingComparison) -> bytes:
    """Left: the training loss of each arm (mean over seeds, moving average). Right: prod - ref per
    step with its pointwise interval over seeds, beside zero."""
    fig = _figure(10, 3.4)
    left, right = fig.subplots(1, 2)
    window = _window(result.runs[0].ref.train_loss.size)
    for arm, colour in (("ref", REF), ("prod", PROD)):
        mean = result.mean_loss(arm, window)
        left.plot(np.arange(mean.size) + window, mean, color=colour, label=arm, linewidth=1.2)
    left.set_xlabel("step")
    left.set_ylabel("training loss (nats)")
    if np.isfinite(result.entropy_rate):
        left.axhline(result.entropy_rate, color=GREY, linestyle=":", linewidth=1,
                     label="Markov entropy rate")
    left.legend(frameon=False)
    left.set_title(f"{result.case}: loss, mean of {len(result.runs)} seeds", fontsize=10)
    _style(left)
    mean, low, high = result.curve_band(window=window)
    x = np.arange(mean.size) + window
    right.fill_between(x, low, high, color=BAND, alpha=0.35, linewidth=0, label=f"{1 - result.alpha:.0%} interval")
    right.plot(x, mean, color=PROD, linewidth=1.2, label="prod - ref")
    right.axhline(0, color=GREY, linewidth=0.8)
    right.set_xlabel("step")
    right.set_ylabel("loss difference (nats)")
    right.set_title(f"paired difference ({result.verdict.value})", fontsize=10)
    right.legend(frameon=False)
    _style(right)
    return _png(fig)


def drift(result: TrainingComparison) -> bytes:
    """Left: the drift prod - ref of every norm gain at the end (mean over seeds, 1 s.e.) against
    the certificate's prediction (without one, against the channel index). Right, with a
    prediction: the slope of measured on predicted drift at every evaluation (1 = full
    compensation), with its interval over seeds."""
    p = result.prediction
    path = p.available and p.slope_path is not None and p.predicted is not None and np.any(p.predicted != 0)
    fig = _figure(10 if path else 5.2, 3.8)
    axes = fig.subplots(1, 2 if path else 1)
    ax = axes[0] if path else axes
    mean, se = result.drift.seed_mean()
    if path:
        x = p.predicted
        ax.errorbar(x, mean, yerr=se, fmt="o", markersize=2.5, color=PROD, ecolor=BAND, elinewidth=0.6, alpha=0.7,
                    label="measured (mean over seeds, 1 s.e.)")
        lim = float(np.max(np.abs(x))) * 1.1
        ax.plot([-lim, lim], [-lim, lim], color=GREY, linestyle="--", linewidth=0.8, label="full compensation")
        ax.set_xlabel("predicted drift of the gain (from the certificate)")
        ax.legend(frameon=False, fontsize=8)
    else:
        ax.errorbar(np.arange(mean.size), mean, yerr=se, fmt="o", markersize=2, color=PROD, ecolor=BAND,
                    elinewidth=0.6, alpha=0.7)
        ax.set_xlabel("norm channel (all sites)")
    ax.axhline(0, color=GREY, linewidth=0.8)
    ax.set_ylabel("measured drift prod - ref")
    ax.set_title(f"{result.case}: norm-gain drift after {result.config['steps']} steps", fontsize=10)
    _style(ax)
    if path:
        right = axes[1]
        steps, band = p.slope_steps, p.slope_path
        right.fill_between(steps, band[:, 1], band[:, 2], color=BAND, alpha=0.35, linewidth=0,
                           label=f"{1 - result.alpha:.0%} interval over seeds")
        right.plot(steps, band[:, 0], "o-", color=PROD, markersize=3, linewidth=1.2, label="slope")
        right.axhline(1, color=GREY, linestyle="--", linewidth=0.8, label="full compensation")
        right.axhline(0, color=GREY, linewidth=0.8)
        right.set_xlabel("step")
        right.set_ylabel("slope of measured on predicted drift")
        right.set_title("how much of the predicted drift has happened", fontsize=10)
        right.legend(frameon=False, fontsize=8)
        _style(right)
    return _png(fig)
