"""``kcert.certify_model``: every selected module of a model pair certified in isolation on ref's recorded
inputs, forward and backward, and the model's own outputs end to end (docs/model.md)."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..case import Probe
from ..certification import certify
from ..errors import CaseError, CheckpointError, KcertError, ModelTimeLimitReached, TimeLimitReached
from ..execution import distributed, seeding
from ..settings import Settings
from ..settling import settle_cap
from .amp import AUTOCAST_DTYPES, autocast_models
from .cases import adapted, end_to_end_case, module_cases
from .inputs import forward_extras, precision_warning, refuse_unknown_keywords, split_inputs, working_dtype
from .interpreter import interpreter_compat, shared_patch_warning, triton_launches
from .padding import DEFAULT as PADDING
from .padding import resolve as resolve_padding
from .patches import patched_functions, patched_warning
from .randomness import refuse_random_draws
from .record import call_difference, draw_model_inputs, first_calls, interface_difference, not_callable_alone
from .rename import Rename, RenameSpec, adapters
from .results import ModelCertificate, ModuleRow
from .select import (Modules, compiled_whole, eager_model, eagerly, match, never_ran,
                     parameter_differences, select, trace)
from .settle import goes_on, refresh_kernels, saved_cap, settled
from .shard import SHARDS, run_shared
from .state import buffers_kept
from .store import RecordingStore
from .words import few


WHOLE_COMPILE = ("prod_model is torch.compile'd as a whole: this row runs its compiled graph, the module rows run "
                 "prod's modules eagerly (compile the modules themselves to certify them compiled: docs/model.md, "
                 "Matching)")

# The algebra gate's symbolic proof is off by default for model rows: a module closes over its sizes (head
# counts, hidden size), so the proof is not reached, and trying it cost 135 s of a 2-layer Llama decoder
# layer's backward row (hidden 256, R = 64) against 5 s for the identity test. algebra_proof=True turns it on.
PROOF = False

# One recording forward of ref's model per draw of the model inputs, shared by every module row through a
# disk-backed store (kcert.model.store); False: each row records its module alone, as before (benchmarks and
# tests compare the two; the rows are the same).
SHARE_RECORDINGS = True
# With the store, the recording forward also keeps each module's certified outputs (and the model's own, for the
# end-to-end row), and a forward row takes ref's from there instead of calling ref's module (model) again on the
# same inputs (kcert.model.cases, _recorded_outputs and _kept_model_outputs); False: ref is called in every
# replicate (benchmarks and tests compare the two; the rows are the same).
REUSE_REF_OUTPUTS = True

# A row's cost before it runs, for the queue of shard="rows" (costliest first): the parameters its module holds
# (a decoder layer's above its projections'), and three times that for a backward row (forward and backward of
# ref and prod, against a forward); modules without parameters (an activation, a rotary table) last.
BACKWARD_COST = 3.0


@dataclasses.dataclass(frozen=True)
class _Job:
    """A row to certify: its position among the rows (its checkpoint file's index) and its cost estimate."""

    index: int
    case: Any
    module: str
    direction: str
    order: int
    kind: str
    prod_kind: str
    notes: tuple[str, ...]
    cost: float
    prod_module: str | None = None  # prod's own name of the module, when a rename gave it ref's


def _check(ref_model, prod_model, modules, loss, name) -> None:
    for role, model in (("ref_model", ref_model), ("prod_model", prod_model)):
        if not isinstance(model, nn.Module):
            raise CaseError(f"certify_model: {role} must be a torch.nn.Module, got {type(model).__name__}")
    if isinstance(ref_model, torch.jit.ScriptModule):
        raise CaseError("certify_model: ref_model is a TorchScript module (torch.jit.script or torch.jit.trace); kcert "
                        "records ref's modules' inputs with hooks and evaluates ref in float64 by running its Python "
                        "code, so ref must be the eager nn.Module (a TorchScript prod is certified end to end)")
    if ref_model is prod_model:
        raise CaseError("certify_model: ref_model and prod_model are the same object; build prod as a copy "
                        "(copy.deepcopy(ref) then patch it, or a new model loaded with ref's state dict)")
    if modules is not None and not isinstance(modules, Modules):
        raise CaseError(f"certify_model: modules must be a kcert.Modules or None, got {type(modules).__name__}")
    if loss is not None and not callable(loss):
        raise CaseError(f"certify_model: loss must be callable (loss(model_output, inputs) -> scalar) or None, got "
                        f"{type(loss).__name__}")
    if not isinstance(name, str) or not name.strip():
        raise CaseError(f"certify_model: name must be a non-empty string, got {name!r}")


def _check_autocast(ref_model, prod_model, dtype, autocast, name) -> None:
    """Mixed precision means float32 models under autocast: a 16-bit model there is a pure 16-bit run (the default,
    without ``autocast``), most likely a model not converted back with ``.float()``."""
    if autocast not in AUTOCAST_DTYPES:
        raise CaseError(f"certify_model({name!r}): autocast must be None, torch.bfloat16 or torch.float16, got "
                        f"{autocast!r}")
    if dtype != torch.float32:
        raise CaseError(f"certify_model({name!r}): autocast={autocast} runs float32 models under torch.autocast; give "
                        f"dtype=torch.float32 (got {dtype}), the precision of their parameters and inputs")
    if any(isinstance(m, torch.jit.ScriptModule) for m in prod_model.modules()):
        raise CaseError(f"certify_model({name!r}): autocast is entered by hooks on prod's modules, and a TorchScript "
                        "module takes none: certify a TorchScript prod without autocast")
    for role, model in (("ref_model", ref_model), ("prod_model", prod_model)):
        other = [(n, p.dtype) for n, p in model.named_parameters()
                 if p.is_floating_point() and p.dtype != torch.float32]
        if other:
            raise CaseError(f"certify_model({name!r}): autocast={autocast} runs float32 models under torch.autocast, "
                            f"but {role} has {len(other)} parameters in another dtype ({other[0][0]}: {other[0][1]}); "
                            "convert it with .float(), or certify the 16-bit model without autocast")


def _slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text)


