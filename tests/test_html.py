"""The HTML report: one self-contained page with verdicts, diagnosis, bias and tail plots, provenance."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

import kcert
from kcert import demo
from kcert.certificate import VarianceThresholds
from kcert.report import plots
from kcert.report.html import render_html

DATA_URI = re.compile(r'src="data:image/png;base64,([A-Za-z0-9+/=]+)"')


@pytest.fixture(scope="module")
def certs():
    # the correct rewrite: prod within one harm unit everywhere (no tail fit); the bf16 gain: bias FAIL
    # and errors beyond the unit, so both tails are fitted
    fast = VarianceThresholds(bootstrap=200)
    return [kcert.certify(demo.correct, replicates=128, max_replicates=128, seed=0, variance_thresholds=fast),
            kcert.certify(demo.bf16_gain, replicates=256, max_replicates=256, seed=0, variance_thresholds=fast)]


@pytest.fixture(scope="module")
def page(certs):
    return render_html(certs)


def decode(png: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64)


def test_sections_in_order(certs, page):
    assert page.startswith("<!doctype html>") and "<html>" in page
    good, bad = certs
    assert bad.verdict is kcert.Verdict.FAIL and bad.variance[0].interval is not None
    assert good.variance[0].interval is None
    for name in (good.case, bad.case):
        assert name in page
    # several cases: a summary linking to each case's section opens the page
    summary, first_case, second_case = (page.index(s) for s in ("<h2>summary</h2>", "<h2 id='case-1'>",
                                                               "<h2 id='case-2'>"))
    assert summary < first_case < second_case and f"href='#case-2'>{bad.case}</a>" in page[summary:first_case]
    part = page[second_case:]
    order = ["<th>gate</th>", "<h3>diagnostics</h3>", "<h4>bias gate", "buckets at WARN or above",
             "<h4>variance gate", 'alt="error tails', "prod closer to the oracle in", 'alt="QQ plots"',
             "the report's per-replicate ratio K", "<h3>probe and provenance</h3>", "reproduce:"]
    positions = [part.index(s) for s in order]
    assert positions == sorted(positions), order
    # the bias FAIL's buckets are set against ref's own profile: the column, and the diagnostic in the table
    ratios = [f.ref_profile_ratio for f in bad.bias[0].findings()]
    assert "<th>x ref@rank</th>" in part and "fail_against_ref_profile" in part and min(ratios) > 10
    # the case without a tail fit says why instead of plotting one
    first = page[first_case:second_case]
    assert "no amplification to bound" in first or "nothing to extrapolate" in first
    assert 'alt="QQ plots"' not in first
    # every variance section states what its replicates cannot see, and the observed range
    assert page.count("<th>rare events</th>") == 2 and page.count("<th>observed range</th>") == 2


def test_embedded_pngs_decode_and_are_not_blank(page):
    images = DATA_URI.findall(page)
    # correct: bias + error tails + K histogram + L0 ULP distances; bf16_gain: the same + the tails' QQ plots
    assert len(images) == 9
    for data in images:
        pixels = decode(base64.b64decode(data))
        assert pixels.shape[0] > 200 and pixels.shape[1] > 400
        assert pixels.std() > 10, "blank image"
        assert (pixels < 128).mean() > 0.005  # something is drawn in ink


def test_self_contained(page):
    for m in re.finditer(r'(?:src|href)\s*=\s*["\']?([^"\' >]+)', page, flags=re.I):
        assert m.group(1).startswith(("data:", "#")), m.group(0)  # embedded, or a link within the page
    assert not re.search(r"(?:src|href)\s*=\s*[\"']?(?:https?:)?//", page, flags=re.I)
    assert "<link" not in page and "<script" not in page


def test_plots_are_png_and_need_a_tail(certs):
    good, bad = certs
    assert plots.bias_effects(bad.bias[0]).startswith(b"\x89PNG")
    for v in (good.variance[0], bad.variance[0]):
        assert plots.k_histogram(v).startswith(b"\x89PNG") and plots.error_tails(v).startswith(b"\x89PNG")
    assert plots.tail_qq(bad.variance[0]).startswith(b"\x89PNG")
    with pytest.raises(ValueError, match="no tail fit"):
        plots.tail_qq(good.variance[0])


def test_the_tail_figures_numbers_come_from_the_result(certs):
    # what error_tails and tail_qq draw is the result's: each side's curve passes through the interval's
    # return level at T, its QQ points are its exceedances, and the observed levels are its largest errors
    good, bad = certs
    v, iv = bad.variance[0], bad.variance[0].interval
    horizons, curves = v.return_level_curves()
    for side, level, count in (("prod", iv.return_level_prod, iv.exceedances_prod),
                               ("ref", iv.return_level_ref, iv.exceedances_ref)):
        assert np.all(np.diff(curves[side]) >= 0)
        at_t = np.interp(np.log(iv.horizon), np.log(horizons), curves[side])
        assert at_t == pytest.approx(level, rel=0.02)
        model, excess = v.tail_qq(side)
        assert excess.size == model.size == count and np.all(np.diff(excess) >= 0) and excess[0] >= 0
        period, largest = v.observed_return_levels(side)
        assert largest[0] == v.errors_in_units(side).max() and period[0] == v.errors_in_units(side).size
    assert curves["prod"][-1] > curves["ref"][-1]  # the bf16 gain's tail outgrows ref's
    assert good.variance[0].return_level_curves() is None
    with pytest.raises(ValueError, match="no tail fit"):
        good.variance[0].tail_qq("prod")


def test_import_kcert_does_not_import_matplotlib():
    code = "import kcert, kcert.report.html, sys; assert 'matplotlib' not in sys.modules, 'matplotlib loaded'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_plots_leave_pyplot_alone():
    code = ("import sys, numpy as np\n"
            "from kcert.stats.tail import fit_tail\n"
            "from kcert.report import plots\n"
            "assert plots._png(plots._figure(2, 2)).startswith(b'\\x89PNG')\n"
            "assert 'matplotlib.pyplot' not in sys.modules, 'pyplot imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def _chromium() -> str | None:
    if os.access("/usr/bin/chromium", os.X_OK):
        return "/usr/bin/chromium"
    return shutil.which("chromium")


def test_renders_in_a_real_browser(page, tmp_path):
    browser = _chromium()
    if browser is None:
        pytest.skip("chromium not installed (/usr/bin/chromium or chromium on PATH): "
                    "apt-get install -y chromium to run the real-browser check")
    html_file = tmp_path / "report.html"
    html_file.write_text(page, encoding="utf-8")
    shot = tmp_path / "shot.png"
    cmd = [browser, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
           "--disable-background-networking", "--disable-component-update", "--disable-sync",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}", "--window-size=1400,4000",
           html_file.as_uri()]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True)
    pixels = np.asarray(Image.open(shot).convert("RGB"), dtype=np.float64)
    assert pixels.shape[:2] == (4000, 1400)
    grey = pixels.mean(axis=2)
    assert grey.std() > 10, "blank screenshot"
    # images are painted: the bias plot of the first case sits in the first 2000 px and holds
    # coloured verdict markers (PASS green) and ink, not a broken-image placeholder
    r, g, b = pixels[..., 0], pixels[..., 1], pixels[..., 2]
    green = (g > r + 60) & (g > b + 30)
    assert green.sum() > 2000
    rows_with_ink = np.nonzero((grey < 200).sum(axis=1) > 50)[0]
    assert rows_with_ink.size > 400
    # the second case's FAIL markers (red) are painted too
    red = (r > g + 80) & (r > b + 60)
    assert red[2000:].sum() > 500
