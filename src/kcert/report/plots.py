"""Figures of the HTML report: each a plain function that reads result objects and returns PNG bytes.

Plots only read results and draw them: every quantity a figure shows beyond a stored field (errors in
harm units, return-level curves, QQ points, signed effects) comes from a method of the result type, so
report/ computes no statistic. matplotlib is imported lazily, and
through :class:`matplotlib.figure.Figure` with the Agg canvas only: no pyplot, no global state.
"""

from __future__ import annotations

import io
import textwrap

import numpy as np

from ..certificate import BiasResult, BitwiseResult, VarianceResult
from ..stats.bias import FAIL, PASS, REF_SIDE, WARN

__all__ = [
    "bias_effects",
    "error_tails",
    "k_histogram",
    "tail_qq",
    "ulp_distances",
]

COLOURS = {"PASS": "#1a7f37", "WARN": "#bf8700", "FAIL": "#cf222e", "REF": "#54aeff", "GREY": "#6e7781"}
DPI = 100


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, facecolor="white")
    return buf.getvalue()


def _style(ax) -> None:
    ax.grid(True, color="#d0d7de", linewidth=0.6, alpha=0.8)
    ax.set_axisbelow(True)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


# --------------------------------------------------------------------------------------------
# Bias gate
# --------------------------------------------------------------------------------------------

_STAT_NAMES = {"raw": ("raw: mean(prod - ref)", "prod > ref", "prod < ref"),
               "sign_aligned": ("sign-aligned: mean((prod - ref)*sign(ref))", "|prod| > |ref|", "|prod| < |ref|")}