def row_checkpoint(path: str | None, index: int, module: str, direction: str) -> str | None:
    """The checkpoint file of one row: ``stem.<index>-<module>-<direction>.npz`` beside ``path``."""
    if path is None:
        return None
    p = Path(path)
    name = module or "model"
    return str(p.with_name(f"{p.stem}.{_slug(f'{index:03d}-{name}-{direction}')}{p.suffix or '.npz'}"))


def saved_row_checkpoint(path: str | None, index: int, module: str, direction: str) -> str | None:
    """The file a resumed row continues from: its own (:func:`row_checkpoint`), else the one file of the same module
    and direction that a run with another selection wrote beside ``path`` (its rows had other indices: the settle
    command of ``kcert model`` resumes a few rows of a whole run); None when there is none."""
    own = row_checkpoint(path, index, module, direction)
    if own is None or Path(own).exists():
        return own
    p, name = Path(path), module or "model"
    row = re.escape(_slug(f"{name}-{direction}"))
    pattern = re.compile(rf"{re.escape(p.stem)}\.\d{{3,}}-{row}{re.escape(p.suffix or '.npz')}")
    found = sorted(f.name for f in p.parent.iterdir() if pattern.fullmatch(f.name)) if p.parent.is_dir() else []
    if len(found) > 1:
        raise CheckpointError(f"resume: {len(found)} checkpoint files hold row {module or '(model)'} {direction} "
                              f"beside {str(path)!r} ({', '.join(found)}), written by runs with other selections; "
                              f"keep the one to continue and remove the others")
    return str(p.with_name(found[0])) if found else None


def _found_or_refusal(path: str | None, job: _Job) -> tuple[str | None, str | None]:
    """(the row's saved file or None, None) or (None, why it cannot be chosen): sent to every rank as text."""
    try:
        return saved_row_checkpoint(path, job.index, job.module, job.direction), None
    except CheckpointError as exc:
        return None, str(exc)


