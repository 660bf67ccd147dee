"""Hugging Face ``transformers`` modules as kcert kernels and cases.

A :class:`kcert.Case` draws its weights from probes, once, and hands the same tensors to ref,
prod and the float64 oracle. An ``nn.Module`` owns its weights instead. :class:`ModuleKernel`
bridges the two: it takes the case's weight tensors as keyword arguments, maps them onto the
module's parameters (by name, or through a layout function such as Mixtral's fused
``gate_up_proj = cat(w1, w3)``) and calls the module with :func:`torch.func.functional_call`.
The module's own parameter values are never used, so ref and prod see the same weights, and in
kcert's real mode (the oracle, the algebra gate) the module runs on the exact float64 copies.

Buffers stay the module's own unless a kernel recomputes them inside the call. Rotary
embeddings are the case that matters: ``inv_freq`` is a float32 buffer built at initialisation,
and real mode would only see its float32 values (an angle error of ``position * 6e-8``), so the
rotary kernels here rebuild it from the config inside every call; real mode then evaluates its
definition in float64 (the same rule as :mod:`kcert.catalog.rope`).

Weights: ``"draw"`` maps every parameter to a trained-like probe (norm gains around their init
value, 1 or 0, with the catalogue's spread; matrices ``N(0, 1/fan_in)`` with 1% of entries 10x
larger); ``"copy"`` certifies the module's current values (after your own init or a loaded
checkpoint), rounded to the case dtype; a dict gives the probes explicitly. Every parameter is
handed over in the case dtype, as after ``model.to(dtype)``.

Helpers build the cases of the framework controls: :func:`rmsnorm_case`, :func:`rotary_case`,
:func:`attention_case` (``eager`` vs ``sdpa`` by default), :func:`moe_case` (Mixtral's sparse MoE
block against the catalogue's routed layer, or two experts implementations). Modules are built
offline from config objects with random init; nothing is downloaded.

``transformers`` is imported lazily: without it, every helper raises :class:`ExtraMissing`
naming the extra (``pip install "kcert[hf]"``). Written against and tested with transformers
5.24.0 (see docs/adapters.md); :func:`moe_case` also maps the 4.x ModuleList expert layout.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import torch
from torch import nn
from torch.func import functional_call

from ..case import Axes, BucketSpec, Case, Fixed, Gaussian, Labels, Probe
from ..catalog import attention as catalog_attention
from ..catalog import moe as catalog_moe
from ..catalog import norms as catalog_norms
from ..catalog import rope as catalog_rope
from ..catalog.probes import trained_weights
from ..errors import CaseError, KernelError
from ..execution.realmode import in_mode
from . import ExtraMissing

EXTRA = 'pip install "kcert[hf]"'
CHANNELS = Axes(-1)  # default buckets: one per output channel

__all__ = [
    "EXTRA", "ModuleKernel", "RotaryKernel", "attention_case", "module_case", "module_kernel", "module_weights",
    "moe_case", "param_key", "require_transformers", "rmsnorm_case", "rope_buffers", "rotary_case",
    "transformers_version",
]


# --- the optional dependency -------------------------------------------------------------------


def require_transformers(feature: str):
    """Import ``transformers`` or raise :class:`ExtraMissing` naming ``feature`` and the extra."""
    try:
        return importlib.import_module("transformers")
    except ModuleNotFoundError as exc:
        if exc.name != "transformers":
            raise
        raise ExtraMissing(
            f"{feature} needs Hugging Face transformers, which is not installed: {EXTRA}"
        ) from None


def transformers_version() -> str | None:
    """The installed transformers version, or None when it is absent."""
    try:
        return importlib.import_module("transformers").__version__
    except ModuleNotFoundError:
        return None


def _hf(module: str, feature: str):
    require_transformers(feature)
    return importlib.import_module(f"transformers.{module}")


# --- weights -------------------------------------------------------------------------------------


def param_key(name: str) -> str:
    """The kcert weight name of a module parameter: dots become double underscores
    (``experts.gate_up_proj`` -> ``experts__gate_up_proj``), so the name is a valid argument."""
    return name.replace(".", "__")


def _trained_like(name: str, p: torch.Tensor) -> Probe:
    shape = tuple(p.shape)
    if p.dim() == 1:
        init = p.detach().flatten()
        if init.numel() and bool((init == init[0]).all()) and float(init[0]) in (0.0, 1.0):
            # a norm gain, stored around 1 (Llama) or 0 (Gemma's 1 + w): the catalogue's trained spread
            return catalog_norms.gains(shape[0], "llama" if float(init[0]) == 1.0 else "gemma")
        return Gaussian(shape, std=0.02)  # biases
    fan_in = shape[-1] if shape[-1] else 1
    return trained_weights(shape, std=fan_in ** -0.5, large_fraction=0.01, large_scale=10.0)


def _root(module: nn.Module) -> nn.Module:
    """The module whose parameters are the kernel's: the wrapped one of a ``torch.compile``d module
    (an ``OptimizedModule`` names them ``_orig_mod.<name>``), else ``module`` itself."""
    inner = getattr(module, "_orig_mod", None)
    return inner if isinstance(inner, nn.Module) and inner is not module else module


def _prefix(module: nn.Module) -> str:
    return "_orig_mod." if _root(module) is not module else ""


def module_weights(module: nn.Module, mode: str = "draw", *, dtype: torch.dtype = torch.bfloat16) -> dict[str, Probe]:
    """kcert weight probes for every parameter of ``module``, keyed by :func:`param_key`.

    ``"draw"``: trained-like probes (drawn once per run from the case seed); ``"copy"``: the
    module's current values rounded to ``dtype``, as ``kcert.Fixed`` (an uninitialised
    ``torch.empty`` parameter is refused)."""
    if mode not in ("draw", "copy"):
        raise CaseError(f"module_weights: mode must be 'draw' or 'copy', got {mode!r}")
    if not isinstance(module, nn.Module):
        raise CaseError(f"module_weights: module must be a torch.nn.Module, got {type(module).__name__}")
    out: dict[str, Probe] = {}
    for name, p in _root(module).named_parameters():
        if mode == "copy":
            value = p.detach().to(dtype).clone()
            if not bool(torch.isfinite(value).all()):
                raise CaseError(
                    f"module_weights: parameter {name!r} of {type(module).__name__} holds non-finite values in "
                    f"{dtype} (uninitialised torch.empty storage, or out of range); use weights='draw' or "
                    "initialise the module first"
                )
            out[param_key(name)] = Fixed(value)
        else:
            out[param_key(name)] = _trained_like(name, p)
    return out


# --- a module as a kernel --------------------------------------------------------------------------


def _select(out: Any, output: int | Callable[[Any], Any] | None, where: str):
    if callable(output):
        return output(out)
    if output is not None:
        return out[output]
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, torch.Tensor) for o in out):
        return tuple(out)
    kinds = [type(o).__name__ for o in out] if isinstance(out, (tuple, list)) else type(out).__name__
    raise KernelError(
        f"{where}: the module returned {kinds}; pass output=INDEX or output=fn to pick the tensors to certify"
    )


@dataclass(frozen=True, eq=False)
class ModuleKernel:
    """An ``nn.Module`` called as a kcert kernel: ``kernel(**inputs, **weights)``.

    ``inputs``/``weights``: the kcert argument names it takes (exactly these). ``parameters``:
    maps the weight tensors to ``{parameter name: tensor}`` (every parameter of the module).
    ``prepare``: maps the input tensors to the ``(args, kwargs)`` of ``forward``. ``buffers``:
    ``fn(module, inputs) -> {buffer name: tensor}`` recomputed inside every call (so real mode
    sees their definition). ``output``: an index or a function picking the certified tensors."""

    module: nn.Module
    inputs: tuple[str, ...]
    weights: tuple[str, ...]
    parameters: Callable[[dict[str, torch.Tensor]], Mapping[str, torch.Tensor]]
    prepare: Callable[..., tuple[tuple, dict]]
    buffers: Callable[[nn.Module, dict[str, torch.Tensor]], Mapping[str, torch.Tensor]] | None = None
    output: int | Callable[[Any], Any] | None = None
    name: str = "module"

    def __call__(self, **kwargs):
        expected = set(self.inputs) | set(self.weights)
        if set(kwargs) != expected:
            missing, extra = sorted(expected - set(kwargs)), sorted(set(kwargs) - expected)
            raise TypeError(f"{self.name}: takes arguments {sorted(expected)}; missing {missing}, unexpected {extra}")
        kwargs = {k: in_mode(v) for k, v in kwargs.items()}
        state = dict(self.parameters({k: kwargs[k] for k in self.weights}))
        own = dict(_root(self.module).named_parameters())
        if set(state) != set(own):
            raise KernelError(
                f"{self.name}: the parameter map gives {sorted(state)} but the module has parameters {sorted(own)}"
            )
        for key, value in state.items():
            # sizes may differ (the algebra gate re-runs kernels at small shapes, which size-generic
            # forwards such as a norm accept); a different rank is a mapping mistake
            if value.dim() != own[key].dim():
                raise KernelError(
                    f"{self.name}: parameter {key!r} gets shape {tuple(value.shape)}, the module's has "
                    f"{own[key].dim()} dimensions {tuple(own[key].shape)}"
                )
        inputs = {k: kwargs[k] for k in self.inputs}
        if self.buffers is not None:
            state.update(self.buffers(self.module, inputs))
        args, kw = self.prepare(**inputs)
        prefix = _prefix(self.module)  # a compiled module is called as itself, so it runs compiled
        state = {prefix + k: v for k, v in state.items()}
        return _select(functional_call(self.module, state, args, kw), self.output, self.name)


def module_kernel(module: nn.Module, *, inputs: Sequence[str] | Mapping[str, str],
                  params: Mapping[str, str] | Callable[[dict], Mapping[str, torch.Tensor]] | None = None,
                  weights: Sequence[str] | None = None, prepare: Callable[..., tuple[tuple, dict]] | None = None,
                  buffers: Callable | None = None, output: int | Callable | None = None,
                  name: str | None = None) -> ModuleKernel:
    """Wrap ``module`` as a kcert kernel. The module is put in eval mode (dropout, router jitter off).

    ``inputs``: kcert input names passed positionally in this order, or ``{kcert name: forward
    keyword}``. ``params``: ``None`` (every parameter, kcert name :func:`param_key`), ``{kcert
    weight name: parameter name}``, or a function of the weight dict returning every parameter
    (then ``weights`` names the kcert weights it reads). ``prepare``: replaces the default call
    with ``prepare(**inputs) -> (args, kwargs)`` for forwards that need more (masks, cos/sin)."""
    if not isinstance(module, nn.Module):
        raise CaseError(f"module_kernel: module must be a torch.nn.Module, got {type(module).__name__}")
    label = name or type(_root(module)).__name__
    own = [n for n, _ in _root(module).named_parameters()]
    if params is None:
        mapping = {param_key(n): n for n in own}
    elif isinstance(params, Mapping):
        mapping = dict(params)
    elif callable(params):
        if weights is None:
            raise CaseError(f"module_kernel({label}): a params function needs weights=(names of the kcert weights it reads)")
        mapping = None
    else:
        raise CaseError(f"module_kernel({label}): params must be None, a dict or a function, got {type(params).__name__}")
    if mapping is not None:
        unknown = sorted(set(mapping.values()) - set(own))
        uncovered = sorted(set(own) - set(mapping.values()))
        if unknown or uncovered:
            raise CaseError(
                f"module_kernel({label}): params must map kcert weights onto every parameter of the module "
                f"exactly; unknown parameters {unknown}, parameters not covered {uncovered}"
            )
        weights = tuple(mapping)
        parameters = functools.partial(_rename, mapping)
    else:
        parameters = params
    if isinstance(inputs, str) or not isinstance(inputs, (Sequence, Mapping)) or not inputs:
        raise CaseError(f"module_kernel({label}): inputs must be a non-empty sequence of names or a dict, got {inputs!r}")
    if prepare is None:
        prepare = functools.partial(_keywords, dict(inputs)) if isinstance(inputs, Mapping) else \
            functools.partial(_positional, tuple(inputs))
    module.eval()
    return ModuleKernel(module, tuple(inputs), tuple(weights), parameters, prepare, buffers, output, label)


def _rename(mapping: dict[str, str], w: dict) -> dict:
    return {param: w[key] for key, param in mapping.items()}


def _positional(order: tuple[str, ...], **x):
    return tuple(x[k] for k in order), {}


def _keywords(names: dict[str, str], **x):
    return (), {names[k]: v for k, v in x.items()}


def _as_kernel(kernel, inputs: Mapping[str, Probe], output, role: str):
    if isinstance(kernel, nn.Module):
        compiled = " (torch.compile)" if _root(kernel) is not kernel else ""
        return module_kernel(kernel, inputs=tuple(inputs), output=output,
                             name=f"{role} {type(_root(kernel)).__name__}{compiled}")
    if callable(kernel):
        return kernel
    raise CaseError(f"module_case: {role} must be an nn.Module, a ModuleKernel or a callable, got {type(kernel).__name__}")


def module_case(name: str, ref, prod, *, inputs: Mapping[str, Probe], weights: str | Mapping[str, Probe] = "draw",
                buckets: BucketSpec | Sequence[BucketSpec] = CHANNELS, dtype: torch.dtype = torch.bfloat16,
                output: int | Callable | None = None, oracle: Callable | None = None,
                prod_math: Callable | None = None, output_names: Sequence[str] | None = None,
                description: str = "") -> Case:
    """A case whose ref and/or prod are ``nn.Module``s (or :class:`ModuleKernel`s, or plain kernels).

    A bare module is called as ``module(*inputs in order)`` with every parameter from the case
    weights. ``weights="draw"``/``"copy"``: probes from the first module's parameters
    (:func:`module_weights`); both modules must then have the same parameter names and shapes.
    Otherwise pass the probes as a dict named like the kernels' weight arguments."""
    where = f"module_case({name!r})"
    if not isinstance(inputs, Mapping) or not inputs:
        raise CaseError(f"{where}: inputs must be a non-empty dict of name -> probe, got {inputs!r}")
    ref_k, prod_k = _as_kernel(ref, inputs, output, "ref"), _as_kernel(prod, inputs, output, "prod")
    modules = [k for k in (ref_k, prod_k) if isinstance(k, ModuleKernel)]
    if isinstance(weights, str):
        if not modules:
            raise CaseError(f"{where}: weights={weights!r} needs an nn.Module as ref or prod; pass a dict of probes")
        probes = module_weights(modules[0].module, weights, dtype=dtype)
        shapes = {param_key(n): tuple(p.shape) for n, p in _root(modules[0].module).named_parameters()}
        for k in modules[1:]:
            other = {param_key(n): tuple(p.shape) for n, p in _root(k.module).named_parameters()}
            if other != shapes:
                diff = sorted(set(other.items()) ^ set(shapes.items()))[:4]
                raise CaseError(f"{where}: ref and prod modules have different parameters (first differences {diff}); "
                                "weights can only be shared between modules of the same parameter names and shapes")
    elif isinstance(weights, Mapping):
        probes = dict(weights)
    else:
        raise CaseError(f"{where}: weights must be 'draw', 'copy' or a dict of probes, got {type(weights).__name__}")
    names = set(inputs) | set(probes)
    for role, k in (("ref", ref_k), ("prod", prod_k)):
        if isinstance(k, ModuleKernel) and set(k.inputs) | set(k.weights) != names:
            raise CaseError(
                f"{where}: {role} takes {sorted(set(k.inputs) | set(k.weights))} but the case provides {sorted(names)}"
            )
    return Case(name=name, ref=ref_k, prod=prod_k, inputs=dict(inputs), weights=probes, buckets=buckets, dtype=dtype,
                oracle=oracle, prod_math=prod_math, output_names=output_names, description=description)


