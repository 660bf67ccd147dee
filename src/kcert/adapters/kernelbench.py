"""KernelBench-format problems and candidates as kcert cases (docs/kernelbench.md).

(Problem files, their size globals and shrinking: :mod:`kcert.adapters.kernelbench_problem`.)

A PROBLEM file defines, at module level, ``class Model(nn.Module)``, ``get_inputs()`` (one call's
arguments of ``forward``), ``get_init_inputs()`` (the constructor's arguments) and the size globals both
read (``batch_size = 16``, ``dim = 16384``). A CANDIDATE file defines ``ModelNew`` with Model's
constructor. :func:`case` returns the :class:`kcert.Case` that certifies ModelNew (prod) against Model
(ref); :func:`cases` returns it under both probes.

- **Modules.** Both are built from ``get_init_inputs()``, Model with torch's global generator seeded
  from the run's seed (inside ``torch.random.fork_rng``: nothing global changes), ModelNew then loads
  Model's state dict (a clear error names the keys or shapes that differ). Every parameter and buffer
  becomes a kcert weight (a ``Fixed`` probe of Model's values in the case dtype; a floating parameter that
  its initialisation leaves constant, a norm's gain at 1 or a bias at 0, is drawn trained-like around that
  value instead, so a kernel that ignores it cannot agree by accident), handed to both modules
  by ``torch.func.functional_call``, so real mode (the oracle, the algebra gate) runs them on exact
  float64 copies. Buffers are copied at every call (a BatchNorm in training mode updates its running
  statistics on the copy). The modules stay in the mode ``nn.Module`` starts in (training), as
  KernelBench runs them. Integer or boolean outputs are certified as float64 (any difference FAILs).
- **Shapes.** The size globals are the module-level int literals >= :data:`SIZE_MIN` (also inside
  tuple or list literals: ``input_shape = (4096,)``); smaller ints (axes, kernel sizes, strides) are
  never changed. When one call's inputs and outputs hold more than ``budget`` elements (counted on the
  ``meta`` device, nothing allocated), the largest size global is halved (ties: the one declared last),
  never below :data:`SHRINK_FLOOR` (so group and head counts keep their ratio to the sizes they divide),
  and the problem re-executed, until it fits; the case's description says what was shrunk, and that the
  budget could not be met when the floor stops it. ``shrink=False`` keeps the problem's sizes.
- **Probes.** "problem": ``get_inputs()`` itself, called with torch's generator seeded from (seed,
  replicate) inside ``fork_rng`` (all inputs of a call from one ``get_inputs()`` call). "kcert": the
  same draw made signed and heavier-tailed: each floating input's entries get independent random signs
  (a symmetric sign pattern when the problem's draws are symmetric matrices), 1% of them are scaled by
  10 (outliers), and a shift of 0.1 x the input's RMS is added to the non-zero entries; zero entries
  (a triangular or masked structure) stay zero. When ref is not finite on those signed draws but is on
  the problem's own, inputs that the problem draws nonnegative keep their sign. Integer inputs are the
  problem's own in both probes; non-tensor arguments are passed as the problem gives them.
- **Buckets** from the shape of each output: a scalar is one bucket; a vector (N,) one per element;
  a matrix (N, F) one per column (the last axis, the feature); (N, C, ...) one per channel (axis 1).
- **Harm** is judged in ULPs of the case dtype (``training_dtype = dtype``): KernelBench asks whether
  the candidate computes the problem's function at the problem's precision, so a float32 problem is
  judged in float32 ULPs (a kernel computing in float16 inside is wrong at float32). At that scale the
  bias gate's floor is one ULP (:data:`BIAS_THRESHOLDS`, what ``kcert kernelbench`` passes to
  :func:`kcert.certify`): a coherent bias below one ULP of the problem's own format is an arrangement
  of its rounding, which correct rewrites of the same float32 arithmetic make (an unfused ``y * w + b``
  epilogue against a fused one: 0.25-0.37 ULP per channel, docs/kernelbench.md). Since that floor is the
  harm unit itself, a significant bias under it PASSes (reported, not reviewed): the report's WARN band
  below the floor is for floors that are a fraction of the harm unit (certify's 0.25).
- **Shape sweep** (the "kcert" probe): the problem rebuilt with other size globals: every one to a
  non-power of two (3/4 of it, odd), then each one alone to 1, 65, 129 and 257 (past the block sizes
  64/128/256), the others shrunk to fit the budget (docs/kernelbench.md).
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import nn
from torch.func import functional_call

from ..case import Axes, Case, Custom, Fixed
from ..errors import CaseError
from ..execution import seeding
from ..execution.realmode import in_mode
from ..stats.thresholds import BiasThresholds
from .kernelbench_problem import (  # noqa: F401 - the problem side of the adapter, re-exported
    DEFAULT_BUDGET,
    SHRINK_FLOOR,
    SIZE_MIN,
    SWEEP_LENGTHS,
    KernelBenchError,
    Problem,
    SizeGlobal,
    SeededGlobal,
    Sizing,
    as_list,
    count_elements,
    exec_problem,
    fit_sizes,
    load_candidate,
    load_problem,
    sweep_sizes,
)

# the bias gate at one ULP of the problem's format, the harm unit, and no review below it (see above)
BIAS_THRESHOLDS = BiasThresholds(ulp_floor=1.0, warn_below_floor=False)
OUTLIER_FRACTION, OUTLIER_SCALE, SHIFT = 0.01, 10.0, 0.1
PROBES = ("kcert", "problem")

__all__ = ["BIAS_THRESHOLDS", "DEFAULT_BUDGET", "SHRINK_FLOOR", "SIZE_MIN", "SWEEP_LENGTHS", "KernelBenchError",
           "ModuleKernel", "Problem", "SizeGlobal", "Sizing", "bucket_rule", "build", "case", "cases", "count_elements",
           "fit_sizes", "load_candidate", "load_problem", "sweep_sizes"]


def _torch_seed(seed: int, stream: int, index: int) -> int:
    return seeding.derived_seed(seed, stream, index)


# --- kernels -------------------------------------------------------------------------------------------


def _certifiable(out, where: str):
    """The module's output as kcert kernels return it: floating tensors as they are, integer and bool
    tensors as float64 (any difference is then far above every floor), Python numbers as 0-d tensors."""
    if isinstance(out, (list, tuple)):
        return tuple(_certifiable(o, where) for o in out)
    if isinstance(out, (int, float)) and not isinstance(out, bool):
        return torch.tensor(float(out), dtype=torch.float64)
    if isinstance(out, torch.Tensor):
        return out if out.is_floating_point() else out.to(torch.float64)
    raise TypeError(f"{where} returned {type(out).__name__}; kcert certifies tensors (or tuples of tensors)")


@dataclass(frozen=True, eq=False)
class ModuleKernel:
    """A KernelBench module called as a kcert kernel: the inputs by name (put back in ``forward``'s
    positional order, non-tensor arguments from ``constants``) and every parameter and buffer from the
    weights (``state``: kcert weight name -> state-dict key)."""

    module: nn.Module
    order: tuple[str | None, ...]  # positional argument names; None: take the constant at that position
    constants: tuple
    state: tuple[tuple[str, str], ...]
    buffers: frozenset[str]
    label: str

    def __call__(self, **kwargs):
        kwargs = {k: in_mode(v) for k, v in kwargs.items()}
        args = [kwargs[n] if n is not None else c for n, c in zip(self.order, self.constants)]
        state = {}
        for arg, key in self.state:
            value = kwargs[arg]
            state[key] = value.clone() if key in self.buffers else value
        return _certifiable(functional_call(self.module, state, tuple(args)), self.label)


class _Raising:
    """A kernel that could not be built at this shape: raises the build error when called."""

    def __init__(self, error: Exception):
        self.error = error

    def __call__(self, **kwargs):
        raise self.error


# --- probes --------------------------------------------------------------------------------------------


class _Draws:
    """``get_inputs()`` once per draw: the generator each probe receives identifies the draw
    (its initial seed depends on (seed, stream, replicate) only), so every input of one draw comes from
    one ``get_inputs()`` call, made with torch's global generator seeded from it inside ``fork_rng``."""

    def __init__(self, get_inputs: Callable, where: str):
        self.get_inputs, self.where = get_inputs, where
        self.key: int | None = None
        self.values: list = []

    def draw(self, generator: torch.Generator) -> list:
        key = generator.initial_seed()
        if key != self.key:
            with SeededGlobal(key % (2**63)):
                self.values = as_list(self.get_inputs(), "get_inputs", self.where)
            self.key = key
        return self.values


