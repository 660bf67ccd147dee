"""``kcert model --export-case MODULE OUT.py``: a case file for one module that ``kcert certify`` runs on its
own. The file rebuilds the pair from the model file and the module's case from it
(:func:`module_case`): its probe is the module's recorded inputs, recorded afresh per replicate from the
model inputs drawn from ``(seed, replicate)``, exactly as in ``kcert model``, so the certificate is the
row's (same seed, same replicates). Nothing is saved beside it: the model file must stay where it is."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from ..case import Case
from ..errors import CaseError
from ..execution import seeding
from .amp import autocast_models, install
from .cases import module_cases
from .inputs import forward_extras, split_inputs, working_dtype
from .padding import DEFAULT as PADDING
from .padding import resolve as resolve_padding
from .record import draw_model_inputs
from .pair import ModelPair, load_pairs
from .randomness import refuse_random_draws
from .rename import Rename, adapters
from .select import eager_model, match


def module_case(model_file: str, pair: str, module: str, direction: str = "forward", seed: int = 0) -> Case:
    """The case of ``module`` of the pair named ``pair`` in ``model_file`` (``direction`` "forward" or
    "backward"), as ``kcert model`` certifies it."""
    if direction not in ("forward", "backward"):
        raise CaseError(f"module_case: direction must be 'forward' or 'backward', got {direction!r}")
    (found,) = load_pairs(model_file, [pair])
    autocast = found.options.get("autocast")
    if autocast is not None:  # the case runs later, in kcert certify: the models stay under autocast from now on
        install((found.ref, found.prod), autocast)
    return pair_case(found, module, direction, seed)


def pair_case(pair: ModelPair, module: str, direction: str = "forward", seed: int = 0) -> Case:
    matching = _matching(pair)
    for role, names in (("ref", matching.ref), ("prod", matching.prod)):
        if module not in names:
            raise CaseError(f"pair {pair.name!r}: {role} has no module {module!r}; its modules are "
                            f"{', '.join(list(names)[:8])}{' ...' if len(names) > 8 else ''}")
    ref_mod: nn.Module = matching.ref[module]
    autocast = pair.options.get("autocast")
    probes, constants, dtype = _inputs(pair)
    drawn = draw_model_inputs(probes, seeding.generator(seed, seeding.INPUTS, 0), torch.device("cpu"), dtype)
    padding = resolve_padding(probes, pair.options.get("padding", PADDING), drawn, f"pair {pair.name!r}")
    adapt = adapters(pair.options.get("adapt"), matching.ref).get(module)
    with autocast_models((pair.ref, pair.prod), autocast):  # the recordings as kcert model makes them
        built = module_cases(module, pair.ref, ref_mod, matching.prod[module], probes,
                             forward_extras(pair.ref, probes, constants), dtype, seed, direction == "backward",
                             pair.name, padding=padding, adapt=adapt, training_dtype=autocast)
    case = built.forward if direction == "forward" else built.backward
    if case is None:
        why = built.forward_skipped if direction == "forward" else built.backward_skipped
        raise CaseError(f"pair {pair.name!r}: module {module!r} has no {direction} case: {why}")
    return case


def _inputs(pair: ModelPair) -> tuple[dict, dict, torch.dtype]:
    """The pair's probes, constant keywords and working precision, as ``kcert model`` takes them."""
    probes, constants = split_inputs(pair.inputs, f"pair {pair.name!r}")
    return probes, constants, working_dtype(pair.ref, pair.dtype, pair.options.get("autocast"), f"pair {pair.name!r}")


def _matching(pair: ModelPair):
    """The pair's modules matched as ``kcert model`` matches them (its ``rename`` option too)."""
    return match(pair.ref, pair.prod, Rename.build(pair.options.get("rename")))


TEMPLATE = '''"""kcert case file exported by `kcert model {model_file} --export-case {module} ...` (pair {pair!r}).

The module {module!r} ({kind}) certified on ref's recorded inputs{directions}. The probe is the module's
inputs as ref's model computes them from the drawn model inputs, recorded per replicate (docs/model.md,
"Export"); the model file must stay at {path}.

Run: kcert certify {out}
"""

from kcert.model.export import module_case

MODEL_FILE = {path!r}

cases = [
{cases}]
'''


def write_case_file(pair: ModelPair, model_file: str, module: str, out: str, backward: bool) -> list[str]:
    """Write the case file ``out`` for ``module`` (forward, and backward when asked and available); returns
    the names of the cases written. The cases are built once here, so a module that cannot be exported
    fails now, not in ``kcert certify``."""
    matching = _matching(pair)
    if module not in matching.ref or module not in matching.prod:
        where = "ref" if module not in matching.ref else "prod"
        raise CaseError(f"--export-case: {where} has no module {module!r} (pair {pair.name!r})")
    probes, constants, dtype = _inputs(pair)
    drawn = draw_model_inputs(probes, seeding.generator(0, seeding.INPUTS, 0), torch.device("cpu"), dtype)
    prod_extra = forward_extras(eager_model(pair.prod), probes, constants)
    refuse_random_draws({"ref_model": (pair.ref, forward_extras(pair.ref, probes, constants)),
                         "prod_model": (pair.prod, prod_extra)}, drawn, f"--export-case (pair {pair.name!r})")
    directions = ["forward"] + (["backward"] if backward else [])
    kept, names = [], []
    for d in directions:
        try:
            case = pair_case(pair, module, d)
        except CaseError:
            if d == "forward":
                raise
            continue
        kept.append(d)
        names.append(case.name)
    path = str(Path(model_file).resolve())
    lines = "".join(f"    module_case(MODEL_FILE, {pair.name!r}, {module!r}, {d!r}),\n" for d in kept)
    Path(out).write_text(TEMPLATE.format(model_file=model_file, module=module, pair=pair.name,
                                         kind=type(matching.ref[module]).__name__, path=path, out=out,
                                         directions=" (" + " and ".join(kept) + ")", cases=lines))
    return names
