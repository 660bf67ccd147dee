"""What :func:`kcert.certify_model` returns: one row per certified module and direction, the modules that
have no match in the other model, and the localized module (torch-free)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..certificate import Certificate
from ..diagnostics import Code, raised
from ..results.gates import ALGEBRA
from ..stats.bias import WARN as BUCKET_WARN
from ..verdict import Verdict

DIRECTIONS = ("forward", "backward", "end to end")


@dataclass(frozen=True)
class ModuleRow:
    """One module certified in one direction on ref's recorded inputs (or the whole model, end to end).

    Attributes
    ----------
    module : str
        The qualified name ("" for the end-to-end row's model).
    kind, prod_kind : str
        ref's and prod's class names.
    direction : str
        "forward", "backward" (the gradients of the module's activations and parameters) or "end to end".
    order : int
        The module's place in ref's execution order (first call).
    certificate : kcert.Certificate or None
        None when the row is skipped (``skipped_reason`` says why).
    notes : tuple of str
        What the row leaves out (outputs of one model only, vanishing gradients).
    prod_module : str or None
        prod's own qualified name of the module when ``rename`` gave it ref's (``module``), else None.
    went_on_from : int or None
        The replicates of the last planned look when the row, held back there for lack of evidence, went on to
        ``certify_model``'s settle cap (docs/model.md, "Rows held back go on"); else None.
    """

    module: str
    kind: str
    prod_kind: str
    direction: str
    order: int
    certificate: Certificate | None = field(default=None, repr=False)
    skipped_reason: str | None = None
    notes: tuple[str, ...] = ()
    prod_module: str | None = None
    went_on_from: int | None = None

    @property
    def verdict(self) -> Verdict:
        return Verdict.SKIPPED if self.certificate is None else self.certificate.verdict

    @property
    def deciding_gate(self) -> str | None:
        """The gate that decided a row that does not PASS (the first with the row's verdict), else None."""
        cert = self.certificate
        if cert is None or cert.verdict is Verdict.PASS:
            return None
        for gate, verdict in cert.gates.items():
            if verdict is cert.verdict:
                return gate
        worst = Verdict.worst(cert.gates.values())
        return next((g for g, v in cert.gates.items() if v is worst), None)

    @property
    def figure(self) -> str:
        """The row's deciding figure in a few words: the largest significant bias effect in ULP (of the buckets the
        bias gate flagged, else of those significant; none when no bucket is) and the variance bound U."""
        cert = self.certificate
        if cert is None:
            return self.skipped_reason or "skipped"
        parts = []
        gate = self.deciding_gate
        if gate == ALGEBRA.name:
            reason = cert.algebra.reason
            parts.append("algebra: " + (reason if len(reason) <= 60 else reason[:57] + "..."))
        effect = significant_bias(cert)
        if effect is not None:
            ratio, swap_p = against_ref_profile(cert), profile_swap_evidence(cert)
            against = [] if ratio is None else [f"{ratio:.2g}x ref's profile"]
            if ratio is not None and within_ref_profile(cert):
                against[0] = "within ref's profile: " + against[0]
            against += [] if swap_p is None else [f"swaps p {swap_p:.2g}"]
            parts.append(f"bias {effect:.2g} ULP" + (f" ({', '.join(against)})" if against else ""))
        u = variance_bound(cert)
        if u is not None:
            held, undecided = variance_held_back(cert), variance_undecided(cert)
            parts.append(f"U {u:.3g}" + (f" (held back at {held} replicates: more decide)" if held is not None else
                                         f" (undecided at {undecided} replicates: more decide)"
                                         if undecided is not None else ""))
        if self.went_on_from is not None:
            parts.append(f"went on from {self.went_on_from} to {cert.provenance.replicates} replicates")
        return ", ".join(parts) if parts else cert.verdict.value

    @property
    def label(self) -> str:
        return self.module or "(model)"

    @property
    def names(self) -> str:
        """The label, with prod's own name of the module when a rename matched it (``a.b (prod: x.y)``)."""
        return self.label if self.prod_module is None else f"{self.label} (prod: {self.prod_module})"


def bias_effect(cert: Certificate) -> float | None:
    """The largest |effect| in ULP over the bias gate's buckets, statistics and outputs (None when none was
    measured: no bucket had a finite effect)."""
    effects = [np.abs(t.effect_ulp) for b in cert.bias for t in b.tests]
    finite = [e[np.isfinite(e)] for e in effects]
    values = [float(e.max()) for e in finite if e.size]
    return max(values) if values else None


def significant_bias(cert: Certificate) -> float | None:
    """The largest |effect| in ULP over the buckets the bias gate flagged (WARN or FAIL), else over its
    significant buckets (a bias judged ref's), else None: what a row's figure quotes. The largest over every
    bucket (:func:`bias_effect`) includes noise: a fused RMSNorm's row read 0.33 ULP where the two buckets that
    made it WARN were at 0.09 and 0.07 ULP."""
    for select in (lambda t: t.verdict >= BUCKET_WARN, lambda t: t.significant):
        values = [np.abs(t.effect_ulp[select(t) & np.isfinite(t.effect_ulp)]) for b in cert.bias for t in b.tests]
        values = [float(v.max()) for v in values if v.size]
        if values:
            return max(values)
    return None


def against_ref_profile(cert: Certificate) -> float | None:
    """The largest ratio, over the buckets the bucket-wise rule FAILed (the profile rule may have judged them WARN),
    of prod's own bias against the oracle to ref's own bias at the same rank of its profile on that output
    (``BiasResult.ref_profile``); None when no bucket FAILs bucket-wise or the run had no oracle. At or under 1, ref
    carries biases as large as every FAILing one elsewhere on the output (docs/method.md, "The working precision's
    own bias")."""
    found = [b.ref_profile.highest_ratio for b in cert.bias
             if b.ref_profile is not None and b.ref_profile.highest_ratio is not None]
    return max(found) if found else None


def within_ref_profile(cert: Certificate) -> bool:
    """Whether the profile rule judged every bucket-wise bias FAIL of the row within ref's own bias profile (so the
    bias gate WARNs where the bucket-wise rule FAILed); False when no bucket FAILed bucket-wise."""
    found = [b.ref_profile for b in cert.bias if b.ref_profile is not None]
    return bool(found) and all(e.within for e in found)


def profile_swap_evidence(cert: Certificate) -> float | None:
    """The smallest p, over the outputs and statistics where a bucket FAILs, of the swap test that prod's own-bias
    profile is more biased than ref's (``BiasResult.ref_profile``); None as :func:`against_ref_profile`."""
    found = [p for b in cert.bias if b.ref_profile is not None for _, p in b.ref_profile.swap_p if not np.isnan(p)]
    return min(found) if found else None


def variance_bound(cert: Certificate) -> float | None:
    """The largest upper bound U of the tail ratio over the outputs (None when the gate did not run)."""
    found = [v.upper_bound for v in cert.variance if v.upper_bound is not None]
    return max(found) if found else None


def variance_held_back(cert: Certificate) -> int | None:
    """The replicates of the last look when the variance gate WARNs only for lack of evidence: on every WARNing
    output U is at or under the PASS line and the PASS is held back because a heavier tail shape for prod is not
    excluded yet, which more replicates settle (docs/method.md, Gate 3, "Stopping"), the observed errors not
    above the line (that is a finding to look at, not a lack of data); else None. The figure says so, since
    "U 1.08" beside a WARN reads as a contradiction."""
    warned = [v for v in cert.variance if v.verdict is Verdict.WARN]
    held = [v for v in warned if v.interval is not None and v.interval.upper <= v.thresholds.warn
            and raised(v.diagnostics, Code.SHAPE_DIFFERENCE_NOT_EXCLUDED)
            and not raised(v.diagnostics, Code.OBSERVED_ABOVE_LINE)]
    return max(v.replicates for v in held) if held and len(held) == len(warned) else None


def variance_undecided(cert: Certificate) -> int | None:
    """The replicates of the last look when the variance gate WARNs only because its looks ran out before it
    decided (:func:`kcert.gates.variance.undecided_at`); else None. It includes :func:`variance_held_back`'s rows,
    and those whose U is above the line while the interval still reaches under it; a WARN whose interval lies
    between the lines is a finding more replicates would not change."""
    from ..gates.variance import undecided_at

    return undecided_at(cert.variance)


def _ancestor(parent: str, child: str) -> bool:
    return parent == "" and child != "" or child.startswith(parent + ".")


@dataclass(frozen=True)
class ModelCertificate:
    """The certificate of a model pair: module rows in execution order (each module's forward row, then
    its backward row), then the end-to-end row; the modules of one model with no match in the other.

    Attributes
    ----------
    name : str
    rows : tuple of ModuleRow
    unmatched : tuple of (str, str)
        (model, qualified name) of every module with no match: model is "ref" or "prod".
    selection : str
        The selection in words.
    provenance : dict
        seed, replicates, dtype, wall time, the command.
    warnings : tuple of str
        What makes the rows' evidence weaker than they say (prod's parameters differ from ref's; ref launching
        Triton kernels: a patch that reached both models); any holds the verdict at WARN or worse.

    Examples
    --------
    >>> from kcert.model.results import ModelCertificate, ModuleRow
    >>> rows = (ModuleRow("layers.0", "Block", "Block", "forward", 0, skipped_reason="no floating output"),)
    >>> cert = ModelCertificate("tiny", rows, unmatched=(("prod", "layers.0.extra"),))
    >>> cert.verdict.value, cert.first_failure  # an unmatched module holds the verdict at WARN
    ('WARN', None)
    """

    name: str
    rows: tuple[ModuleRow, ...]
    unmatched: tuple[tuple[str, str], ...] = ()
    selection: str = ""
    provenance: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    @property
    def verdict(self) -> Verdict:
        """The worst row; a model with unmatched modules or a warning is at least WARN (not everything was
        certified as the rows say)."""
        worst = Verdict.worst([r.verdict for r in self.rows]) if self.rows else Verdict.SKIPPED
        if (self.unmatched or self.warnings) and worst.severity < Verdict.WARN.severity:
            return Verdict.WARN
        return worst

    @property
    def failures(self) -> tuple[ModuleRow, ...]:
        return tuple(r for r in self.rows if r.verdict is Verdict.FAIL)

    def failing_descendants(self, row: ModuleRow) -> tuple[str, ...]:
        """The selected descendants of ``row``'s module that FAIL in the same direction (an end-to-end row:
        every module FAILing in either direction)."""
        return tuple(r.module for r in self.failures if _ancestor(row.module, r.module)
                     and (r.direction == row.direction or row.direction == "end to end"))

    @property
    def first_failure(self) -> ModuleRow | None:
        """The localized row: the first FAIL module row in execution order with no FAILing selected descendant (a
        decoder layer that FAILs because its attention FAILs is not the culprit; the attention is). None when no
        module row FAILs, even if the end-to-end row does (nothing is localized then)."""
        for row in self.failures:
            if row.direction != "end to end" and not self.failing_descendants(row):
                return row
        return None

    def row(self, module: str, direction: str = "forward") -> ModuleRow:
        for r in self.rows:
            if r.module == module and r.direction == direction:
                return r
        raise KeyError(f"no {direction} row for module {module!r}")