@dataclass(frozen=True)
class _Signing:
    """How the kcert probe changes one floating input (see the module docstring)."""

    scale: float
    symmetric: bool
    keep_sign: bool


def _symmetric_like(t: torch.Tensor) -> torch.Tensor:
    upper = torch.triu(t)
    return upper + upper.transpose(-1, -2) - torch.diag_embed(torch.diagonal(t, dim1=-2, dim2=-1))


def _signed(x: torch.Tensor, how: _Signing, g: torch.Generator) -> torch.Tensor:
    """``x`` with random signs, a shift on its non-zero entries and 1% outliers; one uniform per entry
    gives both the sign (its first bit) and the outlier (the rest, uniform again)."""
    dtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    x = x.detach().to(dtype)
    u = torch.rand(x.shape, generator=g, device=x.device, dtype=dtype).mul_(2)
    negative = u < 1
    outlier = u.sub_(negative.to(dtype).neg_().add_(1)) < OUTLIER_FRACTION  # u - 1 or u: uniform on [0, 1)
    if how.symmetric:
        negative = _symmetric_like(negative.to(dtype)).bool()
        outlier = _symmetric_like(outlier.to(dtype)).bool()
    y = x.clone()
    if not how.keep_sign:
        y = torch.where(negative, -y, y)
        y = y + torch.where(x != 0, SHIFT * how.scale, 0.0)
    return torch.where(outlier, y * OUTLIER_SCALE, y)