# --- norms ---------------------------------------------------------------------------------------


def _norm_kind(module: nn.Module) -> str:
    if "gemma" in type(module).__name__.lower():
        return "gemma"
    w = module.weight.detach()
    return "gemma" if bool((w == 0).all()) else "llama"


def rmsnorm_case(module: nn.Module | None = None, *, name: str = "hf_rmsnorm", kind: str | None = None,
                 ref: Callable | None = None, dtype: torch.dtype = torch.bfloat16, **contract) -> Case:
    """An HF RMSNorm module (default: ``LlamaRMSNorm(512, eps=1e-5)``) as prod against the catalogue.

    ``kind``: ``"llama"`` (``w * round(normalize(x))``, catalogue ``rms_norm_hf``) or ``"gemma"``
    (``round(normalize(x) * (1 + w))``, catalogue ``gemma_rms_norm``); default from the class name
    or a zero-initialised gain. The eps is the module's. ``contract``: the catalogue norm contract
    (``shape``, ``shift``, ``outliers``, ``gains_kind`` ...); the hidden size must be the module's."""
    if module is None:
        llama = _hf("models.llama.modeling_llama", "rmsnorm_case")
        module = llama.LlamaRMSNorm(catalog_norms.HIDDEN, eps=catalog_norms.LLAMA_EPS)
    weight = getattr(module, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 1:
        raise CaseError(f"rmsnorm_case: {type(module).__name__} has no 1-D .weight gain")
    eps = getattr(module, "variance_epsilon", getattr(module, "eps", None))
    if not isinstance(eps, float):
        raise CaseError(f"rmsnorm_case: {type(module).__name__} has no float eps (.variance_epsilon or .eps)")
    kind = kind or _norm_kind(module)
    ops = {"llama": catalog_norms.LLAMA_RMSNORM, "gemma": catalog_norms.GEMMA_RMSNORM}
    if kind not in ops:
        raise CaseError(f"rmsnorm_case: kind must be 'llama' or 'gemma', got {kind!r}")
    op = ops[kind]
    shape = tuple(contract.pop("shape", (1, 64, weight.numel())))
    if shape[-1] != weight.numel():
        raise CaseError(f"rmsnorm_case: shape {shape} does not end with the module's hidden size {weight.numel()}")
    prod = module_kernel(module, inputs=("x",), params={"w": "weight"}, name=type(module).__name__)
    return op.case(name, prod, ref=ref or functools.partial(op.reference, eps=eps), dtype=dtype, shape=shape,
                   description=f"HF {type(module).__name__} (eps {eps:g}) vs catalogue {op.name}", **contract)


# --- rotary embeddings ---------------------------------------------------------------------------


def rope_buffers(rotary: nn.Module, device=None) -> dict[str, torch.Tensor]:
    """The rotary module's frequency buffers rebuilt from its config (inside real mode: in float64)."""
    fn = getattr(rotary, "rope_init_fn", None)
    if fn is None:
        rope_type = getattr(rotary, "rope_type", "default")
        if rope_type == "default":
            fn = rotary.compute_default_rope_parameters
        else:
            fn = _hf("modeling_rope_utils", "rope_buffers").ROPE_INIT_FUNCTIONS[rope_type]
    inv_freq, _ = fn(rotary.config, device=device)
    own = dict(rotary.named_buffers())
    out = {"inv_freq": inv_freq}
    if "original_inv_freq" in own:
        out["original_inv_freq"] = inv_freq.clone()
    return out


def _rope_settings(config) -> tuple[str, float, dict]:
    params = getattr(config, "rope_parameters", None)
    if isinstance(params, Mapping) and "rope_theta" in params:
        params = dict(params)
        return params.get("rope_type", "default"), float(params["rope_theta"]), params
    scaling = dict(getattr(config, "rope_scaling", None) or {})
    rope_type = scaling.get("rope_type", scaling.get("type", "default"))
    return rope_type, float(config.rope_theta), scaling


def _rope_model(config) -> catalog_rope.RopeModel:
    """The catalogue's RoPE model matching an HF config (default and llama3 rope types)."""
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    if getattr(config, "partial_rotary_factor", 1.0) != 1.0:
        raise CaseError("rotary_case: partial_rotary_factor != 1 has no catalogue reference here; pass ref=")
    rope_type, base, p = _rope_settings(config)
    context = int(config.max_position_embeddings)
    if rope_type == "default":
        rule, original = functools.partial(catalog_rope.default_frequencies, dim=head_dim, base=base), None
    elif rope_type == "llama3":
        original = int(p["original_max_position_embeddings"])
        rule = functools.partial(catalog_rope.llama3_frequencies, dim=head_dim, base=base, factor=float(p["factor"]),
                                 low_freq_factor=float(p["low_freq_factor"]),
                                 high_freq_factor=float(p["high_freq_factor"]),
                                 original_max_position_embeddings=original)
    else:
        raise CaseError(f"rotary_case: rope_type {rope_type!r} has no automatic catalogue reference (default, "
                        "llama3); pass ref= (e.g. a kcert.catalog.rope kernel with its frequency rule)")
    return catalog_rope.RopeModel(f"hf-{rope_type}", head_dim, base, context, rule, original)


@dataclass(frozen=True, eq=False)
class RotaryKernel:
    """``(q, k, position_ids) -> apply(q, k, *rotary(q, position_ids))``: an HF rotary module and
    its ``apply_rotary_pos_emb``; with ``rebuild=True`` the frequency buffers are recomputed from
    the config inside every call (bitwise the init-time buffers in float32; exact in real mode)."""

    rotary: nn.Module
    apply: Callable
    rebuild: bool = True

    def __call__(self, q, k, position_ids):
        q, k = in_mode(q), in_mode(k)
        state = rope_buffers(self.rotary, q.device) if self.rebuild else {}
        cos, sin = functional_call(self.rotary, state, (q, position_ids))
        return self.apply(q, k, cos, sin)


def rotary_case(config=None, *, name: str = "hf_rotary", rotary: nn.Module | None = None,
                apply: Callable | None = None, ref: Callable | None = None, rebuild_frequencies: bool = True,
                dtype: torch.dtype = torch.bfloat16, **contract) -> Case:
    """HF rotary embedding + ``apply_rotary_pos_emb`` as prod against the catalogue NeoX RoPE with
    the config's frequencies (default: Llama-2, head_dim 128, base 1e4, 4096 positions).
    ``contract``: the catalogue RoPE contract (``heads``, ``kv_heads``, ``seq``, ``low``, ``high`` ...)."""
    llama = _hf("models.llama.modeling_llama", "rotary_case")
    if config is None:
        config = llama.LlamaConfig(hidden_size=256, num_attention_heads=2, num_key_value_heads=1, head_dim=128,
                                   max_position_embeddings=4096)
    rotary = rotary if rotary is not None else llama.LlamaRotaryEmbedding(config)
    apply = apply or llama.apply_rotary_pos_emb
    model = _rope_model(config)
    op = catalog_rope.rope_operator(model)
    rotary.eval()
    prod = RotaryKernel(rotary, apply, rebuild_frequencies)
    how = "frequencies rebuilt in the call" if rebuild_frequencies else "init-time float32 inv_freq buffer"
    return op.case(name, prod, ref=ref, dtype=dtype,
                   description=f"HF {type(rotary).__name__} + apply_rotary_pos_emb ({how}) vs catalogue {op.name}",
                   **contract)


# --- attention -------------------------------------------------------------------------------------


def _causal_mask(config, hidden_states, attention_mask, position_ids):
    try:
        create = _hf("masking_utils", "attention_case").create_causal_mask
    except (ModuleNotFoundError, AttributeError):
        raise ExtraMissing("attention_case needs transformers.masking_utils.create_causal_mask (transformers >= 4.53): "
                           f"{EXTRA}") from None
    params = inspect.signature(create).parameters
    kw = {"config": config, "attention_mask": attention_mask, "position_ids": position_ids}
    kw["inputs_embeds" if "inputs_embeds" in params else "input_embeds"] = hidden_states
    kw["cache" if "cache" in params else "past_key_values"] = None
    if "cache_position" in params:
        kw["cache_position"] = torch.arange(hidden_states.shape[1], device=hidden_states.device)
    return create(**kw)


def _attention_prepare(config, rotary, hidden_states, position_ids, attention_mask=None):
    # cos/sin and the mask are built inside the call, as the model builds them, so that real mode
    # follows their definitions (float64 frequencies, finfo(float64).min in the eager mask).
    cos_sin = functional_call(rotary, rope_buffers(rotary, hidden_states.device), (hidden_states, position_ids))
    mask = _causal_mask(config, hidden_states, attention_mask, position_ids)
    return (hidden_states,), {"position_embeddings": cos_sin, "attention_mask": mask}


def attention_case(config=None, *, name: str = "hf_attention", ref_impl: str = "eager", prod_impl: str = "sdpa",
                   attention_cls=None, rotary_cls=None, batch: int = 1, seq: int = 128, shift: float = 0.1,
                   padding: str | None = None, weights: str | Mapping[str, Probe] = "draw",
                   dtype: torch.dtype = torch.bfloat16) -> Case:
    """One HF attention layer (default ``LlamaAttention``, 4 query heads on 2 kv heads, head_dim 64)
    run with two attention implementations (``config._attn_implementation``) on the same weights.

    Inputs: ``hidden_states`` (batch, seq, hidden) ~ N(shift, 1), ``position_ids`` 0..seq-1, and with
    ``padding="right"|"left"`` a (batch, seq) ``attention_mask`` of valid tokens. cos/sin come from
    the model's rotary embedding and the 4-D mask from ``create_causal_mask``, per implementation,
    as the model builds them. The output is after ``o_proj``, which mixes heads: buckets are the
    hidden channels (``Axes(-1)``)."""
    llama = _hf("models.llama.modeling_llama", "attention_case")
    if config is None:
        config = llama.LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                                   intermediate_size=512, max_position_embeddings=4096)
    attention_cls = attention_cls or llama.LlamaAttention
    rotary_cls = rotary_cls or llama.LlamaRotaryEmbedding
    inputs: dict[str, Probe] = {
        "hidden_states": Gaussian((batch, seq, config.hidden_size), shift=shift),
        "position_ids": Fixed(torch.arange(seq).expand(batch, seq).clone()),
    }
    if padding is not None:
        inputs["attention_mask"] = catalog_attention.padding_mask(batch, seq, padding)
    kernels = []
    for impl in (ref_impl, prod_impl):
        cfg = copy.deepcopy(config)
        cfg._attn_implementation = impl
        module, rotary = attention_cls(cfg, layer_idx=0), rotary_cls(cfg)
        rotary.eval()
        kernels.append(module_kernel(module, inputs=tuple(inputs), output=0, name=f"{attention_cls.__name__}[{impl}]",
                                     prepare=functools.partial(_attention_prepare, cfg, rotary)))
    return module_case(name, kernels[0], kernels[1], inputs=inputs, weights=weights, dtype=dtype,
                       description=f"HF {attention_cls.__name__}: {ref_impl} (ref) vs {prod_impl} (prod), "
                                   f"{config.num_attention_heads} heads / {config.num_key_value_heads} kv heads, "
                                   f"seq {seq}" + (f", {padding} padding" if padding else ""))


