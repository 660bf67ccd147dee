"""Gate 1's results: the identity test, the symbolic proof and the precision ladder (docs/method.md)."""

from __future__ import annotations

from dataclasses import dataclass, field


from ..diagnostics import Diagnostic
from ..stats import identity
from ..verdict import Verdict


@dataclass(frozen=True)
class AlgebraOutputResult:
    """Identity test of one output: max relative real-mode discrepancy between ref and prod."""

    output: str
    discrepancy_float64: float
    discrepancy_float32: float
    verdict: Verdict

    @property
    def shrink(self) -> float:
        """How much the discrepancy shrinks from float32 to float64 real mode (rounding: ~2**29)."""
        return identity.shrink(self.discrepancy_float64, self.discrepancy_float32)


@dataclass(frozen=True)
class AlgebraProofResult:
    """The symbolic proof level of Gate 1: ref and prod evaluated on tensors of real symbols at a small
    shape, ``ref - prod`` simplified. ``outcome``: "proved" (zero for every element of every output),
    "disproved" (a non-zero difference, confirmed at ``witness``) or "not reached" (``reason`` names
    why: "unsupported", "shape", "too large", "budget", "undecided", "mismatch", "error")."""

    outcome: str
    note: str  # what was shown, or why the proof was not reached
    shape: dict = field(default_factory=dict)  # probe name -> the small shape it was evaluated at
    held: tuple[str, ...] = ()  # probes held at concrete values (integers, Fixed tensors)
    reason: str = ""
    seconds: float = 0.0
    witness: dict | None = None  # output, index, point, ref, prod, relative_difference, difference

    @property
    def shape_text(self) -> str:
        return ", ".join(f"{k} {tuple(v)}" for k, v in self.shape.items())


@dataclass(frozen=True)
class LadderRungResult:
    """One precision of the precision ladder (docs/method.md, Gate 1): whether prod accepted it (and
    why not), and per output the relative error of prod and of ref against the float64 oracle."""

    dtype: str
    accepted: bool
    reason: str = ""  # why prod's rung was refused or dropped
    prod_error: tuple[float, ...] = ()
    ref_error: tuple[float | None, ...] = ()  # None: ref did not run at this precision
    output_dtypes: tuple[str, ...] = ()
    ref_reason: str = ""  # why ref did not run at this precision


@dataclass(frozen=True)
class LadderOutputResult:
    """The ladder's decision for one output. ``outcome``: "PASS", "FAIL", "WARN", "not resolved" (no
    algebraic difference above the resolution measured, but the resolution is not far below the harm
    unit: no algebra test) or "not compared" (an integer output). ``amplification`` is K, prod's error
    over the yardstick at the ``judged`` rung; ``internal`` the precision that yardstick is the rounding
    of (the judged rung's own, or the coarser precision a saturated rung computes at); ``resolution``
    the relative size (to the output's peak) below which an algebraic difference is not excluded, and
    ``resolution_harm`` the same in unit roundoffs of ``harm_format`` (an upper bound in harm ULPs at
    the peak; ``bound``: what gave it, "yardstick", or prod's own error against the oracle ("oracle")
    or the observed ``prod - ref`` ("ref") bounding the difference directly: kcert.stats.ladder). ``points``: the point group the outcome rests on ("probe": the probe and wide
    draws; "small": the small-magnitude draws), ``worst_point`` the point where prod's error was largest."""

    output: str
    outcome: str
    judged: str = ""
    amplification: float = 0.0
    resolution: float = 0.0
    yardsticks: tuple[float, ...] = ()  # per accepted rung, in ladder order
    error: float = 0.0  # prod's relative error against the oracle at the judged rung
    internal: str = ""
    resolution_harm: float = 0.0
    harm_format: str = ""
    amplifications: tuple[float, ...] = ()  # K per accepted rung, in ladder order
    points: str = "probe"
    worst_point: str = ""
    bound: str = "yardstick"  # what gave the resolution: "yardstick", "oracle" or "ref"

    @property
    def verdict(self) -> Verdict:
        return {"PASS": Verdict.PASS, "FAIL": Verdict.FAIL, "WARN": Verdict.WARN}.get(self.outcome, Verdict.SKIPPED)


