"""The certificate: the gates' results, the checks around them and the provenance of the run."""

from __future__ import annotations

from dataclasses import dataclass, field


from ..verdict import Verdict, certificate_verdict
from .algebra import AlgebraResult
from .bias import BiasResult
from .bitwise import BitwiseResult
from .checks import AdequacyResult, PeerRulesResult, ShapeSweepResult
from .gates import BUILTIN, Gate, GateOutcome
from .variance import VarianceResult


@dataclass(frozen=True)
class OutputInfo:
    name: str
    shape: tuple[int, ...]
    dtype: str
    prod_dtype: str
    buckets: int
    bucketing: dict


@dataclass(frozen=True)
class Provenance:
    """Everything needed to reproduce a run and to know what it ran on."""

    seed: int
    replicates: int
    max_replicates: int
    horizon: float
    dtype: str
    device: str
    probes: dict
    command: str
    environment: dict
    date: str
    wall_time_s: float
    timings: dict = field(default_factory=dict)  # seconds per stage (replicates, algebra, bias, ...)
    resumed: dict | None = None  # a resumed run: its checkpoint and the replicates it took from it


@dataclass(frozen=True)
class Certificate:
    """What :func:`kcert.certify` returns: the three gates' results, the checks around them, and the
    provenance that reproduces the run. ``verdict`` combines them (docs/verdicts.md).

    Attributes
    ----------
    case, description : str
        The case's name and description.
    algebra : AlgebraResult
        Gate 1.
    bias, variance : tuple of BiasResult, tuple of VarianceResult
        Gates 2 and 3, one result per output (``variance`` is empty when no oracle could run:
        ``variance_skipped_reason`` says why).
    outputs : tuple of OutputInfo
        Each output's name, shape, dtypes, bucket count and bucket rule.
    provenance : Provenance
        Seed, replicates, horizon, dtype, device, probes, the reproduce command, the environment
        (hardware, library versions), date and wall time.
    notes : tuple of str
        What the run noted (a recompile, an early stop and why).
    bitwise : tuple of BitwiseResult
        L0, informational: ULP distances between prod and ref.
    adequacy, peer_rules, shape_sweep : optional
        The checks of docs/kernelbench.md, None when not run.
    extra_gates : tuple of GateOutcome
        Gates beyond the built-in three (:mod:`kcert.gates.registry`), their results and skip reasons;
        empty with the built-in gates alone.

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> cert.verdict.value
    'PASS'
    >>> cert.gates["bias"].value, cert.provenance.seed
    ('PASS', 0)
    >>> cert.provenance.command
    'kcert.certify(<half>, replicates=128, horizon=625000, seed=0, algebra_proof=False, peer_rules=False)'
    """

    case: str
    algebra: AlgebraResult
    bias: tuple[BiasResult, ...]
    variance: tuple[VarianceResult, ...]
    outputs: tuple[OutputInfo, ...]
    provenance: Provenance
    variance_skipped_reason: str | None = None
    description: str = ""
    notes: tuple[str, ...] = field(default_factory=tuple)
    bitwise: tuple[BitwiseResult, ...] = ()  # L0, informational: not part of gates or verdict
    # checks around the gates (kcert.checks, docs/kernelbench.md): None when not run
    adequacy: AdequacyResult | None = None  # fakes: one not FAILed (or a degenerate ref) holds a PASS at WARN
    peer_rules: PeerRulesResult | None = None  # informational: what the common rules say on the same samples
    shape_sweep: ShapeSweepResult | None = None  # a FAIL at a derived shape FAILs the certificate
    extra_gates: tuple[GateOutcome, ...] = ()  # gates beyond the built-in three (kcert.gates.registry)

    @property
    def gate_list(self) -> tuple[Gate, ...]:
        """The gates this certificate carries, in order: the built-in three, then ``extra_gates``."""
        return BUILTIN + tuple(o.gate for o in self.extra_gates)

    def gate(self, name: str) -> Gate:
        """The gate called ``name`` (KeyError: no such gate on this certificate)."""
        for g in self.gate_list:
            if g.name == name:
                return g
        raise KeyError(name)

    def gate_verdict(self, gate: str) -> Verdict:
        return self.gate(gate).verdict(self)

    @property
    def gates(self) -> dict[str, Verdict]:
        return {g.name: g.verdict(self) for g in self.gate_list}

    @property
    def accepted_skips(self) -> tuple[str, ...]:
        """Gates whose SKIPPED the user accepted explicitly (an untested algebra, docs/verdicts.md)."""
        return tuple(g.name for g in self.gate_list if g.accepted(self))

    @property
    def verdict(self) -> Verdict:
        """The combined verdict (:func:`kcert.verdict.certificate_verdict`): the gates', then the checks'
        rules (docs/kernelbench.md)."""
        return certificate_verdict(self.gates, self.accepted_skips,
                                   self.shape_sweep is not None and self.shape_sweep.failed,
                                   self.adequacy is not None and self.adequacy.blocks_pass)