def _problem_probe(draws: _Draws, index: int, description: str, shape) -> Custom:
    def fn(generator, device):
        value = draws.draw(generator)[index]  # a copy: a kernel that writes into its input cannot change the draw
        return value.to(device).clone() if isinstance(value, torch.Tensor) else value

    return Custom(fn, description, shape)


def _kcert_probe(draws: _Draws, index: int, how: _Signing, description: str, shape) -> Custom:
    def fn(generator, device):
        value = draws.draw(generator)[index].to(device)
        g = torch.Generator(device=value.device)
        g.manual_seed((generator.initial_seed() * 2654435761 + index) % (2**63))
        return _signed(value, how, g)

    return Custom(fn, description, shape)


# --- building a case ------------------------------------------------------------------------------------


def _forward_names(model_cls: type, count: int) -> list[str]:
    try:
        params = list(inspect.signature(model_cls.forward).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(names) >= count and all(n.isidentifier() for n in names[:count]) and len(set(names[:count])) == count:
        return names[:count]
    return [f"input{i}" for i in range(count)]


def _weight_name(key: str, taken: set[str]) -> str:
    """The kcert weight name of a state-dict key: dots become double underscores (``norm.weight`` ->
    ``norm__weight``), other non-identifier characters underscores, ``param__`` prefixed on a clash."""
    name = re.sub(r"\W", "_", key.replace(".", "__"))
    if not name.isidentifier():
        name = f"param__{name}"
    while name in taken:
        name = f"param__{name}"
    return name


def bucket_rule(shape: Sequence[int]):
    """Buckets from an output's shape (docs/kernelbench.md): scalar: one; (N,): per element; (N, F): per
    column (the feature axis); (N, C, ...): per channel (axis 1)."""
    ndim = len(shape)
    if ndim == 0:
        return Axes()
    if ndim == 1:
        return Axes(0)
    if ndim == 2:
        return Axes(-1)
    return Axes(1)


def _check_state(model: nn.Module, new: nn.Module, where: str) -> None:
    a, b = model.state_dict(), new.state_dict()
    only_model, only_new = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_model or only_new:
        raise KernelBenchError(
            f"{where}: ModelNew's parameters and buffers differ from Model's, so it cannot load Model's state dict: "
            f"only in Model: {only_model or 'none'}; only in ModelNew: {only_new or 'none'} (keep Model's "
            "submodules and parameter names, e.g. self.linear = nn.Linear(...), so the weights can be shared)")
    shapes = [f"{k}: Model {tuple(a[k].shape)}, ModelNew {tuple(b[k].shape)}" for k in a if a[k].shape != b[k].shape]
    if shapes:
        raise KernelBenchError(f"{where}: ModelNew's state dict has other shapes than Model's: {'; '.join(shapes)}")


@dataclass(frozen=True)
class Built:
    """One build: the case, the sizes it was built at, and a note for its description (the domain fallback)."""

    case: Case
    sizing: Sizing
    note: str = ""


def build(problem: Problem, candidate: type, sizing: Sizing, *, probe: str = "kcert", dtype: torch.dtype | None = None,
          seed: int = 0, device: str | torch.device = "cpu", name: str | None = None,
          description: str = "") -> Built:
    """The case of ``candidate`` against ``problem`` at ``sizing.sizes`` under ``probe``."""
    if probe not in PROBES:
        raise CaseError(f"kernelbench: probe must be one of {PROBES}, got {probe!r}")
    device = torch.device(device)
    where = f"problem {str(problem.path)!r}"
    module = exec_problem(problem, sizing.sizes)
    with SeededGlobal(_torch_seed(seed, seeding.WEIGHTS, 1)):
        try:
            init = as_list(module.get_init_inputs(), "get_init_inputs", where)
        except KernelBenchError:
            raise
        except Exception as exc:
            raise KernelBenchError(f"{where}: get_init_inputs() raised {type(exc).__name__}: {exc}") from exc
    with SeededGlobal(_torch_seed(seed, seeding.WEIGHTS, 2)):
        try:
            model = module.Model(*init)
        except Exception as exc:
            raise KernelBenchError(f"{where}: Model(*get_init_inputs()) raised {type(exc).__name__}: {exc}") from exc
    with SeededGlobal(_torch_seed(seed, seeding.WEIGHTS, 3)):
        try:
            new = candidate(*init)
        except Exception as exc:
            raise KernelBenchError(f"candidate: ModelNew(*get_init_inputs()) raised {type(exc).__name__}: {exc}") \
                from exc
    _check_state(model, new, "candidate")
    new.load_state_dict(model.state_dict())
    model.to(device)
    new.to(device)

    draws = _Draws(module.get_inputs, where)
    first = torch.Generator(device="cpu")
    first.manual_seed(_torch_seed(seed, seeding.INPUTS, 0))
    try:
        sample = list(draws.draw(first))
    except KernelBenchError:
        raise
    except Exception as exc:
        raise KernelBenchError(f"{where}: get_inputs() raised {type(exc).__name__}: {exc}") from exc
    floating = [isinstance(v, torch.Tensor) and v.is_floating_point() for v in sample]
    if dtype is None:
        dtype = next((v.dtype for v, f in zip(sample, floating) if f), torch.float32)
        if dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
            dtype = torch.float32
    names = _forward_names(module.Model, len(sample))
    order, constants, inputs = [], [], {}
    for i, (value, n) in enumerate(zip(sample, names)):
        if not isinstance(value, torch.Tensor):
            order.append(None)
            constants.append(value)
            continue
        order.append(n)
        constants.append(None)
        shape = tuple(value.shape)
        if floating[i] and probe == "kcert":
            how = _Signing(_rms(value), _is_symmetric(value), False)
            inputs[n] = _kcert_probe(draws, i, how, _signing_text(n, how), shape)
        else:
            inputs[n] = _problem_probe(draws, i, f"get_inputs()[{i}] ({n}), the problem's own draw", shape)
    if not inputs:
        raise KernelBenchError(f"{where}: get_inputs() returns no tensor: nothing to redraw per replicate")

    state = model.state_dict()
    buffer_keys = frozenset(k for k, _ in model.named_buffers() if k in state)
    trained = _trained_like(model, seed)
    taken = set(inputs)
    weights, state_map = {}, []
    for key, value in state.items():
        arg = _weight_name(key, taken)
        taken.add(arg)
        value = trained.get(key, value).detach().to(device)
        weights[arg] = Fixed(value.to(dtype) if value.is_floating_point() else value.clone())
        state_map.append((arg, key))
    if trained:
        description = (f"{description}; " if description else "") + (
            f"parameters constant at init drawn trained-like: {', '.join(trained)}")
    label = name or f"{problem.stem}"
    ref = ModuleKernel(model, tuple(order), tuple(constants), tuple(state_map), buffer_keys, "Model")
    prod = ModuleKernel(new, tuple(order), tuple(constants), tuple(state_map), buffer_keys, "ModelNew")

    base = Case(name=label, ref=ref, prod=prod, inputs=inputs, weights=weights, dtype=dtype,
                training_dtype=dtype, description=description)
    outputs = _sample_outputs(base, sample, names, seed, device)
    buckets = [bucket_rule(tuple(o.shape)) for o in outputs]
    note = ""
    if probe == "kcert":
        flipped = _domain_fallback(base, seed, device, outputs, sample, floating)
        if flipped:
            for i in flipped:
                n = names[i]
                how = _Signing(_rms(sample[i]), _is_symmetric(sample[i]), True)
                inputs[n] = _kcert_probe(draws, i, how, _signing_text(n, how), tuple(sample[i].shape))
            note = (f"ref is not finite on signed draws of {', '.join(names[i] for i in flipped)} but is on the "
                    "problem's own (nonnegative) ones: those inputs keep their sign in the kcert probe")
    built = Case(name=label, ref=ref, prod=prod, inputs=inputs, weights=weights, dtype=dtype, training_dtype=dtype,
                 buckets=buckets[0] if len(buckets) == 1 else buckets, description=description)
    return Built(built, sizing, note)


def _trained_like(model: nn.Module, seed: int) -> dict[str, torch.Tensor]:
    """Floating parameters that their initialisation leaves constant (norm gains at 1, biases at 0), each
    drawn around its value as training leaves it: ``c + 0.1 |c| N(0, 1)``, or ``0.02 N(0, 1)`` for c = 0.
    A kernel that ignores such a parameter (drops a LayerNorm's bias) would agree with ref at its init
    value; random initialisations (a Linear's weight) are kept as the problem makes them."""
    out = {}
    for i, (key, p) in enumerate(model.named_parameters()):
        value = p.detach()
        if not value.is_floating_point() or value.numel() == 0:
            continue
        flat = value.reshape(-1)
        if not bool((flat == flat[0]).all()):
            continue
        c = float(flat[0])
        g = torch.Generator().manual_seed(_torch_seed(seed, seeding.WEIGHTS, 100 + i))
        spread = 0.1 * abs(c) if c != 0 else 0.02
        noise = torch.randn(value.shape, generator=g, dtype=torch.float64)
        out[key] = (c + spread * noise).to(value.dtype)
    return out


def _rms(t: torch.Tensor) -> float:
    value = float(t.detach().to(torch.float64).pow(2).mean().sqrt()) if t.numel() else 0.0
    return value if math.isfinite(value) and value > 0 else 1.0


def _is_symmetric(t: torch.Tensor) -> bool:
    return t.dim() >= 2 and t.shape[-1] == t.shape[-2] and t.shape[-1] > 1 and bool(torch.equal(t, t.transpose(-1, -2)))


def _signing_text(name: str, how: _Signing) -> str:
    sign = "its own sign kept (ref's domain)" if how.keep_sign else \
        ("random symmetric signs" if how.symmetric else "random signs")
    shift = "" if how.keep_sign else f", + {SHIFT:g} x RMS on non-zero entries"
    return (f"{name}: get_inputs()'s draw with {sign}{shift}, {OUTLIER_FRACTION:.0%} of entries x{OUTLIER_SCALE:g} "
            f"(RMS {how.scale:.3g})")


def _call_ref(case: Case, inputs: dict, seed: int, device):
    from ..execution import probes
    from ..execution.runner import as_outputs

    weights = probes.draw_weights(case, seed, device)
    with torch.no_grad():
        return as_outputs(case.ref(**inputs, **weights.working), "ref", f"case {case.name!r}")


def _sample_outputs(case: Case, sample: list, names: list[str], seed: int, device) -> tuple[torch.Tensor, ...]:
    """Model's outputs on the problem's own first draw (their shapes give the buckets)."""
    inputs = {n: v.to(device) for n, v in zip(names, sample) if isinstance(v, torch.Tensor)}
    try:
        return _call_ref(case, inputs, seed, device)
    except Exception as exc:
        raise KernelBenchError(f"case {case.name!r}: Model raised {type(exc).__name__}: {exc} on get_inputs()'s "
                               "first draw") from exc


def _domain_fallback(case: Case, seed: int, device, outputs, sample, floating) -> list[int]:
    """Inputs to keep nonnegative: when ref is finite on the problem's own first draw (``outputs``) but not
    on one of two signed draws of the kcert probe (or raises there), the floating inputs whose problem
    draw is nonnegative (else none)."""
    from ..execution import probes

    if not all(bool(torch.isfinite(o).all()) for o in outputs):
        return []
    for r in range(2):
        draw = probes.draw_inputs(case, seed, r, device)
        try:
            outs = _call_ref(case, draw.working, seed, device)
        except Exception:  # noqa: BLE001 - ref refusing signed inputs is the same finding
            break
        if not all(bool(torch.isfinite(o).all()) for o in outs):
            break
    else:
        return []
    return [i for i, (v, f) in enumerate(zip(sample, floating)) if f and bool((v >= 0).all())]


def _variant(problem: Problem, candidate: type, sizing: Sizing, label: str, pinned: dict[str, int], seed: int,
             device, dtype, name: str) -> Case:
    try:
        if len(pinned) == len(sizing.sizes) and set(pinned) == set(sizing.sizes):
            fitted = Sizing(dict(pinned), sizing.original, 0, sizing.budget)  # every size given
        else:
            fitted = fit_sizes(problem, sizing.budget, pinned)
        changed = ", ".join(f"{k} = {v}" for k, v in fitted.sizes.items())
        return build(problem, candidate, fitted, probe="kcert", seed=seed, device=device, dtype=dtype,
                     name=f"{name} @ {label}", description=f"{label}: {changed}").case
    except KernelBenchError as exc:
        return _failed_variant(f"{name} @ {label}", label, exc)


def _placeholder(x):
    return x


def _failed_variant(name: str, label: str, exc: Exception) -> Case:
    """A variant that could not be built: its ref raises the error when Model (the problem) did not build,
    so the sweep reports the shape "not applicable"; when only ModelNew did not, ref runs and prod raises:
    "unsupported"."""
    error = RuntimeError(str(exc))
    ref = _placeholder if str(exc).startswith("candidate") else _Raising(error)
    return Case(name=name, ref=ref, prod=_Raising(error), inputs={"x": Fixed(torch.zeros(1))}, dtype=torch.float32,
                description=label)


# --- entry points ----------------------------------------------------------------------------------------


def cases(problem: str | Path, candidate: str | Path, *, dtype: torch.dtype | None = None,
          budget: int | None = DEFAULT_BUDGET, shrink: bool = True, shapes: bool = True, seed: int = 0,
          device: str | torch.device = "cpu", probes: Sequence[str] = PROBES) -> list[Case]:
    """The cases certifying CANDIDATE's ``ModelNew`` against PROBLEM's ``Model``, one per probe
    (``"kcert"``: signed draws with outliers, with the shape sweep when ``shapes``; ``"problem"``: the
    problem's own ``get_inputs()``). See the module docstring and docs/kernelbench.md."""
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise CaseError(f"kernelbench: budget must be an integer number of elements >= 1 or None, got {budget!r}")
    for p in probes:
        if p not in PROBES:
            raise CaseError(f"kernelbench: probes must be among {PROBES}, got {p!r}")
    prob = load_problem(problem)
    new = load_candidate(candidate)
    sizing = fit_sizes(prob, budget if shrink else None)
    if not shrink:
        sizing = Sizing(sizing.sizes, sizing.original, sizing.elements, budget)
    stem = f"{prob.stem}/{Path(candidate).stem}"
    out = []
    for p in probes:
        what = "kcert probe: signed draws with outliers" if p == "kcert" else "problem probe: get_inputs()"
        name = f"{stem} ({p} probe)"
        b = build(prob, new, sizing, probe=p, dtype=dtype, seed=seed, device=device, name=name,
                  description=f"{what}; {sizing.text()}")
        c = b.case
        if b.note:
            c = replace(c, description=f"{c.description}; {b.note}")
        if p == "kcert" and shapes:
            variants = [_variant(prob, new, sizing, label, pinned, seed, device, c.dtype, name)
                        for label, pinned in sweep_sizes(prob, sizing)]
            if variants:
                c = replace(c, shapes=variants)
        out.append(c)
    return out


def case(problem: str | Path, candidate: str | Path, *, probe: str = "kcert", **kwargs) -> Case:
    """The case under one probe (default the kcert probe, with the shape sweep); see :func:`cases`."""
    return cases(problem, candidate, probes=(probe,), **kwargs)[0]
