"""L2, the training graph: certify a training step across gradient accumulation, ranks and loss
aggregation (docs/training-graph.md).

:class:`Step` declares the step (model, ref's loss, prod's distributed step, the batch probe),
:class:`StepConfig` one way prod executes it, :func:`certify_step` certifies a sweep of
configurations: each one a :class:`kcert.Case` whose prod runs on persistent gloo rank processes
that kcert launches (:mod:`kcert.step.pool`), judged by the three gates, and diagnosed when it does
not PASS (:mod:`kcert.step.diagnose`, :mod:`kcert.stats.aggregation`).
"""

from . import batch
from .batch import TokenBatch
from .certify import certify_step
from .config import StepConfig
from .context import StepContext
from .results import StepCertificate
from .spec import Step

__all__ = ["Step", "StepCertificate", "StepConfig", "StepContext", "TokenBatch", "batch", "certify_step"]