def certify_model(ref_model: nn.Module, prod_model: nn.Module, inputs: Mapping[str, Probe], *,
                  modules: Modules | None = None, backward: bool = True, end_to_end: bool = True,
                  loss: Callable[[Any, dict], torch.Tensor] | None = None, dtype: torch.dtype | None = None,
                  name: str = "model", padding: str | None = PADDING, shard: str = "replicates",
                  rename: RenameSpec | Rename | None = None, adapt: Mapping[str, Callable] | None = None,
                  autocast: torch.dtype | None = None, settings: Settings | int | None = None,
                  settle: bool | int | None = None, progress: Callable[[int, int], None] | None = None,
                  on_event: Callable[[str, dict], None] | None = None, **overrides) -> ModelCertificate:
    """Certify a model pair module by module: each selected module of prod against ref's module of the same
    qualified name, both run on the inputs ref's module receives in the model (recorded per replicate),
    with kcert's three gates; the oracle is ref's module in real mode on float64 copies (docs/model.md).

    Parameters
    ----------
    ref_model, prod_model : torch.nn.Module
        The two models, with the same parameters (prod built from ref's state dict, or a patched copy of
        ref: patched forwards and swapped classes are matched by qualified name). Used as given (their
        dtype is the working precision; training mode is kept, but a forward that draws random numbers is refused:
        call ``.eval()`` on models with dropout).
    inputs : dict of str -> probe or constant
        The forward's keyword arguments: probes redrawn per replicate (``{"input_ids": kcert.Integers((2, 64),
        0, vocab)}``), and constants passed as they are to both forwards (``"return_dict": True``; a bool, int,
        float, str or None). ``use_cache=True`` is refused (every module replay would extend the cache).
    modules : kcert.Modules, optional
        The selection (default: every module that computes something itself, the root excluded).
    backward : bool, default True
        Also certify each module's gradients (activations and parameters).
    end_to_end : bool, default True
        Also certify the model's own outputs (logits, the loss when given) as one case.
    loss : callable, optional
        ``loss(model_output, inputs) -> scalar tensor``: certified with the end-to-end outputs.
    dtype : torch.dtype, optional
        The working precision floating probes are rounded to. Default: the models' own (the dtype most of ref's
        parameters have; float32 under ``autocast``). One that differs from the models' own while a floating
        probe is rounded to it is said in the warnings.
    name : str, default "model"
    padding : str or None, default "attention_mask"
        The input that marks padded positions (a (batch, positions) tensor, 0 at padding), when the inputs have
        it: every certified output whose leading axes are (batch, positions) is set to zero there on both sides,
        so nothing is compared and no gradient flows from where training has none (docs/model.md, "Padded
        batches"). None: every position is compared.
    shard : {"replicates", "rows"}, default "replicates"
        Under torchrun, what the ranks share: each row's replicates (every rank runs every row, meeting at each
        block and look), or whole rows (each rank takes rows from one queue, costliest first, and runs them
        alone; the ranks meet once, at the end): faster at a low R with many rows (a first look at R = 64),
        not at the default R (docs/model.md, "Checkpoints, time and ranks"). The certificate is the same either
        way; the provenance records ``ranks`` and ``shard``. Ignored in one process.
    rename : dict of str -> str, list of "PATTERN=REPLACEMENT", callable, or None
        prod's qualified module names renamed to ref's before matching (prod written in another framework's
        layout: ``{r"layers[.](\\d+)[.]attention[.]wq": r"model.layers.\\1.self_attn.q_proj"}``): regular
        expressions on whole names, the first rule that matches renames; or a function ``prod name -> ref name``.
        Parameters follow their module. Two modules given one name, or a rule that renames nothing, is an error
        (docs/model.md, "Another framework's names").
    adapt : dict of str -> callable, optional
        For prod's modules whose forward takes other arguments than ref's receives (another framework's
        attention: ``forward(x, freqs)``): regular expressions on ref's whole module names -> ``fn(args, kwargs) ->
        (args, kwargs)``, which makes prod's arguments from ref's recorded ones, in every replicate and in the
        float64 evaluations (torch operations only). Without one such a module's rows are SKIPPED.
    autocast : torch.dtype, optional
        Mixed precision as training runs it (float32 parameters, ``torch.autocast(dtype=torch.bfloat16)`` around the
        forward: Hugging Face's ``Trainer(bf16=True)``): every working-precision call of either model, the recording
        forwards included, runs under ``torch.autocast`` of this dtype, and harm is judged in its ULPs; give the
        models' own ``dtype`` (float32). The float64 oracle runs without it (docs/model.md, "Mixed precision").
    settle : bool, int or None, default None
        Rows held back for lack of evidence go on: a row that WARNs only because the variance gate's looks ran out
        before it decided (every other gate PASSes) continues from its checkpoint (the run's, else a temporary one)
        to this many replicates, computing only the further looks' replicates; its certificate states the level
        over both plans (at most 1.4 alpha from 4R to 16R; docs/model.md, "Rows held back go on"). None: 4 times
        the cap (16R by default) unless ``max_replicates`` is given (then a cap: off); True: 4 times the cap;
        False: off; a number: the cap times a power of 2.
    settings, progress, on_event, **overrides
        As :func:`kcert.certify`, for every row, except that the algebra gate's symbolic proof is off unless
        ``algebra_proof=True`` is given (modules close over their sizes, so it is rarely reached and costly); a
        ``checkpoint`` is one file per row beside it (``stem.<index>-<module>-<direction>.npz``), so
        ``resume=True`` continues an interrupted run row by row; ``max_time`` bounds the whole call, every row
        together. ``on_event("row", {...})`` is told each row as it starts, ``on_event("settle", {...})`` each
        row that goes on.

    Returns
    -------
    ModelCertificate
        Rows in execution order (each module's forward row, then its backward row), the end-to-end row
        last, the unmatched modules, ``first_failure`` (the localized module) and ``warnings`` (prod's
        parameters differ from ref's; a patch reached ref too). A module whose prod takes arguments of another
        kind in prod's own model (flex attention's ``BlockMask``) has SKIPPED rows that say so.

    Raises
    ------
    kcert.CaseError
        A model that is not a module, inputs that are not probes, a selection that matches no module, a forward
        that draws random numbers (dropout in training mode; the modules that draw are named: docs/model.md,
        "Random draws").
    kcert.KernelError
        ref_model does not run on the inputs, or a module raises on the recorded inputs.
    kcert.errors.ModelTimeLimitReached
        ``max_time`` ran out (between rows, or in a row at a replicate boundary): not a verdict; with a
        ``checkpoint``, ``resume=True`` continues from the rows and the state saved.
    kcert.errors.TritonPrecisionError
        In Triton's CPU interpreter (``TRITON_INTERPRET=1``), a bfloat16 or float16 pair whose prod launches
        a Triton kernel (the interpreter computes low precision wrongly: certify float32 copies there). Every
        row runs inside ``kcert.adapters.triton.interpreter_compat``; the kernels prod launches are named in
        the certificate's provenance (``triton_interpreter``).

    Examples
    --------
    A gated MLP against a copy whose activation is the tanh-approximate GELU instead of the exact one
    (tiny and 64 replicates so that it runs in seconds; the default is 1024):

    >>> import copy, torch, kcert
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 16)).eval()
    >>> prod = copy.deepcopy(ref)
    >>> prod[1] = torch.nn.GELU(approximate="tanh")
    >>> cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((8, 16), shift=0.1)}, dtype=torch.float32,
    ...                            backward=False, end_to_end=False, replicates=64, peer_rules=False)
    >>> cert.first_failure.module, cert.first_failure.kind
    ('1', 'GELU')
    """
    _check(ref_model, prod_model, modules, loss, name)
    inputs, constants = split_inputs(inputs, f"certify_model({name!r})")  # the probes, and constant keywords
    dtype = working_dtype(ref_model, dtype, autocast, f"certify_model({name!r})")
    if autocast is not None:
        _check_autocast(ref_model, prod_model, dtype, autocast, name)
    restored: dict[str, list[str]] = {}  # the buffers the forwards wrote into, put back (BatchNorm in training mode)
    with buffers_kept((("ref", ref_model), ("prod", prod_model)), restored), \
            autocast_models((ref_model, prod_model), autocast):  # every working-precision call of either model
        cert = _certify_model(ref_model, prod_model, inputs, constants, modules, backward, end_to_end, loss, dtype,
                              name, padding, shard, rename, adapt, autocast, settings, settle, progress, on_event,
                              overrides)
    if restored:
        cert.provenance["buffers_restored"] = restored
    return cert