# --- MoE -------------------------------------------------------------------------------------------

_MOE_WEIGHTS = ("w_gate", "w1", "w3", "w2")


def _mixtral_fused(w):
    return {"gate.weight": w["w_gate"], "experts.gate_up_proj": torch.cat((w["w1"], w["w3"]), dim=1),
            "experts.down_proj": w["w2"]}


def _mixtral_list(n_experts: int, w):
    out = {"gate.weight": w["w_gate"]}
    for e in range(n_experts):
        out[f"experts.{e}.w1.weight"] = w["w1"][e]
        out[f"experts.{e}.w3.weight"] = w["w3"][e]
        out[f"experts.{e}.w2.weight"] = w["w2"][e]
    return out


def mixtral_parameters(block: nn.Module) -> Callable[[dict], dict]:
    """Map the catalogue's Mixtral weights (``w_gate`` (E, H), ``w1``/``w3`` (E, F, H), ``w2`` (E, H, F))
    onto an HF Mixtral sparse MoE block: the fused layout of transformers 5 (``gate_up_proj =
    cat(w1, w3)`` along the output rows) or the per-expert ``w1/w2/w3`` Linear layers of 4.x."""
    names = {n for n, _ in block.named_parameters()}
    if {"gate.weight", "experts.gate_up_proj", "experts.down_proj"} == names:
        if getattr(block.experts, "is_transposed", False):
            raise CaseError("moe_case: transposed fused expert weights are not mapped; pass a params function")
        return _mixtral_fused
    if "gate.weight" in names and "experts.0.w1.weight" in names:
        return functools.partial(_mixtral_list, len(block.experts))
    raise CaseError(f"moe_case: unknown Mixtral block layout, parameters {sorted(names)[:6]}...")