@dataclass(frozen=True)
class LadderResult:
    """The precision ladder: prod (and ref) run at every precision prod accepts on the same real
    inputs, each compared with the float64 oracle (kcert.stats.ladder has the rule). With one rung, or
    when every finer rung is saturated at the coarsest, it is a *same-precision comparison*."""

    rungs: tuple[LadderRungResult, ...]  # every precision tried, coarse to fine
    outputs: tuple[LadderOutputResult, ...]
    oracle: str  # "ref in real mode" or "the given oracle"
    grid: str  # every probe value is representable in this format (the coarsest accepted rung)
    working_dtype: str
    points: int
    wide_points: int
    rounding_multiple: float
    small_points: int = 0

    @property
    def accepted(self) -> tuple[str, ...]:
        return tuple(r.dtype for r in self.rungs if r.accepted)

    @property
    def same_precision(self) -> bool:
        """One accepted precision, or every output that rounding explains is explained by rounding at
        the coarsest one (the finer rungs are saturated there)."""
        accepted = self.accepted
        if len(accepted) == 1:
            return True
        explained = [o for o in self.outputs if o.judged and o.outcome not in ("FAIL", "WARN")]
        return bool(explained) and len(explained) == len([o for o in self.outputs if o.judged]) \
            and all(o.internal == accepted[0] for o in explained)

    @property
    def text(self) -> str:
        """"float32 vs bfloat16": the finest judged rung against the coarsest accepted one (against the
        next rung when nothing finer than the coarsest was resolved); "bfloat16 alone" for one rung."""
        accepted = self.accepted
        if not accepted:
            return "no precision accepted"
        if len(accepted) == 1:
            return f"{accepted[0]} alone"
        judged = [o.judged for o in self.outputs if o.judged in accepted]
        finest = max(judged, key=accepted.index) if judged else accepted[0]
        return f"{finest} vs {accepted[0]}" if finest != accepted[0] else f"{accepted[0]} vs {accepted[1]}"


@dataclass(frozen=True)
class AlgebraResult:
    """Gate 1: does prod compute the same real function as ref? (docs/method.md, "Gate 1")

    Attributes
    ----------
    verdict : Verdict
        PASS, WARN, FAIL or SKIPPED (no algebra test could run).
    reason : str
        The verdict in one sentence, with the figure behind it.
    level : str
        The evidence the verdict rests on: "proof", "identity test", "precision ladder" or "skipped"
        (``level_text`` says it in words).
    points, wide_points, small_points : int
        Points of the identity test (and the precision ladder): draws of the case's probes, of widened
        probes, and of probes scaled to small magnitudes (where an eps or an offset dominates).
    ref_side, prod_side : str
        How each side was evaluated (real mode in float64, or why it could not be).
    outputs : tuple of AlgebraOutputResult
        Per output: the float64 and float32 discrepancies of the identity test.
    fail_floor, rounding_shrink : float
        The identity test's FAIL floor and the shrink float32 -> float64 expected of rounding alone.
    diagnostics : tuple of Diagnostic
        Named findings (code, meaning, remedy).
    proof : AlgebraProofResult or None
        The symbolic proof at a small shape (None when not attempted), with its witness when disproved.
    ladder : LadderResult or None
        The precision ladder, for a prod real mode cannot follow (an opaque kernel).
    untested_accepted : bool
        SKIPPED and accepted by the user (``accept_untested_algebra``); ``untested_limit`` says what
        stays untested.

    Examples
    --------
    >>> import torch, kcert
    >>> case = kcert.Case(name="half", ref=lambda x: x * 0.5, prod=lambda x: x / 2,
    ...                   inputs={"x": kcert.Gaussian((32,))}, dtype=torch.bfloat16)
    >>> cert = kcert.certify(case, replicates=128, peer_rules=False, algebra_proof=False)
    >>> cert.algebra.verdict.value, cert.algebra.level
    ('PASS', 'identity test')
    """

    verdict: Verdict
    reason: str
    level: str  # the evidence the verdict rests on: "proof", "identity test", "precision ladder" or "skipped"
    points: int
    wide_points: int
    ref_side: str
    prod_side: str
    outputs: tuple[AlgebraOutputResult, ...] = ()
    fail_floor: float = 1e-9
    rounding_shrink: float = 2.0**19
    diagnostics: tuple[Diagnostic, ...] = ()
    proof: AlgebraProofResult | None = None  # None when the proof was not attempted
    ladder: LadderResult | None = None  # the precision ladder, when real mode could not run prod
    untested_accepted: bool = False  # SKIPPED and accepted by the user (Case/--accept-untested-algebra)
    untested_limit: str = ""  # what an accepted untested algebra leaves untested
    small_points: int = 0  # draws scaled to small magnitudes, after the probe and wide ones

    @property
    def level_text(self) -> str:
        """The evidence in words: "proof at shape ...", "identity test (real mode)", "precision ladder
        (float32 vs bfloat16)", "none" (with "accepted" when the user accepted an untested algebra)."""
        if self.level == "proof" and self.proof is not None:
            return f"proof at shape {self.proof.shape_text}" if self.proof.shape else "proof"
        if self.level == "identity test":
            return "identity test (real mode)"
        if self.level == "precision ladder" and self.ladder is not None:
            if self.ladder.same_precision:
                return f"same-precision comparison at {self.ladder.accepted[0]}"
            return f"precision ladder ({self.ladder.text})"
        return "none (accepted)" if self.untested_accepted else "none"
