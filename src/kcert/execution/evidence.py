"""What the algebra gate's evaluation measured (docs/method.md, "Gate 1"): plain, torch-free records.

:func:`kcert.execution.algebra.evaluate_algebra` runs the kernels (identity test, symbolic proof,
precision ladder) and returns an :class:`AlgebraEvidence`; :func:`kcert.gates.algebra.judge_algebra`
reads only these records and gives the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..certificate import AlgebraProofResult


@dataclass(frozen=True)
class IdentityOutput:
    """One output's identity test: the largest relative discrepancy between ref and prod over the
    points, in float64 real mode and in float32 real mode (float32: the largest finite one, inf when
    none is finite)."""

    name: str
    discrepancy_float64: float
    discrepancy_float32: float


@dataclass(frozen=True)
class RungMeasurement:
    """One precision: whether prod accepted it, and each output's relative error against the oracle
    (prod's, and ref's where ref ran at this precision; None where it did not)."""

    dtype: str
    accepted: bool
    reason: str = ""  # why the rung was not accepted or was dropped
    prod_error: tuple[float, ...] = ()
    ref_error: tuple[float | None, ...] = ()
    ref_reason: str = ""  # why ref did not run at this precision
    output_dtypes: tuple[str, ...] = ()  # the dtype of each of prod's outputs at this precision
    # per output, per point (LadderMeasurement.point_names): the errors the maxima above are taken over
    # (ref's: None where non-finite; empty when ref did not run)
    prod_point_errors: tuple[tuple[float, ...], ...] = ()
    ref_point_errors: tuple[tuple[float | None, ...], ...] = ()
    pair_point_errors: tuple[tuple[float | None, ...], ...] = ()  # |prod - ref| / max|ref|, where ref ran


@dataclass(frozen=True)
class LadderMeasurement:
    oracle: str  # "ref in real mode" or "the given oracle"
    grid: str  # the format every probe value is representable in (the coarsest accepted rung)
    points: int
    wide_points: int
    outputs: tuple[str, ...]
    rungs: tuple[RungMeasurement, ...]  # every candidate, in ladder order
    small_points: int = 0  # after the probe and wide points: draws scaled to small magnitudes
    point_names: tuple[str, ...] = ()  # each point in words ("probe draw 0", "draw 17 scaled by 2^-20")


@dataclass(frozen=True)
class AlgebraEvidence:
    """Everything the algebra gate judges for one case.

    ``ref`` / ``prod``: what ran for each side ("ref in real mode", "the given oracle", "prod in real
    mode", "the given prod_math"; "unavailable" when neither could run in real mode, and then
    ``unavailable`` says why and there is no identity test). ``outputs``: the identity test, one
    record per output. ``proof``: the symbolic proof's outcome (None when not tried). ``ladder``: the
    precision ladder, measured when prod cannot run in real mode but ref (or an oracle) can;
    ``no_oracle``: why the ladder could not run (no float64 oracle), None when it was not needed or ran."""

    points: int
    wide_points: int
    ref: str
    prod: str
    dtype: str  # the case's working dtype, e.g. "bfloat16"
    accept_untested: bool  # the case's own ``accept_untested_algebra``
    unavailable: tuple[str, ...] = ()
    outputs: tuple[IdentityOutput, ...] = ()
    proof: AlgebraProofResult | None = None
    ladder: LadderMeasurement | None = None
    no_oracle: str | None = None
    small_points: int = 0  # draws scaled to small magnitudes after the probe and wide ones
    training_dtype: str = "bfloat16"  # the case's training format: the harm unit's format
    prod_opaque: str = ""  # why real mode could not follow prod, in a short clause ("" when it could)