def _moe_output(out):
    out = out[0] if isinstance(out, tuple) else out  # 4.x returns (hidden, router_logits)
    return out[0]


def _moe_prepare(x):
    return (x[None],), {}


def moe_case(config=None, *, name: str = "hf_moe", ref: str = "catalogue", prod_impl: str = "eager",
             block_cls=None, tokens: int = 128, dtype: torch.dtype = torch.bfloat16) -> Case:
    """HF Mixtral sparse MoE block (default 8 experts, top-2, hidden 256, ffn 64) as prod.

    ``ref="catalogue"``: the catalogue's routed Mixtral layer (``kcert.catalog.moe.MOE_LAYER``) on
    its weight contract; ``ref="<impl>"``: the same HF block with another experts implementation
    (``config._experts_implementation``: "eager", "batched_mm", "grouped_mm"). Buckets: the top-1
    expert of each token (catalogue labels)."""
    mixtral = _hf("models.mixtral.modeling_mixtral", "moe_case")
    if config is None:
        config = mixtral.MixtralConfig(hidden_size=256, intermediate_size=64, num_local_experts=8,
                                       num_experts_per_tok=2)
    block_cls = block_cls or mixtral.MixtralSparseMoeBlock
    n_experts, top_k = int(config.num_local_experts), int(config.num_experts_per_tok)

    def kernel(impl: str) -> ModuleKernel:
        cfg = copy.deepcopy(config)
        if hasattr(cfg, "_experts_implementation"):
            cfg._experts_implementation = impl
        elif impl != "eager":
            raise CaseError(f"moe_case: this transformers has no experts implementations; {impl!r} needs >= 5")
        block = block_cls(cfg)
        return module_kernel(block, inputs=("x",), weights=_MOE_WEIGHTS, params=mixtral_parameters(block),
                             prepare=_moe_prepare, output=_moe_output, name=f"{block_cls.__name__}[{impl}]")

    prod = kernel(prod_impl)
    ref_fn = functools.partial(catalog_moe.mixtral_moe_layer, top_k=top_k) if ref == "catalogue" else kernel(ref)
    buckets = Labels(catalog_moe.top1_expert_labels(top_k), count=n_experts, name="top-1 expert")
    ref_label = "catalogue mixtral_moe_layer" if ref == "catalogue" else f"HF experts {ref!r}"
    return catalog_moe.MOE_LAYER.case(
        name, prod, ref=ref_fn, dtype=dtype, buckets=buckets, tokens=tokens, hidden=int(config.hidden_size),
        n_experts=n_experts, ffn=int(config.intermediate_size),
        description=f"HF {block_cls.__name__} (experts {prod_impl!r}) vs {ref_label}, {n_experts} experts top-{top_k}")
