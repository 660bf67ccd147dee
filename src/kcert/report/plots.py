"""Figures of the HTML report: each a plain function that reads result objects and returns PNG bytes.

Plots only read results (DESIGN.md section 3). Quantities the diagnostics need beyond what a result
stores (fits at other thresholds, mean excess, GPD quantiles, return-level bands) come from
:mod:`kcert.stats.tail`, computed on the result's stored K sample. matplotlib is imported lazily, and
through :class:`matplotlib.figure.Figure` with the Agg canvas only: no pyplot, no global state.
"""

from __future__ import annotations

import io

import numpy as np

from ..certificate import BiasResult, BitwiseResult, VarianceResult
from ..stats import tail as tailstats
from ..stats.bias import ATTRIBUTED_TO_REF, FAIL, PASS, WARN

__all__ = [
    "bias_effects",
    "k_histogram",
    "mean_residual_life",
    "qq",
    "return_levels",
    "threshold_stability",
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


def _tail_of(result: VarianceResult) -> tailstats.TailFitResult:
    if result.tail is None:
        raise ValueError(f"variance result for {result.output!r} has no tail fit: {result.reason}")
    return result.tail


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
        with np.errstate(divide="ignore", invalid="ignore"):
            signed = np.where(result.ulp > 0, t.mean / result.ulp, np.nan)
        colour = np.full(x.shape, COLOURS["PASS"], dtype=object)
        colour[(t.verdict == PASS) & (t.reason == ATTRIBUTED_TO_REF)] = COLOURS["REF"]
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
        cap = float(np.nanmax(az[np.isfinite(az)])) if np.isfinite(az).any() else thr.z_star
        cap = max(cap, thr.z_star) * 1.5
        inf = ~np.isfinite(az)
        shown = np.where(inf, cap, az)
        o = order[~inf[order]]
        ax.scatter(x[o], shown[o], c=list(colour[o]), s=size, linewidths=0)
        if inf.any():
            oi = order[inf[order]]
            ax.scatter(x[oi], shown[oi], c=list(colour[oi]), s=size * 2, marker="^", linewidths=0)
            ax.text(0.99, 0.97, f"▲ |z| = inf (zero variance): {int(inf.sum())}", transform=ax.transAxes,
                    ha="right", va="top", fontsize=8, color="#57606a")
        ax.axhline(thr.z_star, color=COLOURS["FAIL"], linestyle="--", linewidth=1)
        ax.text(1.0, thr.z_star, f" z* = {thr.z_star:g}", transform=ax.get_yaxis_transform(), va="center",
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
                 f"FAIL needs |z| > {thr.z_star:g}, |mean|/s > {result.s_min:.3g}, |mean| > {thr.ulp_floor:g} ULP",
                 fontsize=10, x=0.01, ha="left")
    return _png(fig)


# --------------------------------------------------------------------------------------------
# Variance gate
# --------------------------------------------------------------------------------------------


def _mark_threshold(ax, u: float, label: str = "u", vertical: bool = True) -> None:
    if vertical:
        ax.axvline(u, color="#8250df", linestyle=":", linewidth=1.3)
        ax.text(u, 0.98, f" {label}", transform=ax.get_xaxis_transform(), va="top", fontsize=8, color="#8250df")


def k_histogram(result: VarianceResult) -> bytes:
    """Counts of K = 0, K = inf and undefined K beside the histogram of the positive finite K, with the
    tail threshold u and the WARN / FAIL lines."""
    k = result.amplification
    positive = k[np.isfinite(k) & (k > 0)]
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


def _stability_quantiles(t: tailstats.TailFitResult) -> np.ndarray:
    n = t.n_positive
    top = min(0.98, 1.0 - 10.0 / n) if n else t.threshold_quantile
    top = max(top, t.threshold_quantile)
    bottom = min(0.5, t.threshold_quantile)
    return np.unique(np.concatenate([np.linspace(bottom, top, 30), [t.threshold_quantile]]))


def threshold_stability(result: VarianceResult) -> bytes:
    """Fitted shape and modified scale (sigma - xi*u) as the threshold moves over quantiles of the
    positive K, with the chosen u marked: both flat above a threshold where the GPD holds."""
    t = _tail_of(result)
    st = tailstats.threshold_stability(t.sample, _stability_quantiles(t))
    fig = _figure(5.6, 4.2)
    top, bottom = fig.subplots(2, 1, sharex=True)
    ok = np.isfinite(st.shapes)
    for ax, y, name in ((top, st.shapes, "shape xi"), (bottom, st.modified_scales, "sigma - xi*u")):
        _style(ax)
        ax.plot(st.thresholds[ok], y[ok], "o-", color="#0969da", markersize=3.5, linewidth=1.2)
        ax.set_ylabel(name, fontsize=9)
        _mark_threshold(ax, t.threshold, f"u (q{t.threshold_quantile:.2f})" if ax is top else "")
    top.plot([t.threshold], [t.shape_unconstrained], "D", color="#8250df", markersize=6)
    top.axhline(0.0, color="#1f2328", linewidth=0.7)
    lo, hi = st.shape_bounds
    top.set_title(f"threshold stability (free fits, xi in [{lo:g}, {hi:g}]; verdict fit {t.shape_bounds})",
                  fontsize=9, loc="left")
    bottom.set_xlabel(f"threshold (q{st.quantiles[0]:.2f} to q{st.quantiles[-1]:.2f} of the positive K)", fontsize=9)
    return _png(fig)


def mean_residual_life(result: VarianceResult) -> bytes:
    """Mean excess e(u) = mean(K - u | K > u) against u with a 95% band: linear above a good threshold."""
    t = _tail_of(result)
    positive = np.sort(t.sample[t.sample > 0])
    top = positive[-6] if positive.size > 6 else positive[-1]
    me = tailstats.mean_excess(t.sample, np.linspace(0.0, float(top), 60))
    lo, hi = me.confidence_interval(0.95)
    fig = _figure(5.6, 4.2)
    ax = fig.subplots()
    _style(ax)
    ok = np.isfinite(me.mean_excess)
    band = ok & np.isfinite(lo)
    ax.fill_between(me.thresholds[band], lo[band], hi[band], color="#0969da", alpha=0.18, linewidth=0, label="95% band")
    ax.plot(me.thresholds[ok], me.mean_excess[ok], "-", color="#0969da", linewidth=1.5, label="mean excess")
    _mark_threshold(ax, t.threshold, f"u = {t.threshold:.3g}")
    ax.set_xlabel("threshold u", fontsize=9)
    ax.set_ylabel("mean(K - u | K > u)", fontsize=9)
    ax.set_title("mean residual life", fontsize=9, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="lower left")
    return _png(fig)


def qq(result: VarianceResult) -> bytes:
    """Exceedances K - u against the quantiles of the fitted GPD (the verdict's fit)."""
    t = _tail_of(result)
    model, empirical = t.qq_points()
    fig = _figure(5.6, 4.2)
    ax = fig.subplots()
    _style(ax)
    top = float(max(model.max(), empirical.max())) * 1.05
    ax.plot([0, top], [0, top], "--", color=COLOURS["GREY"], linewidth=1, label="y = x")
    ax.plot(model, empirical, "o", color="#0969da", markersize=4, label=f"{t.n_exceedances} exceedances")
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_xlabel(f"GPD quantile (xi = {t.shape:.3g}, sigma = {t.scale:.3g})", fontsize=9)
    ax.set_ylabel("observed K - u", fontsize=9)
    ax.set_title("QQ plot of the exceedances", fontsize=9, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="upper left")
    return _png(fig)


def return_levels(result: VarianceResult) -> bytes:
    """Return level r_T against the horizon T (log axis): the fit, the 95% bootstrap band, r_T + 3 se,
    the empirical return levels of the sample, the WARN / FAIL lines and the declared horizon."""
    t = _tail_of(result)
    start = 1.0 / t.exceedance_rate
    end = max(100.0 * t.horizon, 10.0 * start)
    horizons = np.geomspace(start, end, 80)
    fit, lo, hi, bound = t.return_level_curve(horizons)
    fig = _figure(5.6, 4.2)
    ax = fig.subplots()
    _style(ax)
    ax.fill_between(horizons, lo, hi, color="#0969da", alpha=0.18, linewidth=0, label="95% bootstrap band")
    ax.plot(horizons, fit, "-", color="#0969da", linewidth=1.5, label="r_T (fit)")
    ax.plot(horizons, bound, "--", color="#0550ae", linewidth=1, label="report's r_T + 3 se")
    k = np.sort(t.sample[t.sample > t.threshold])[::-1]
    period = t.n_total / np.arange(1, k.size + 1)  # the i-th largest K: once in n/i replicates
    ax.plot(period, k, "o", color="#1f2328", markersize=3, label="observed K")
    th = result.thresholds
    u_profile = result.upper_bound if result.upper_bound is not None else t.upper_bound
    top = max(float(np.nanmax(bound)), float(k.max()), u_profile if np.isfinite(u_profile) else 0.0)
    for level, name in ((th.warn, "WARN"), (th.fail, "FAIL")):
        if level <= 1.5 * top:
            ax.axhline(level, color=COLOURS[name], linestyle="--", linewidth=1)
            ax.text(0.99, level, f"{name} {level:g}", transform=ax.get_yaxis_transform(), va="bottom", ha="right",
                    fontsize=8, color=COLOURS[name])
    ax.axvline(t.horizon, color="#8250df", linestyle=":", linewidth=1.3)
    ax.text(t.horizon, 0.98, f" T = {t.horizon:.3g}", transform=ax.get_xaxis_transform(), fontsize=8, va="top",
            color="#8250df")
    if np.isfinite(u_profile):
        ax.plot([t.horizon], [u_profile], "D", color="#8250df", markersize=6, label="U (profile likelihood)")
    ax.set_xscale("log")
    ax.set_xlabel("horizon T (calls)", fontsize=9)
    ax.set_ylabel("return level of K", fontsize=9)
    ax.set_title(f"return level: U = {u_profile:.3g} at T = {t.horizon:.3g}", fontsize=9, loc="left")
    ax.legend(fontsize=8, frameon=False, loc="lower right")
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
