"""What the two models' forwards are called with: the probes drawn per replicate, the constant keywords a
user gives beside them (``use_cache=False``, ``return_dict=True``), the keywords kcert adds, and the working
precision floating probes are rounded to (docs/model.md, "Inputs")."""

from __future__ import annotations

import inspect
from collections import Counter
from typing import Any, Mapping

import torch
from torch import nn

from ..case import _FLOATING as FLOATING
from ..case import Probe
from ..errors import CaseError

# Plain values passed as they are to both forwards, every replicate: the switches a forward takes.
CONSTANTS = (bool, int, float, str, type(None))


def split_inputs(inputs: Mapping[str, Any], where: str) -> tuple[dict[str, Probe], dict[str, Any]]:
    """``inputs`` as (probes, constants). A tensor must be a probe (``kcert.Fixed`` for one value every
    replicate); ``use_cache=True`` is refused: each module is replayed on what ref's module received, and a
    key/value cache among it would grow with every replay."""
    if not isinstance(inputs, Mapping) or not inputs:
        raise CaseError(f"{where}: inputs must be a non-empty dict of forward keyword -> kcert probe, got "
                        f"{type(inputs).__name__}")
    probes, constants = {}, {}
    for key, value in inputs.items():
        if not isinstance(key, str) or not key.isidentifier():
            raise CaseError(f"{where}: inputs key {key!r} must be a keyword argument name of the forward")
        if isinstance(value, Probe):
            probes[key] = value
        elif isinstance(value, CONSTANTS):
            constants[key] = value
        elif isinstance(value, torch.Tensor):
            raise CaseError(f"{where}: inputs[{key!r}] is a tensor; give it as kcert.Fixed(tensor) (the same value "
                            "every replicate) or as a probe drawn per replicate (kcert.Integers for token ids, "
                            "kcert.Gaussian for hidden states, ...)")
        else:
            raise CaseError(f"{where}: inputs[{key!r}] must be a kcert probe (kcert.Integers for token ids, "
                            f"kcert.Gaussian for hidden states, ...) or a constant keyword (bool, int, float, str "
                            f"or None), got {type(value).__name__}")
    if not probes:
        raise CaseError(f"{where}: inputs give only constant keywords ({', '.join(constants)}); at least one must "
                        "be a kcert probe, drawn per replicate")
    if constants.get("use_cache") is True:
        raise CaseError(f"{where}: inputs['use_cache'] is True; kcert replays each module on the inputs ref's module "
                        "received, and a key/value cache among them would grow with every replay. Leave use_cache "
                        "out (kcert passes use_cache=False to a forward that takes it) or give False")
    return probes, constants


def forward_extras(model: nn.Module, probes: Mapping, constants: Mapping | None = None) -> dict:
    """Keywords passed to the model's forward beside the drawn probes: the user's constants, and
    ``use_cache=False`` when the forward takes it and the inputs do not set it (a key/value cache passed to a
    module would be written by every replay)."""
    constants = dict(constants or {})
    params = _forward_parameters(model)
    if params is not None and "use_cache" in params and "use_cache" not in probes and "use_cache" not in constants:
        constants["use_cache"] = False
    return constants


def refuse_unknown_keywords(model: nn.Module, keywords, role: str, where: str) -> None:
    """A constant keyword ``model``'s forward does not take, said before any forward runs (a forward with
    ``**kwargs`` takes any)."""
    params = _forward_parameters(model)
    if params is None or any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    unknown = [k for k in keywords if k not in params]
    if unknown:
        raise CaseError(f"{where}: {role}'s forward takes no keyword {', '.join(map(repr, unknown))} (given in "
                        f"inputs); its forward takes {', '.join(params) or 'nothing'}")


def _forward_parameters(model: nn.Module):
    """The parameters of ``model.forward``'s signature; None when it has none Python can read (a builtin)."""
    try:
        return inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None


def own_dtype(model: nn.Module) -> torch.dtype | None:
    """The floating dtype most of the model's parameter elements have (its buffers' when it has no floating
    parameter); None when it holds no floating tensor."""
    for tensors in (model.parameters(), model.buffers()):
        counts = Counter()
        for t in tensors:
            if t.is_floating_point():
                counts[t.dtype] += t.numel()
        if counts:
            return counts.most_common(1)[0][0]
    return None


def working_dtype(ref_model: nn.Module, dtype: torch.dtype | None, autocast: torch.dtype | None,
                  where: str) -> torch.dtype:
    """The precision floating probes are drawn in: ``dtype`` when given, else the models' own (ref's
    parameters; float32 under autocast, whose models are float32), else bfloat16 for a model holding no
    floating tensor."""
    if dtype is not None:
        if dtype not in FLOATING:
            raise CaseError(f"{where}: dtype must be a floating torch dtype or None (the models' own), got {dtype!r}")
        return dtype
    if autocast is not None:
        return torch.float32
    found = own_dtype(ref_model)
    return found if found in FLOATING else torch.bfloat16


def precision_warning(ref_model: nn.Module, probes: Mapping[str, Probe], drawn: Mapping,
                      dtype: torch.dtype) -> str | None:
    """A dtype given that differs from the models' own while a floating probe is rounded to it: the model
    receives inputs in another precision than it computes in (mixed-dtype arithmetic, or an error in a
    kernel that checks): said in the certificate's warnings."""
    own = own_dtype(ref_model)
    rounded = [k for k, p in probes.items() if p.rounds_to_case_dtype and isinstance(drawn.get(k), torch.Tensor)
               and drawn[k].is_floating_point()]
    if own is None or own == dtype or not rounded:
        return None
    name = str(dtype).removeprefix("torch.")
    return (f"the floating inputs ({', '.join(rounded)}) are drawn in {name} (dtype={name}), but ref's parameters "
            f"are {str(own).removeprefix('torch.')}: the models receive inputs in another precision than they "
            "compute in; leave dtype unset to use the models' own")
