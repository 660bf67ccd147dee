"""Random draws in a model's forward (dropout in training mode): found before any row, and refused.

kcert compares two deterministic functions of the same inputs. A forward that draws random numbers (a
``Dropout`` in training mode, an attention's ``dropout_p``, a router's jitter) differs from itself call to
call, and ref and prod draw independently, so every row that holds it would measure the draws: a benign
pair built from a config (``Model(config)`` is in training mode) FAILed its dropout rows by the algebra
gate, as if their arithmetic differed. A draw is seen as a torch generator's state moving: any random
operation advances it, and dropout with ``p = 0`` or outside training mode does not, so a model in
training mode without dropout is not refused (docs/model.md, "Random draws").
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..errors import CaseError
from .select import eager_model, eagerly
from .words import few


def _cuda_in_use() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_initialized()


def _generator_states() -> list[torch.Tensor]:
    """The default generators' states: the CPU's, and every CUDA device's once CUDA is in use."""
    return [torch.random.get_rng_state()] + (torch.cuda.get_rng_state_all() if _cuda_in_use() else [])


def _moved(before: list[torch.Tensor], after: list[torch.Tensor]) -> bool:
    return len(before) != len(after) or any(not torch.equal(a, b) for a, b in zip(before, after))


def drawing_modules(model: nn.Module, kwargs: Mapping, extra: Mapping | None = None) -> list[str]:
    """The qualified names of ``model``'s modules that draw random numbers in one forward on ``kwargs``, the
    innermost ones (a module none of whose descendants draws), in the order of ``named_modules``; ``""`` is
    the model itself (a draw in its own forward). [] when nothing draws, or when the forward raises (a model
    that does not run is reported where it is run). The generators' states are restored afterwards."""
    drawn: set[str] = set()
    entered: dict[str, list[list[torch.Tensor]]] = {}
    handles = []
    for name, module in model.named_modules():
        if isinstance(module, torch.jit.ScriptModule):  # takes no hooks: seen by the whole forward's draws below
            continue

        def before(mod, args, name=name):
            entered.setdefault(name, []).append(_generator_states())

        def after(mod, args, output, name=name):
            if entered.get(name) and _moved(entered[name].pop(), _generator_states()):
                drawn.add(name)

        handles.append(module.register_forward_pre_hook(before))
        handles.append(module.register_forward_hook(after, always_call=True))
    cuda = list(range(torch.cuda.device_count())) if _cuda_in_use() else []
    try:
        with torch.random.fork_rng(devices=cuda), torch.no_grad(), eagerly():  # model.compile(): hooks run eagerly
            start = _generator_states()
            model(**kwargs, **(extra or {}))
            if not drawn and _moved(start, _generator_states()):  # drawn where no hook sees (a TorchScript model)
                drawn.add("")
    except Exception:  # noqa: BLE001 - advisory: a model that raises is reported by the caller's own forward
        return []
    finally:
        for handle in handles:
            handle.remove()
    ordered = [name for name, _ in model.named_modules() if name in drawn]
    return [n for n in ordered if not any(other != n and (n == "" or other.startswith(n + ".")) for other in drawn)]


def _describe(model: nn.Module, names: list[str], limit: int = 6) -> str:
    shown = []
    for name in names:
        module = model.get_submodule(name) if name else model
        p = getattr(module, "p", None)
        detail = f", p={p:g}" if isinstance(p, float) else ""
        shown.append(f"{name or '(model)'} ({type(module).__name__}{detail})")
    return few(shown, limit)


def refuse_random_draws(models: Mapping[str, tuple[nn.Module, Mapping]], kwargs: Mapping, where: str) -> None:
    """Raise :class:`kcert.CaseError` naming, for each model (``role -> (model, its extra forward keywords)``)
    whose forward draws random numbers, the modules that draw, and how to stop them. A model compiled as a whole
    is run eagerly (its modules named as in the eager model)."""
    eager = {role: (eager_model(model), extra) for role, (model, extra) in models.items()}
    found = {role: (model, drawing_modules(model, kwargs, extra)) for role, (model, extra) in eager.items()}
    found = {role: (model, names) for role, (model, names) in found.items() if names}
    if not found:
        return
    said = {role: ("in training mode" if model.training else "in eval mode", _describe(model, names))
            for role, (model, names) in found.items()}
    if len(set(said.values())) == 1 and len(said) > 1:  # the same modules in both: said once
        (mode, modules), = set(said.values())
        parts = [f"{' and '.join(said)} draw random numbers in their forwards ({mode}): {modules}"]
    else:
        parts = [f"{role}'s forward draws random numbers ({mode}): {modules}" for role, (mode, modules) in said.items()]
    training = any(model.training for model, _ in found.values())
    fix = ("call .eval() on both models (dropout and other training-time draws off; kcert certifies the forward "
           "without them), or set their dropout probabilities to 0" if training else
           "make the forward deterministic (no sampling, noise or dropout in eval mode)")
    raise CaseError(f"{where}: {'; '.join(parts)}. Two calls on the same inputs then differ by the draws, and ref "
                    f"and prod draw independently, so every row holding such a module would measure the draws, "
                    f"not the numerics: {fix} (docs/model.md, \"Random draws\")")
