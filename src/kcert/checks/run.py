"""The checks :func:`kcert.certify` runs after the gates, attached to the certificate."""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import replace

from ..case import Case
from ..certificate import Certificate
from ..settings import Settings


def attach(cert: Certificate, case: Case, weights, settings: Settings, measure=None) -> Certificate:
    """``cert`` with the peer rules (``settings.peer_rules``), the shape sweep (``settings.shapes``:
    None follows ``case.shapes``, False skips it, True derives shapes when the case declares none) and
    the adequacy check (``settings.adequacy``) attached; ``settings`` are certify's, checked.
    ``measure(name)``: a context manager timing each check (certify's clock), or None."""
    s = settings
    measure = measure or (lambda name: nullcontext())
    found = {}
    if s.peer_rules:
        from .peers import run_peer_rules

        with measure("peer_rules"):
            found["peer_rules"] = run_peer_rules(case, weights, s.seed, s.device)
    if s.shapes is not False:
        from .sweep import run_sweep

        swept = replace(case, shapes=True) if s.shapes is True and case.shapes is None else case
        with measure("shape_sweep"):
            found["shape_sweep"] = run_sweep(swept, s)
    if s.adequacy:
        from .adequacy import run_adequacy

        with measure("adequacy"):
            found["adequacy"] = run_adequacy(case, weights, s)
    return replace(cert, **found) if found else cert