def bias_effects(result: BiasResult) -> bytes:
    """Per bucket and statistic: the signed effect in ULP with the +-c floor, and |z| with the z* line;
    buckets coloured by their verdict (PASS attributed to ref's own bias shown apart)."""
    from matplotlib.lines import Line2D

    tests = result.tests
    fig = _figure(12, 2.9 * max(1, len(tests)) + 0.4)
    axes = fig.subplots(max(1, len(tests)), 2, squeeze=False, width_ratios=(3, 2))
    thr = result.thresholds
    x = np.arange(result.buckets)
    few = result.buckets <= 24
    for row, t in enumerate(tests):
        title, up, down = _STAT_NAMES.get(t.statistic, (t.statistic, "+", "-"))
        signed = result.signed_effect_ulp(t)
        colour = np.full(x.shape, COLOURS["PASS"], dtype=object)
        colour[(t.verdict == PASS) & np.isin(t.reason, REF_SIDE)] = COLOURS["REF"]
        colour[t.verdict == WARN] = COLOURS["WARN"]
        colour[t.verdict == FAIL] = COLOURS["FAIL"]
        order = np.argsort(t.verdict, kind="stable")  # failing buckets drawn last, on top
        size = 28 if result.buckets <= 64 else 12 if result.buckets <= 1024 else 5

        ax = axes[row, 0]
        _style(ax)
        finite = np.isfinite(signed)
        o = order[finite[order]]
        ax.scatter(x[o], signed[o], c=list(colour[o]), s=size, linewidths=0)
        ax.axhline(0.0, color="#1f2328", linewidth=0.8)
        for sgn in (1, -1):
            ax.axhline(sgn * thr.ulp_floor, color=COLOURS["FAIL"], linestyle="--", linewidth=1)
        ax.text(1.0, thr.ulp_floor, f" +c = {thr.ulp_floor:g} ULP", transform=ax.get_yaxis_transform(),
                va="center", ha="left", fontsize=8, color=COLOURS["FAIL"], clip_on=False)
        ax.text(1.0, -thr.ulp_floor, " -c", transform=ax.get_yaxis_transform(),
                va="center", ha="left", fontsize=8, color=COLOURS["FAIL"], clip_on=False)
        lim = max(1.5 * thr.ulp_floor, float(np.nanmax(np.abs(signed))) * 1.1 if finite.any() else 0.0)
        ax.set_ylim(-lim, lim)
        ax.text(0.005, 0.97, f"▲ {up}", transform=ax.transAxes, va="top", fontsize=8, color="#57606a")
        ax.text(0.005, 0.03, f"▼ {down}", transform=ax.transAxes, va="bottom", fontsize=8, color="#57606a")
        ax.set_title(f"{title}: effect in ULP", fontsize=10, loc="left")
        ax.set_ylabel("mean / ULP", fontsize=9)

        ax = axes[row, 1]
        _style(ax)
        az = np.abs(t.z)
        cap = float(np.nanmax(az[np.isfinite(az)])) if np.isfinite(az).any() else result.critical_z()
        cap = max(cap, result.critical_z()) * 1.5
        inf = ~np.isfinite(az)
        shown = np.where(inf, cap, az)
        o = order[~inf[order]]
        ax.scatter(x[o], shown[o], c=list(colour[o]), s=size, linewidths=0)
        if inf.any():
            oi = order[inf[order]]
            ax.scatter(x[oi], shown[oi], c=list(colour[oi]), s=size * 2, marker="^", linewidths=0)
            ax.text(0.99, 0.97, f"▲ |z| = inf (zero variance): {int(inf.sum())}", transform=ax.transAxes,
                    ha="right", va="top", fontsize=8, color="#57606a")
        critical = result.critical_z()
        ax.axhline(critical, color=COLOURS["FAIL"], linestyle="--", linewidth=1)
        ax.text(1.0, critical, f" |z| = {critical:.3g}", transform=ax.get_yaxis_transform(), va="center",
                ha="left", fontsize=8, color=COLOURS["FAIL"], clip_on=False)
        ax.set_yscale("symlog", linthresh=1.0)
        ax.set_ylim(0, cap * 1.3)
        ax.set_title("|z| = sqrt(R) |mean| / s", fontsize=10, loc="left")
        for a in axes[row]:
            a.set_xlim(-0.5 if few else -0.01 * result.buckets, result.buckets - 0.5 if few else 1.01 * result.buckets)
            if few:
                a.set_xticks(x, result.bucket_labels, rotation=60, fontsize=7)
        axes[row, 0].set_xlabel("bucket", fontsize=9)
        axes[row, 1].set_xlabel("bucket", fontsize=9)

    handles = [Line2D([], [], marker="o", linestyle="", color=COLOURS[k], label=k) for k in ("PASS", "WARN", "FAIL")]
    handles.insert(1, Line2D([], [], marker="o", linestyle="", color=COLOURS["REF"], label="PASS: ref's own bias"))
    fig.legend(handles=handles, loc="outside upper right", ncols=4, fontsize=8, frameon=False)
    fig.suptitle(f"bias · {result.output}: {result.buckets} buckets, R = {result.replicates}, "
                 f"FAIL needs |z| > {result.critical_z():.3g} (z* = {thr.z_star:g} at this R), "
                 f"|mean|/s > {result.s_min:.3g}, |mean| > {thr.ulp_floor:g} ULP",
                 fontsize=10, x=0.01, ha="left")
    return _png(fig)


# --------------------------------------------------------------------------------------------
# Variance gate
# --------------------------------------------------------------------------------------------


def _mark_threshold(ax, u: float, label: str = "u", vertical: bool = True) -> None:
    if vertical:
        ax.axvline(u, color="#8250df", linestyle=":", linewidth=1.3)
        ax.text(u, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=8, color="#8250df")


