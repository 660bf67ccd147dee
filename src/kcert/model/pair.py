"""``kcert.ModelPair``: what a model file declares for ``kcert model`` (the two models, the input probes and
the options of :func:`kcert.certify_model`), and loading the pairs of a file."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from ..errors import CaseError, CaseFileError
from .inputs import split_inputs
from .select import Modules


@dataclass(frozen=True, eq=False)
class ModelPair:
    """A model pair to certify with ``kcert model FILE``: the arguments of :func:`kcert.certify_model`.

    Parameters
    ----------
    name : str
        The pair's name (``--case NAME`` picks it).
    ref, prod : torch.nn.Module
        The reference model and the production one (same parameters).
    inputs : dict of str -> probe or constant
        The forward's keyword arguments: probes redrawn per replicate, constants (bool, int, float, str, None)
        passed as they are.
    modules : kcert.Modules, optional
        The selection (default: modules that compute something themselves).
    loss : callable, optional
        ``loss(model_output, inputs) -> scalar``, certified end to end with the outputs.
    dtype : torch.dtype, optional
        The working precision (default: the models' own, as :func:`kcert.certify_model`).
    description : str, default ""
    options : dict, optional
        More keywords of :func:`kcert.certify_model` for this pair: ``backward``, ``padding``, ``rename`` and
        ``adapt`` (a port in another framework's layout: docs/model.md, "Another framework's names"), ``autocast``
        (float32 models under ``torch.autocast``: docs/model.md, "Mixed precision"), ...

    Examples
    --------
    >>> import torch, kcert
    >>> ref = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU())
    >>> pair = kcert.ModelPair("mlp", ref, ref.__class__(*ref), {"input": kcert.Gaussian((4, 8))},
    ...                        dtype=torch.float32)
    >>> pair.name
    'mlp'
    """

    name: str
    ref: nn.Module
    prod: nn.Module
    inputs: Mapping[str, Any]  # probes, and constant keywords
    modules: Modules | None = None
    loss: Callable[[Any, dict], torch.Tensor] | None = None
    dtype: torch.dtype | None = None
    description: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)  # more keywords of certify_model (backward, ...)

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name.strip():
            raise CaseError(f"ModelPair: name must be a non-empty string, got {self.name!r}")
        for role in ("ref", "prod"):
            if not isinstance(getattr(self, role), nn.Module):
                raise CaseError(f"ModelPair {self.name!r}: {role} must be a torch.nn.Module, got "
                                f"{type(getattr(self, role)).__name__}")
        split_inputs(self.inputs, f"ModelPair {self.name!r}")


def load_pairs(path: str, names: list[str] | None = None) -> list[ModelPair]:
    """The ModelPairs a file defines at module level (objects, lists or tuples of them, or functions of no
    argument returning one or a list of them, named ``*pair*`` or listed in ``__all__``), in the file's order,
    each once; ``names`` picks some."""
    from ..casefile import import_file

    module = import_file(path, "model file")
    listed = getattr(module, "__all__", None)
    found: list[ModelPair] = []
    for key, value in vars(module).items():
        if key.startswith("_") or (listed is not None and key not in listed):
            continue
        if isinstance(value, ModelPair):
            found.append(value)
        elif isinstance(value, (list, tuple)):  # pairs = [...], as a case file's cases = [...]
            found += [m for m in value if isinstance(m, ModelPair)]
        elif callable(value) and getattr(value, "__module__", None) == module.__name__ and not isinstance(value, type) \
                and (listed is not None or "pair" in key.lower()):
            try:
                made = value()
            except TypeError:
                continue
            made = made if isinstance(made, (list, tuple)) else [made]
            found += [m for m in made if isinstance(m, ModelPair)]
    found = list({id(p): p for p in found}.values())  # a pair both named and listed: once
    if not found:
        raise CaseFileError(f"model file {path!r} defines no kcert.ModelPair (a module-level ModelPair or list of "
                            "them, or a function named *pair* returning one)")
    if names:
        unknown = [n for n in names if n not in {p.name for p in found}]
        if unknown:
            raise CaseFileError(f"model file {path!r}: no pair named {unknown}; it defines "
                                f"{[p.name for p in found]}")
        found = [p for p in found if p.name in names]
    return found
