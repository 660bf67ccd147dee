"""Layering: statistics never import torch."""

import subprocess
import sys

import kcert


def test_stats_and_verdicts_import_without_torch():
    code = (
        "import sys\n"
        "import kcert, kcert.stats.ulp, kcert.stats.bias, kcert.stats.tail, kcert.stats.moments, "
        "kcert.stats.power, kcert.stats.amplification, kcert.verdict, kcert.diagnostics\n"
        "assert 'torch' not in sys.modules, 'torch was imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_public_contract_names_exist():
    for name in ("Case", "Gaussian", "Fixed", "Axes", "Labels", "certify", "Verdict", "Certificate"):
        assert getattr(kcert, name) is not None
    assert {v.value for v in kcert.Verdict} == {"PASS", "WARN", "FAIL", "SKIPPED"}
    assert issubclass(kcert.ParameterError, kcert.KcertError) and issubclass(kcert.ParameterError, ValueError)
