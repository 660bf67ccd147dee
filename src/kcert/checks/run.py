"""The checks :func:`kcert.certify` runs after the gates, attached to the certificate."""

from __future__ import annotations

from dataclasses import replace

from ..case import Case
from ..certificate import Certificate


def attach(cert: Certificate, case: Case, weights, seed: int, device, horizon: float, bias_thresholds,
           variance_thresholds, *, adequacy: bool, peer_rules: bool, shapes: bool | None,
           accept_untested_algebra: bool) -> Certificate:
    """``cert`` with the peer rules (``peer_rules``), the shape sweep (``shapes``: None follows
    ``case.shapes``, False skips it, True derives shapes when the case declares none) and the adequacy
    check (``adequacy``) attached."""
    found = {}
    if peer_rules:
        from .peers import run_peer_rules

        found["peer_rules"] = run_peer_rules(case, weights, seed, device)
    if shapes is not False:
        from .sweep import run_sweep

        swept = replace(case, shapes=True) if shapes is True and case.shapes is None else case
        found["shape_sweep"] = run_sweep(swept, seed, device, horizon, bias_thresholds, variance_thresholds,
                                         accept_untested_algebra)
    if adequacy:
        from .adequacy import run_adequacy

        found["adequacy"] = run_adequacy(case, weights, seed, device, horizon, bias_thresholds, variance_thresholds)
    return replace(cert, **found) if found else cert
