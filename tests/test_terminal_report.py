"""The terminal report's reading aids: L0's distances across zero, and the summary of a multi-case run."""

import numpy as np
from rich.console import Console

from kcert.certificate import BitwiseResult
from kcert.report.terminal import render_summary, ulp_histogram_text, zero_crossing_bins
from kcert.stats.bitwise import BIN_LABELS, N_BINS, ulp_histogram


def bf16_bits(values) -> np.ndarray:
    import torch

    return torch.tensor(values, dtype=torch.float32).bfloat16().view(torch.int16).numpy()


def test_sign_flips_around_zero_are_reported_apart_from_large_distances():
    ref = [1.0, 0.5, 1e-3, -2e-4, 0.0, 3.0]
    prod = [1.0, 0.5, -1e-3, 2e-4, 1e-2, 3.0 * 1.01]  # two sign flips, a zero against a value, a 1% error
    counts = ulp_histogram(bf16_bits(ref), bf16_bits(prod))
    labels = [BIN_LABELS[k] for k, c in enumerate(counts) if c]
    assert any(int(label.split("-")[0]) > 8192 for label in labels if "-" in label)  # before: e.g. "16385-32768"
    text = ulp_histogram_text(BitwiseResult("out", "bfloat16", 1, counts, "x"))
    assert "across or at zero: 50%" in text and "3 elements beyond 8192 ULPs" in text
    shown = text.split(";")[0]
    assert "16385" not in shown and "8193" not in shown  # the far bins are not shown as distances
    assert shown == "0: 33.3% · 2: 16.7%"  # the 1% error (2 bf16 ULPs at 3.0) stays a distance


def test_only_formats_where_the_far_bins_are_unambiguous_are_relabelled():
    assert [BIN_LABELS[k] for k in zero_crossing_bins("bfloat16", N_BINS)] == \
        ["8193-16384", "16385-32768", "32769-65536", "> 65536"]
    assert list(zero_crossing_bins("float32", N_BINS)) == []  # float32 distances above 65536 can be errors
    counts = np.zeros(N_BINS, np.int64)
    counts[0], counts[16] = 9, 1
    assert ulp_histogram_text(BitwiseResult("out", "float32", 1, counts, "x")) == "0: 90% · 16385-32768: 10%"


def test_the_summary_names_every_case_and_the_deciders():
    console = Console(record=True, width=200)
    render_summary([("a", "case 'a', replicate 0: prod raised ValueError: boom")], 2, {"a"}, "an error", console)
    text = console.export_text()
    assert "kcert: 1 cases · exit 2 (an error)" in text and "prod raised ValueError: boom" in text
    assert "<- decides exit 2" in text and "case 'a', replicate" not in text


def test_the_variance_block_states_the_observed_range_and_what_r_cannot_see():
    from kcert.gates.variance import judge_errors
    from kcert.report import terminal
    from kcert.stats.thresholds import VarianceThresholds

    rng = np.random.default_rng(0)
    v = judge_errors(40 * np.abs(rng.standard_normal(512)), 40 * np.abs(rng.standard_normal(512)), 6.25e5,
                     VarianceThresholds(bootstrap=2))
    console = Console(record=True, width=250)
    console.print(terminal._variance(v))
    text = console.export_text()
    assert "one shape per side: U = " in text and "observed: max prod" in text
    assert f"rare events: a defect on fewer than {v.rare_events.rate:.3g}" in text and "512 replicates" in text
