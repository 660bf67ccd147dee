"""The step's model: built once per run under a derived seed, its parameters the case's weights.

The parent process and every rank build the model with ``Step.model()``; the parent's parameter
values are the run's (drawn once, like any case weight) and the ranks load them, so ref and prod
start from the same numbers whatever the factory does with the global generator.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch

from ..errors import CaseError
from ..execution import seeding
from .spec import Step


@dataclass(frozen=True)
class Parameters:
    """The certified parameters: their module names, the case's weight names, and their values."""

    names: tuple[str, ...]  # as ``module.named_parameters()`` names them
    weights: tuple[str, ...]  # argument names of the case (identifiers)
    values: dict[str, torch.Tensor]  # module name -> value, for the certified parameters
    state: dict[str, torch.Tensor]  # every parameter's value: what the ranks load


def build_model(step: Step, seed: int) -> torch.nn.Module:
    """``step.model()`` under the run's weight seed, without touching the caller's global generator."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seeding.derived_seed(seed, seeding.WEIGHTS, 1))
        try:
            module = step.model()
        except Exception as exc:
            raise CaseError(f"step {step.name!r}: model() raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(module, torch.nn.Module):
        raise CaseError(f"step {step.name!r}: model() must return a torch.nn.Module, got {type(module).__name__}")
    return module


def _identifier(name: str, taken: set[str]) -> str:
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    base = base if base and not base[0].isdigit() else f"p_{base}"
    out, i = base, 1
    while out in taken or out == "batch":
        out, i = f"{base}_{i}", i + 1
    return out


def parameters(step: Step, module: torch.nn.Module) -> Parameters:
    """The parameters whose gradients are certified, checked against the step's declarations."""
    where = f"step {step.name!r}"
    found = {n: p for n, p in module.named_parameters() if p.requires_grad}
    if not found:
        raise CaseError(f"{where}: the model has no parameter that requires grad")
    if step.parameters is not None:
        missing = [n for n in step.parameters if n not in found]
        if missing:
            raise CaseError(f"{where}: parameters names {missing}, which the model does not have (it has "
                            f"{list(found)})")
        found = {n: found[n] for n in step.parameters}
    all_names = dict(module.named_parameters())
    for name, dim in step.shards.items():
        if name not in all_names:
            raise CaseError(f"{where}: shards names {name!r}, which the model does not have (it has {list(all_names)})")
        if not -all_names[name].dim() <= dim < all_names[name].dim():
            raise CaseError(f"{where}: shards splits {name!r} along dimension {dim}, but it has shape "
                            f"{tuple(all_names[name].shape)}")
    for name, p in found.items():
        if not p.is_floating_point():
            raise CaseError(f"{where}: parameter {name!r} has dtype {p.dtype}; only floating parameters have gradients")
    taken: set[str] = set()
    weights = []
    for name in found:
        weights.append(_identifier(name, taken))
        taken.add(weights[-1])
    state = {n: p.detach().clone() for n, p in all_names.items()}
    return Parameters(tuple(found), tuple(weights), {n: state[n] for n in found}, state)


def load(module: torch.nn.Module, values: dict[str, torch.Tensor]) -> None:
    """Copy ``values`` into the module's parameters of those names."""
    own = dict(module.named_parameters())
    with torch.no_grad():
        for name, value in values.items():
            if name not in own or own[name].shape != value.shape:
                raise CaseError(f"model parameter {name!r}: the model built in a rank does not match the parent's "
                                f"(model() must build the same architecture every time)")
            own[name].copy_(value)


@contextlib.contextmanager
def bound(module: torch.nn.Module, tensors: dict[str, torch.Tensor]):
    """``module`` with these tensors in place of its parameters of those names (autograd leaves of
    the caller's, e.g. float64 ones in real mode), restored on exit; tied parameters follow."""
    from torch.nn.utils.stateless import _reparametrize_module  # the mechanism of torch.func.functional_call

    with _reparametrize_module(module, tensors, tie_weights=True, strict=False):
        yield module
