"""kcert: certify that a production kernel computes the same thing as its reference kernel.

Three gates (docs/method.md): algebra (same real function), bias (no coherent difference that adds
up over T steps), variance (no blow-up of the error tail against a float64 oracle).

Names are imported lazily (PEP 562) so that ``import kcert.stats`` and the pytest plugin do not
pull in torch.
"""

from __future__ import annotations

import importlib

from .version import __version__

_EXPORTS = {
    "Axes": "case",
    "Case": "case",
    "Custom": "case",
    "Fixed": "case",
    "Gaussian": "case",
    "Integers": "case",
    "Labels": "case",
    "Uniform": "case",
    "AlgebraResult": "certificate",
    "BiasResult": "certificate",
    "Certificate": "certificate",
    "VarianceResult": "certificate",
    "gradients": "backward",
    "certify": "certification",
    "Settings": "settings",
    "CaseError": "errors",
    "CaseFileError": "errors",
    "KcertError": "errors",
    "KernelError": "errors",
    "ParameterError": "errors",
    "RealModeUnsupported": "errors",
    "semantic_round": "rounding",
    "Step": "step",
    "StepCertificate": "step",
    "StepConfig": "step",
    "StepContext": "step",
    "TokenBatch": "step",
    "certify_step": "step",
    "certify_model": "model",
    "Modules": "model",
    "ModelCertificate": "model",
    "ModelPair": "model",
    "BiasThresholds": "stats.thresholds",
    "VarianceThresholds": "stats.thresholds",
    "Verdict": "verdict",
    "assert_certified": "assertions",
    "NotCertified": "assertions",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kcert' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