def error_tails(result: VarianceResult) -> bytes:
    """Left: the distributions of prod's and ref's errors against the oracle (harm units). Right: each
    side's observed errors at their return periods (the i-th largest of N: once in N/i calls), the fitted
    GPD return-level curves out past the horizon, the return levels at T and the tail ratio's bound."""
    a, b = result.errors_in_units("prod"), result.errors_in_units("ref")
    unit = f"{result.harm_format} ULP" if result.harm_format else "harm units"
    fig = _figure(11, 3.6)
    left, right = fig.subplots(1, 2)
    for ax in (left, right):
        _style(ax)
    both = np.concatenate([a, b])
    positive = both[both > 0]
    if positive.size:
        lo, hi = float(positive.min()), float(positive.max())
        bins = np.geomspace(lo, hi, 40) if hi > 100 * lo else np.linspace(0.0, hi, 40)
        # light fills under step outlines, prod dashed: two identical histograms stay visible as two
        for x, name, colour, style in ((b, "ref", COLOURS["REF"], "-"), (a, "prod", "#0969da", "--")):
            left.hist(x, bins=bins, color=colour, alpha=0.25, histtype="stepfilled")
            left.hist(x, bins=bins, color=colour, histtype="step", linewidth=1.6, linestyle=style,
                      label=f"{name} (median {result.error_median(name):.3g})")
        if hi > 100 * lo:
            left.set_xscale("log")
        left.axvline(result.thresholds.slack, color=COLOURS["GREY"], linestyle=":", linewidth=1)
        left.legend(fontsize=8, frameon=False)
    closer = result.prod_closer_share
    left.set_title("errors per replicate" + (f"\nprod closer in {100 * closer:.3g}%" if closer is not None else ""),
                   fontsize=9, loc="left")
    left.set_xlabel(f"max |out - oracle| ({unit})", fontsize=9)
    left.set_ylabel("replicates", fontsize=9)

    iv = result.interval
    for name, colour in (("ref", COLOURS["REF"]), ("prod", "#0969da")):
        period, levels = result.observed_return_levels(name)
        right.plot(period, levels, "o", color=colour, markersize=3, label=f"{name} observed")
    if iv is not None:
        horizons, curves = result.return_level_curves()
        for name, shape, colour in (("prod", iv.shape_prod, "#0969da"), ("ref", iv.shape_ref, COLOURS["REF"])):
            right.plot(horizons, curves[name], "-", color=colour, linewidth=1.3,
                       label=f"{name} GPD fit (xi = {shape:.2g})")
        right.axvline(iv.horizon, color="#8250df", linestyle=":", linewidth=1.3)
        right.plot([iv.horizon] * 2, [iv.return_level_prod, iv.return_level_ref], "D", color="#8250df", markersize=5)
        right.set_title(f"return levels at T = {iv.horizon:.3g}\nA_T = {iv.estimate:.3g}, U = {iv.upper:.3g} "
                        f"({iv.model})", fontsize=9, loc="left")
    else:
        right.set_title("no tail fit:\n" + textwrap.shorten(result.reason, 70, placeholder=" ..."), fontsize=9,
                        loc="left")
    right.set_xscale("log")
    right.set_xlabel("calls (return period)", fontsize=9)
    right.set_ylabel(f"error ({unit})", fontsize=9)
    right.legend(fontsize=8, frameon=False, loc="upper left")
    fig.suptitle(f"variance · {result.output}: prod's and ref's error tails against the float64 oracle", fontsize=10,
                 x=0.01, ha="left")
    return _png(fig)


def tail_qq(result: VarianceResult) -> bytes:
    """Each side's exceedances over its threshold against the quantiles of its fitted GPD."""
    iv = result.interval
    if iv is None:
        raise ValueError(f"variance result for {result.output!r} has no tail fit: {result.reason}")
    fig = _figure(8, 3.6)
    axes = fig.subplots(1, 2)
    for ax, side, u, shape, scale in ((axes[0], "prod", iv.threshold_prod, iv.shape_prod, iv.scale_prod),
                                      (axes[1], "ref", iv.threshold_ref, iv.shape_ref, iv.scale_ref)):
        _style(ax)
        model, y = result.tail_qq(side)
        top = float(max(model.max(), y.max())) * 1.05 if y.size else 1.0
        ax.plot([0, top], [0, top], "--", color=COLOURS["GREY"], linewidth=1)
        ax.plot(model, y, "o", color="#0969da" if side == "prod" else COLOURS["REF"], markersize=3.5)
        ax.set_xlim(0, top)
        ax.set_ylim(0, top)
        ax.set_title(f"{side}: {y.size} exceedances over u = {u:.3g}", fontsize=9, loc="left")
        ax.set_xlabel(f"GPD quantile (xi = {shape:.3g}, sigma = {scale:.3g})", fontsize=9)
        ax.set_ylabel("observed excess", fontsize=9)
    return _png(fig)


