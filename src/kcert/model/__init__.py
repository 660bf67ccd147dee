"""Certify a whole model module by module (``kcert model``, :func:`kcert.certify_model`; docs/model.md):
each selected module isolated on ref's recorded inputs, forward and backward, and the model end to end."""

from .engine import certify_model
from .padding import padded_mask
from .pair import ModelPair, load_pairs
from .results import ModelCertificate, ModuleRow
from .select import Modules

__all__ = ["ModelCertificate", "ModelPair", "ModuleRow", "Modules", "certify_model", "load_pairs", "padded_mask"]