def _certify_model(ref_model, prod_model, inputs, constants, modules, backward, end_to_end, loss, dtype, name, padding,
                   shard, rename, adapt, autocast, settings, settle, progress, on_event, overrides) -> ModelCertificate:
    """:func:`certify_model`'s work, inside its autocast hooks (the arguments are certify_model's; ``inputs`` the
    probes, ``constants`` the constant keywords, ``dtype`` the working precision)."""
    if shard not in SHARDS:
        raise CaseError(f"certify_model: shard must be one of {', '.join(map(repr, SHARDS))}, got {shard!r}")
    plain = settings is None or (isinstance(settings, int) and not isinstance(settings, bool))  # not a Settings built
    if plain and "algebra_proof" not in overrides:
        overrides["algebra_proof"] = PROOF
    settings = Settings.build(settings, **overrides)
    given_cap = settings.max_replicates  # None: the default looks, which rows held back go on from
    settings = settings.check()
    cap = settle_cap(settle, settings.replicates, settings.max_replicates, given_cap, f"certify_model({name!r})")
    modules = modules or Modules()
    start = time.perf_counter()
    refuse_unknown_keywords(ref_model, constants, "ref_model", f"certify_model({name!r})")
    refuse_unknown_keywords(eager_model(prod_model), constants, "prod_model", f"certify_model({name!r})")
    extra = forward_extras(ref_model, inputs, constants)
    prod_extra = forward_extras(eager_model(prod_model), inputs, constants)  # its own forward's keywords
    rename = Rename.build(rename)
    matching = match(ref_model, prod_model, rename)
    adapting = adapters(adapt, matching.ref)
    kwargs = draw_model_inputs(inputs, seeding.generator(settings.seed, seeding.INPUTS, 0), torch.device("cpu"),
                               dtype)
    padding = resolve_padding(inputs, padding, kwargs, f"certify_model({name!r})")
    try:
        with interpreter_compat():
            found = trace(ref_model, matching.ref, {**kwargs, **extra})
    except Exception as exc:
        mismatch = precision_warning(ref_model, inputs, kwargs, dtype)
        raise KcertError(f"certify_model({name!r}): ref_model raised {type(exc).__name__} on the drawn inputs: "
                         f"{exc}" + (f" ({mismatch})" if mismatch else "")) from exc
    with interpreter_compat():  # before any case is built: a forward that draws would make every row measure draws
        refuse_random_draws({"ref_model": (ref_model, extra), "prod_model": (prod_model, prod_extra)}, kwargs,
                            f"certify_model({name!r})")
    ref_patched = patched_functions(ref_model)  # read from its code before any row: said in the warnings
    chosen = select(modules, matching.ref, found)
    if not modules.is_default and not chosen:
        named = never_ran(modules, matching.ref, found)
        hint = f"; {len(named)} match but never ran in the forward" if named else ""
        raise CaseError(f"certify_model({name!r}): the selection ({modules.describe()}) matches no module that "
                        f"runs in ref_model's forward{hint}; ref's modules are {few(list(matching.ref), 8)}")
    unmatched = [("ref", n) for n in matching.only_ref] + [("prod", n) for n in matching.only_prod]
    planned = [n for n in chosen if n in matching.prod]
    with interpreter_compat():  # prod's forward may launch Triton kernels (model/interpreter.py)
        foreign = _other_interfaces(prod_model, matching, planned, found.first_call, kwargs, prod_extra, adapting)
    found.first_call.clear()  # ref's inputs of every module: one forward's activations, not kept all run long
    plan = [n for n in planned if n not in foreign]  # the modules whose cases are built and run
    total = len(planned) * (2 if backward else 1) + bool(end_to_end)

    deadline = None if settings.max_time is None else time.monotonic() + settings.max_time  # the whole call's

    scratch = contextlib.ExitStack()  # a temporary folder for the rows' files when rows go on without a checkpoint
    base = settings.checkpoint
    if cap is not None and base is None:
        base = str(Path(scratch.enter_context(tempfile.TemporaryDirectory(prefix="kcert-settle-"))) / "row.npz")

    def run(job: _Job) -> ModuleRow:
        label = f"{job.module or '(model)'} {job.direction}"
        path = row_checkpoint(base, job.index, job.module, job.direction)
        comm = distributed.current()  # the group, or this rank alone when whole rows are shared out
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and comm.broadcast(left <= 0):  # rank 0's clock decides for all (alone: its own)
            raise ModelTimeLimitReached(name, label, job.index, total, settings.max_time, settings.checkpoint)
        if on_event is not None:
            on_event("row", {"module": job.module, "direction": job.direction, "index": job.index, "rows": total})
        # a resumed run continues each row from its file (that of a run with another selection too); a row the
        # interrupted run never started has none and starts afresh (rank 0 looks: it is the rank that reads
        # checkpoints; alone, the rank that runs the row)
        fresh = False
        if settings.resume:
            found, refusal = comm.broadcast(_found_or_refusal(settings.checkpoint, job) if comm.rank == 0 else None)
            if refusal is not None:
                raise CheckpointError(refusal)
            fresh, path = found is None, found or path
        row_settings = dataclasses.replace(settings, checkpoint=path, command=settings.command,
                                           resume=settings.resume and not fresh,
                                           max_time=None if left is None else max(left, 1e-3))
        went_on = row_settings.resume and cap is not None and comm.broadcast(
            saved_cap(path) == cap if comm.rank == 0 else None)  # a row an earlier run let go on: its file's plan
        if went_on:
            row_settings = dataclasses.replace(row_settings, max_replicates=cap)
        try:
            cert = certify(job.case, row_settings, progress=progress, on_event=on_event)
            if not went_on and goes_on(cert, cap, comm):
                if on_event is not None:
                    on_event("settle", {"module": job.module, "direction": job.direction, "index": job.index,
                                        "rows": total, "from": cert.provenance.replicates, "to": cap})
                if comm.rank == 0:  # the rank that reads and writes checkpoints
                    refresh_kernels(path, job.case)
                left = None if deadline is None else max(deadline - time.monotonic(), 1e-3)
                cert = certify(job.case, dataclasses.replace(row_settings, max_replicates=cap, resume=True,
                                                             max_time=left), progress=progress, on_event=on_event)
                went_on = True
        except TimeLimitReached as exc:
            raise ModelTimeLimitReached(name, label, job.index, total, settings.max_time, settings.checkpoint,
                                        exc) from exc
        if went_on:  # held back at its plan's last look, the run's cap
            cert = settled(cert, settings.replicates, cap, temporary=settings.checkpoint is None)
        return ModuleRow(job.module, job.kind, job.prod_kind, job.direction, job.order, cert, None, job.notes,
                         job.prod_module, settings.max_replicates if went_on else None)

    launched, ref_launched = triton_launches(prod_model, kwargs, prod_extra, dtype, name, ref_model, extra, autocast)
    whole_compile = compiled_whole(prod_model)
    with interpreter_compat():  # Triton kernels inside the models, on a CPU (model/interpreter.py); no-op elsewhere
        built_all, copies = [], {}  # every module's cases first: the store needs every layout before the first row
        for module in plan:
            ref_mod, prod_mod = matching.ref[module], matching.prod[module]
            built_all.append(module_cases(module, ref_model, ref_mod, prod_mod, inputs, extra, dtype, settings.seed,
                                          backward, name, copies, padding, adapting.get(module), autocast))
        whole, whole_notes = end_to_end_case(ref_model, prod_model, inputs, extra, loss, dtype, settings.seed, name,
                                             padding, prod_extra, autocast) if end_to_end else (None, ())
        pickers = [b.forward.ref.pick if b.forward is not None and REUSE_REF_OUTPUTS else None for b in built_all]
        model_pick = whole.ref.pick if whole is not None and REUSE_REF_OUTPUTS else None
        store = (RecordingStore(ref_model, extra, [b.recorder for b in built_all], pickers, model_pick)
                 if SHARE_RECORDINGS and plan else contextlib.nullcontext())
        slots: list[ModuleRow | _Job] = []  # every row in execution order: skipped ones made, the others to run
        for order, module in enumerate(planned):
            if module in foreign:  # prod's module takes another interface: not run on ref's inputs
                _foreign_rows(slots, module, order, foreign[module], matching, backward)
            else:
                _module_rows(slots, module, order, built_all[plan.index(module)], matching, found, backward)
        del built_all, copies
        if whole is not None:
            slots.append(_Job(len(slots), whole, "", "end to end", len(planned), type(ref_model).__name__,
                              type(prod_model).__name__, whole_notes + ((WHOLE_COMPILE,) if whole_compile else ()),
                              _parameters(ref_model)))
        comm = distributed.current()
        with store, scratch:  # the end-to-end row inside the store too: ref's model outputs of its draws are kept
            rows = _run_rows(slots, run, shard, comm)
    provenance = {"seed": settings.seed, "replicates": settings.replicates, "dtype": str(dtype).removeprefix("torch."),
                  "inputs": {**{k: p.describe() for k, p in inputs.items()},
                             **{k: {"kind": "constant", "value": v} for k, v in constants.items()}},
                  "wall_time_s": time.perf_counter() - start,
                  "command": settings.command, "selected": len(chosen), "modules_ref": len(matching.ref),
                  "modules_prod": len(matching.prod), "padding": padding}
    if rename is not None:  # the rules, and every matched module whose name prod's model gives otherwise
        provenance.update(rename=rename.describe(), renamed=dict(matching.prod_names))
    if cap is not None:  # rows held back for lack of evidence went on to this many replicates
        provenance["settle_max_replicates"] = cap
    if comm.world > 1:  # under torchrun: how many ranks ran it and what they shared (the rows are the same either way)
        provenance.update(ranks=comm.world, shard=shard)
    if launched:
        provenance["triton_interpreter"] = launched
    if ref_launched:
        provenance["ref_triton_interpreter"] = ref_launched
    if ref_patched:
        provenance["ref_patched"] = ref_patched
    if whole_compile:
        provenance["prod_compiled_whole"] = True
    if autocast is not None:
        provenance["autocast"] = str(autocast).removeprefix("torch.")
    warnings = tuple(w for w in (precision_warning(ref_model, inputs, kwargs, dtype),
                                 parameter_differences(ref_model, prod_model, rename),
                                 shared_patch_warning(ref_launched), patched_warning(ref_patched)) if w)
    return ModelCertificate(name, tuple(rows), tuple(unmatched), modules.describe(), provenance, warnings)