def k_histogram(result: VarianceResult) -> bytes:
    """Counts of K = 0, K = inf and undefined K beside the histogram of the positive finite K, with the
    tail threshold u and the WARN / FAIL lines."""
    positive = result.positive_amplification()
    fig = _figure(11, 3.2)
    left, right = fig.subplots(1, 2, width_ratios=(1, 4))
    _style(left)
    names = ["K = 0", "K > 0", "K = inf"] + (["undefined"] if result.n_undefined else [])
    values = [result.n_zero, result.n_positive, result.n_infinite] + ([result.n_undefined] if result.n_undefined else [])
    colours = [COLOURS["PASS"], "#0969da", COLOURS["FAIL"], COLOURS["WARN"]][: len(names)]
    bars = left.bar(names, values, color=colours)
    for b, v in zip(bars, values):
        left.text(b.get_x() + b.get_width() / 2, v, f"{v}", ha="center", va="bottom", fontsize=8)
    left.set_ylim(0, max(values) * 1.18 + 1)
    left.set_title(f"{result.replicates} replicates", fontsize=10, loc="left")
    left.tick_params(axis="x", labelsize=8)

    _style(right)
    if positive.size == 0:
        right.text(0.5, 0.5, "no positive finite K to histogram", ha="center", va="center", transform=right.transAxes,
                   fontsize=11, color="#57606a")
        right.set_xticks([])
        right.set_yticks([])
    else:
        lo, hi = float(positive.min()), float(positive.max())
        logx = hi / lo > 100
        bins = np.geomspace(lo, hi, 40) if logx and hi > lo else 40
        right.hist(positive, bins=bins, color="#0969da", alpha=0.85)
        if logx:
            right.set_xscale("log")
        if result.tail is not None:
            _mark_threshold(right, result.tail.threshold, f"u = {result.tail.threshold:.3g}")
        th = result.thresholds
        for level, name in ((th.warn, "WARN"), (th.fail, "FAIL")):
            if level <= hi * 1.5:
                right.axvline(level, color=COLOURS[name], linestyle="--", linewidth=1)
                right.text(level, 0.9, f" {name} {level:g}", transform=right.get_xaxis_transform(), fontsize=8,
                           color=COLOURS[name])
        right.set_xlabel("K = max(0, (E_prod - eps) / E_ref)", fontsize=9)
        right.set_ylabel("replicates", fontsize=9)
    note = f"positive finite K (zeros: {result.n_zero} not shown"
    note += f"; K = inf: {result.n_infinite})" if result.n_infinite else ")"
    right.set_title(note, fontsize=10, loc="left")
    fig.suptitle(f"variance · {result.output}: amplification ratio K per replicate", fontsize=10, x=0.01, ha="left")
    return _png(fig)


# --------------------------------------------------------------------------------------------
# L0, the bitwise layer
# --------------------------------------------------------------------------------------------

def ulp_distances(result: BitwiseResult) -> bytes:
    """Share of the elements per ULP-distance bin of prod against ref (log scale: the far bins are
    small but telling); bin 0 = bitwise equal."""
    counts = np.asarray(result.ulp_histogram, np.float64)
    last = int(np.nonzero(counts)[0][-1]) if counts.any() else 0
    shown = max(last + 1, 3)  # empty bins past the farthest distance are left out
    share = counts[:shown] / max(counts.sum(), 1.0)
    fig = _figure(8, 2.8)
    ax = fig.subplots()
    _style(ax)
    colours = [COLOURS["PASS"]] + ["#0969da"] * (shown - 1)
    if shown == len(counts):  # the non-finite bin
        colours[-1] = COLOURS["FAIL"]
    ax.bar(range(shown), np.where(share > 0, share, np.nan), color=colours)
    ax.set_yscale("log")
    ax.set_ylim(float(share[share > 0].min()) / 5 if (share > 0).any() else 1e-6, 1.5)
    ax.set_xticks(range(shown), result.bin_labels[:shown], rotation=45, ha="right", fontsize=8)
    ax.set_xlabel("ULP distance |key(prod) - key(ref)| in " + result.dtype, fontsize=9)
    ax.set_ylabel("share of elements", fontsize=9)
    ax.set_title(f"L0 · {result.output}: {result.elements:,} elements over {result.replicates} replicates; "
                 f"{result.classification}", fontsize=10, loc="left")
    return _png(fig)
