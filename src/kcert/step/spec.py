"""What a user declares to certify a training step: :class:`Step` (docs/training-graph.md)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import CaseError
from .batch import TokenBatch
from .config import DEFAULT_CONFIGS, StepConfig

_FLOATING = (torch.float64, torch.float32, torch.float16, torch.bfloat16)


@dataclass(frozen=True, eq=False)
class Step:
    """A training step certified across gradient accumulation, ranks and loss aggregation (L2).

    ref is the step as one process on the whole batch: ``loss(model, batch)``, one backward. prod is
    the user's distributed step: ``prod(model, ctx)`` on each of ``world`` ranks that kcert launches
    (``torch.distributed`` with gloo, one process per rank, started once per configuration), running
    ``ctx.micro_batches`` with its own loss aggregation and gradient reduction. Both start from the
    same parameters, drawn once per run (``model()`` under a seed derived from the run's seed). The
    certified outputs are the loss, every parameter's gradient (``grad.<name>``) and, when asked, the
    gradient norm; the oracle is ref's step in real mode (float64). Certify with
    :func:`kcert.certify_step`, or ``kcert step FILE.py``.

    Parameters
    ----------
    name : str
        The step's name (non-empty).
    model : callable
        ``model() -> torch.nn.Module``, with random weights (built from a config: no download). Called
        under a seed derived from the run's seed, in the parent process and in every rank; dropout
        must be off (ref and prod would draw different masks).
    loss : callable
        ``loss(model, batch) -> scalar tensor``: ref's loss on the whole batch (``batch`` a dict of
        tensors, :func:`kcert.step.batch.unpack`). ref's gradients are its autograd gradients.
    prod : callable
        ``prod(model, ctx) -> loss tensor or {"loss": ..., "grad_norm": ...}``: one rank's step
        (:class:`kcert.StepContext`). It leaves the reduced gradients in ``param.grad`` (kcert
        clears them before every call). Only rank 0's returned values are certified.
    batch : kcert.TokenBatch
        The batch probe, redrawn per replicate.
    dtype : torch.dtype, default torch.bfloat16
        The compute precision. With ``autocast`` and a 16-bit dtype, ref's loss and prod's step run
        under ``torch.autocast`` (float32 parameters and gradients, 16-bit matrix products).
    configs : sequence of kcert.StepConfig, optional
        The configurations prod is certified at (a sweep is one call); default: accumulation 2 and
        4 with a partial window of 3, 2 ranks, 2 ranks x accumulation 2.
    shards : dict of str -> int, default {}
        Parameters split among the ranks under ``split="tensor"``: name -> the dimension along which
        rank ``r`` holds chunk ``r`` (``torch.tensor_split``); kcert assembles the gradient from each
        rank's chunk. Every other parameter is replicated: kcert reads rank 0's gradient and records
        whether the ranks agree.
    grad_norm : bool, default False
        Also certify the global gradient norm (ref: the 2-norm of all its gradients; prod: the
        ``"grad_norm"`` its step returns, e.g. the value its clipping used).
    autocast : bool, default True
        Run the 16-bit ``dtype`` under ``torch.autocast`` (False: the model's own dtypes).
    parameters : sequence of str or None, default None
        The parameters whose gradients are certified (default: every parameter that requires grad).
    training_dtype : torch.dtype or None, default None
        The precision harm is judged in (``kcert.Case``'s ``training_dtype``).
    description : str, default ""
        Free text recorded in the report.

    Raises
    ------
    kcert.CaseError
        If a field is malformed (not callable, an unknown dtype, a batch that is not a TokenBatch, an
        empty or non-config sweep).

    See Also
    --------
    kcert.certify_step : certify it.
    kcert.StepConfig, kcert.TokenBatch, kcert.StepContext : its parts.

    Examples
    --------
    >>> import torch, kcert
    >>> def model():
    ...     return torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16))
    >>> def loss(model, batch):
    ...     logits = model(batch["input_ids"]).float()
    ...     return torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["shift_labels"].flatten())
    >>> step = kcert.Step(name="tiny", model=model, loss=loss, prod=lambda model, ctx: None,
    ...                   batch=kcert.TokenBatch(sequences=4, length=8, vocab=16),
    ...                   configs=[kcert.StepConfig(accumulation=2)], dtype=torch.float32)
    >>> [c.label for c in step.configs]
    ['k=2']
    """

    name: str
    model: Callable[[], torch.nn.Module]
    loss: Callable[[torch.nn.Module, dict], torch.Tensor]
    prod: Callable[[torch.nn.Module, Any], Any]
    batch: TokenBatch
    dtype: torch.dtype = torch.bfloat16
    configs: Sequence[StepConfig] = DEFAULT_CONFIGS
    shards: Mapping[str, int] = field(default_factory=dict)
    grad_norm: bool = False
    autocast: bool = True
    parameters: Sequence[str] | None = None
    training_dtype: torch.dtype | None = None
    description: str = ""

    def __post_init__(self):
        where = f"step {self.name!r}" if isinstance(self.name, str) else "step"
        if not isinstance(self.name, str) or not self.name.strip():
            raise CaseError(f"{where}: name must be a non-empty string, got {self.name!r}")
        for role in ("model", "loss", "prod"):
            if not callable(getattr(self, role)):
                raise CaseError(f"{where}: {role} must be callable, got {type(getattr(self, role)).__name__}")
        if not isinstance(self.batch, TokenBatch):
            raise CaseError(f"{where}: batch must be a kcert.TokenBatch, got {type(self.batch).__name__}")
        for name in ("dtype", "training_dtype"):
            value = getattr(self, name)
            if not (value in _FLOATING or (name == "training_dtype" and value is None)):
                raise CaseError(f"{where}: {name} must be one of {', '.join(map(str, _FLOATING))}, got {value!r}")
        configs = tuple(self.configs) if isinstance(self.configs, (list, tuple)) else None
        if not configs or not all(isinstance(c, StepConfig) for c in configs):
            raise CaseError(f"{where}: configs must be a non-empty sequence of kcert.StepConfig, got {self.configs!r}")
        labels = [c.label for c in configs]
        if len(set(labels)) != len(labels):
            raise CaseError(f"{where}: configs lists a configuration twice: {labels}")
        object.__setattr__(self, "configs", configs)
        if not isinstance(self.shards, Mapping) or not all(
                isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) for k, v in self.shards.items()):
            raise CaseError(f"{where}: shards must be a dict of parameter name -> dimension (int), got {self.shards!r}")
        object.__setattr__(self, "shards", dict(self.shards))
        for flag in ("grad_norm", "autocast"):
            if not isinstance(getattr(self, flag), bool):
                raise CaseError(f"{where}: {flag} must be True or False, got {getattr(self, flag)!r}")
        if self.parameters is not None:
            if isinstance(self.parameters, str) or not all(isinstance(p, str) for p in self.parameters):
                raise CaseError(f"{where}: parameters must be a sequence of parameter names, got {self.parameters!r}")
            object.__setattr__(self, "parameters", tuple(self.parameters))

    @property
    def autocast_dtype(self) -> torch.dtype | None:
        """The dtype ref's loss and prod's step run under ``torch.autocast``, or None."""
        return self.dtype if self.autocast and self.dtype in (torch.bfloat16, torch.float16) else None

    def describe(self) -> dict:
        return {"name": self.name, "dtype": str(self.dtype).removeprefix("torch."), "batch": self.batch.describe(),
                "configs": [c.describe() for c in self.configs], "shards": dict(self.shards),
                "grad_norm": self.grad_norm, "autocast": self.autocast_dtype is not None,
                "description": self.description}
