"""The checks :func:`kcert.certify` runs after the gates, attached to the certificate."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from ..case import Case
from ..certificate import Certificate

if TYPE_CHECKING:
    from ..certification import Settings


def attach(cert: Certificate, case: Case, weights, settings: Settings) -> Certificate:
    """``cert`` with the peer rules (``settings.peer_rules``), the shape sweep (``settings.shapes``:
    None follows ``case.shapes``, False skips it, True derives shapes when the case declares none) and
    the adequacy check (``settings.adequacy``) attached; ``settings`` are certify's, checked."""
    s = settings
    seed, device, horizon = s.seed, s.device, s.horizon
    bias_thresholds, variance_thresholds = s.bias_thresholds, s.variance_thresholds
    adequacy, peer_rules, shapes = s.adequacy, s.peer_rules, s.shapes
    found = {}
    if peer_rules:
        from .peers import run_peer_rules

        found["peer_rules"] = run_peer_rules(case, weights, seed, device)
    if shapes is not False:
        from .sweep import run_sweep

        swept = replace(case, shapes=True) if shapes is True and case.shapes is None else case
        found["shape_sweep"] = run_sweep(swept, seed, device, horizon, bias_thresholds, variance_thresholds,
                                         s.accept_untested_algebra)
    if adequacy:
        from .adequacy import run_adequacy

        found["adequacy"] = run_adequacy(case, weights, seed, device, horizon, bias_thresholds, variance_thresholds)
    return replace(cert, **found) if found else cert