def _module_rows(slots, module, order, built, matching, found, backward) -> None:
    ref_mod, prod_mod = matching.ref[module], matching.prod[module]
    kind, prod_kind = type(ref_mod).__name__, type(prod_mod).__name__
    prod_name = matching.prod_names.get(module)
    if found.calls.get(module, 0) > 1:
        notes = built.notes + (f"called {found.calls[module]} times per forward: certified on its first call",)
    else:
        notes = built.notes
    cost = _parameters(ref_mod)
    if built.forward is None:
        slots.append(ModuleRow(module, kind, prod_kind, "forward", order, None, built.forward_skipped, notes,
                               prod_name))
    else:
        slots.append(_Job(len(slots), built.forward, module, "forward", order, kind, prod_kind, notes, cost,
                          prod_name))
    if backward:
        if built.backward is None:
            slots.append(ModuleRow(module, kind, prod_kind, "backward", order, None, built.backward_skipped,
                                   notes + built.backward_notes, prod_name))
        else:
            slots.append(_Job(len(slots), built.backward, module, "backward", order, kind, prod_kind,
                              notes + built.backward_notes, BACKWARD_COST * cost, prod_name))


def _parameters(module: nn.Module) -> float:
    """The elements of a module's parameters (its children's too): the cost proxy of its rows."""
    return float(sum(p.numel() for p in module.parameters()))


