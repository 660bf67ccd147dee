"""The result types a certification returns, under their public import path (``kcert.certificate``).

They live in :mod:`kcert.results`, one module per gate and one for the checks; this module re-exports
them all so that ``from kcert.certificate import Certificate`` keeps working.
"""

from __future__ import annotations

from .results.algebra import AlgebraOutputResult, AlgebraProofResult, LadderRungResult, LadderOutputResult, LadderResult, AlgebraResult  # noqa: F401
from .results.bias import BucketFinding, BiasResult  # noqa: F401
from .results.variance import VarianceResult  # noqa: F401
from .results.bitwise import BitwiseResult  # noqa: F401
from .results.checks import FakeResult, AdequacyResult, PeerRuleResult, PeerRulesResult, ShapeResult, ShapeSweepResult, REJECTED, NOT_REJECTED, NOT_APPLICABLE  # noqa: F401
from .results.certificate import OutputInfo, Provenance, Certificate  # noqa: F401
from .stats.thresholds import BiasThresholds, VarianceThresholds  # noqa: F401 (importable from here before)
from .verdict import Verdict  # noqa: F401

__all__ = ["AdequacyResult", "AlgebraOutputResult", "AlgebraProofResult", "AlgebraResult", "BiasResult", "BitwiseResult", "BucketFinding", "Certificate", "FakeResult", "LadderOutputResult", "LadderResult", "LadderRungResult", "NOT_APPLICABLE", "NOT_REJECTED", "OutputInfo", "PeerRuleResult", "PeerRulesResult", "Provenance", "REJECTED", "ShapeResult", "ShapeSweepResult", "VarianceResult"]