def _run_rows(slots: list[ModuleRow | _Job], run: Callable[[_Job], ModuleRow], shard: str,
              comm) -> list[ModuleRow]:
    """Every slot's row, in execution order: the jobs run one after the other on every rank (their replicates
    shared among torchrun's ranks), or, with ``shard="rows"`` under torchrun, shared out whole (model/shard.py)."""
    if shard != "rows" or comm.world == 1:
        for i, slot in enumerate(slots):
            if isinstance(slot, _Job):
                slots[i] = run(slot)  # the row replaces its job: the case and what it holds are freed as rows run
        return slots
    jobs = [s for s in slots if isinstance(s, _Job)]
    skipped = len(slots) - len(jobs)

    def alone(job: _Job) -> ModuleRow:
        with distributed.alone():
            return run(job)

    def failure(exc: Exception, finished: int) -> BaseException:  # the rows finished on every rank, skipped ones too
        return exc.with_finished(finished + skipped) if isinstance(exc, ModelTimeLimitReached) else exc

    done = iter(run_shared(jobs, [j.cost for j in jobs], alone, comm, failure))
    return [next(done) if isinstance(s, _Job) else s for s in slots]


def _other_interfaces(prod_model, matching, plan, ref_calls, kwargs, extra, adapting) -> dict[str, str]:
    """Planned modules whose prod's forward does not take the arguments ref's receives (``call_difference``: a
    module of another framework), or receives, in prod's own model, an argument of another kind than ref's
    receives in ref's (``ref_calls``: each module's first call in the traced forward of ref;
    ``interface_difference``): module -> the reason its rows are SKIPPED. Run on ref's
    recorded inputs, such a module would get an input it never gets (a flex-attention module fed eager's tensor
    mask crashed the process in its compiled kernel): it is left to the end-to-end row and its own children.
    A module with an adapter (``adapting``) is judged on the arguments its adapter makes of ref's."""
    with eagerly():  # a whole-model compile: its eager model has the same interfaces, and hooks would recompile it
        prod_calls = first_calls(eager_model(prod_model), {n: matching.prod[n] for n in plan}, kwargs, extra)
    foreign = {}
    for name in plan:
        alone = not_callable_alone(matching.prod[name])
        if alone:
            foreign[name] = (f"prod's module cannot run on its own: {alone}; it is not certified in isolation: the "
                             "end-to-end row compares it")
            continue
        if name not in ref_calls:
            continue
        ref_call = ref_calls[name]
        if name in adapting:
            ref_call = adapted(adapting[name], *ref_call, f"module {name!r}")
        unbound = call_difference(ref_call, matching.prod[name])
        if unbound:  # prod's forward has another signature (another framework's module): it cannot be called so
            how = "its adapter's arguments" if name in adapting else "ref's recorded inputs (an adapter can make " \
                "them: certify_model(adapt=...))"
            foreign[name] = (f"prod's module takes another interface: {unbound}; it cannot run on {how}, so it is not "
                             "certified in isolation: the end-to-end row and the modules inside it compare it")
            continue
        difference = interface_difference(ref_call, prod_calls[name], matching.prod[name] if name in adapting
                                          else matching.ref[name]) if name in prod_calls else None
        if difference:
            foreign[name] = (f"prod's module takes another interface: {difference} (another backend builds "
                             "other inputs); run on ref's recorded inputs it would get an input it never gets, "
                             "so it is not certified in isolation: the end-to-end row and the modules inside it "
                             "compare it")
    return foreign


def _foreign_rows(slots, module, order, reason, matching, backward) -> None:
    kind, prod_kind = type(matching.ref[module]).__name__, type(matching.prod[module]).__name__
    for direction in ("forward", "backward") if backward else ("forward",):
        slots.append(ModuleRow(module, kind, prod_kind, direction, order, None, reason, (),
                               matching.prod_names.get(module)))


