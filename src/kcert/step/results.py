"""The results of a step certification: frozen, read by the reports (docs/json-schema.md,
``kcert.step-certificate/1``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..certificate import Certificate
from ..stats.aggregation import AggregationFinding, sentence
from ..verdict import Verdict
from .config import StepConfig


@dataclass(frozen=True)
class OutputDiagnosis:
    """The aggregation diagnosis of one output at one configuration (docs/training-graph.md).
    ``rank_disagreement``: the largest relative difference between a rank's gradient and rank 0's
    for a replicated parameter (None: not a replicated gradient, or one rank)."""

    output: str
    finding: AggregationFinding
    replicates: int
    decomposable: bool  # the oracle's output is the token-weighted sum of its cells' (hypotheses tested)
    rank_disagreement: float | None = None

    @property
    def sentence(self) -> str:
        text = sentence(self.output, self.finding)
        if self.rank_disagreement:
            text += (f"; the ranks hold different gradients after the step (up to {self.rank_disagreement:.2g} "
                     f"relative to rank 0's): not reduced across the ranks")
        return text


@dataclass(frozen=True)
class Cost:
    """Where a configuration's time went: launching the ranks, the certification (and within it the
    calls of ref, the oracle, and prod's ranks as the parent waited for them), the diagnosis."""

    launch_s: float
    certify_s: float
    diagnose_s: float
    total_s: float
    seconds: dict  # role -> seconds within the certification: ref, oracle, prod, prod_real
    calls: dict
    replicates: int

    @property
    def kcert_s(self) -> float:
        """The certification's own work: draws, per-replicate reductions, the gates."""
        return max(0.0, self.certify_s - sum(self.seconds.values()))


@dataclass(frozen=True)
class ConfigResult:
    """One configuration: its certificate, the diagnosis of the outputs that did not PASS, and the
    ranks' disagreement on replicated gradients ((output, largest relative difference) pairs)."""

    config: StepConfig
    certificate: Certificate
    diagnoses: tuple[OutputDiagnosis, ...]
    rank_disagreement: tuple[tuple[str, float], ...]
    cost: Cost

    @property
    def verdict(self) -> Verdict:
        return self.certificate.verdict

    def output_verdicts(self) -> dict[str, Verdict]:
        """Each output's worst verdict over the bias and variance gates and its algebra line."""
        c = self.certificate
        out: dict[str, Verdict] = {o.name: Verdict.PASS for o in c.outputs}
        for results in (c.bias, c.variance, c.algebra.outputs):
            for r in results:
                out[r.output] = Verdict.worst([out.get(r.output, Verdict.PASS), r.verdict])
        return out


@dataclass(frozen=True)
class StepCertificate:
    """What :func:`kcert.certify_step` returns: one :class:`ConfigResult` per configuration and the
    sweep's configuration dependence.

    Attributes
    ----------
    step : str
        The step's name.
    configs : tuple of ConfigResult
        Each configuration's certificate, diagnosis, rank disagreement and cost.
    dependence : str
        Which property of the configuration separates the configurations that deviate from those that
        agree ("deviates exactly at the configurations with accumulation > 1").
    description : dict
        The step's declaration (batch probe, dtype, shards).
    parameters : tuple of (str, tuple of int)
        The certified parameters in the order of the ``grad`` output, with their shapes.
    seed, replicates : int
        The run's seed and replicates per configuration (first look).
    wall_time_s : float
        The whole sweep's wall time.

    Examples
    --------
    See :func:`kcert.certify_step`.
    """

    step: str
    configs: tuple[ConfigResult, ...]
    dependence: str
    description: dict
    parameters: tuple[tuple[str, tuple[int, ...]], ...]
    seed: int
    replicates: int
    command: str
    wall_time_s: float

    @property
    def verdict(self) -> Verdict:
        """The worst verdict over the configurations."""
        return Verdict.worst([c.verdict for c in self.configs])

    def channel_name(self, channel: int) -> str:
        """``<parameter>[row]`` of a bucket of the ``grad`` output (a parameter channel)."""
        first = 0
        for name, shape in self.parameters:
            count = shape[0] if shape else 1
            if channel < first + count:
                return f"{name}[{channel - first}]" if shape else name
            first += count
        return f"channel {channel}"

    @property
    def deciding(self) -> ConfigResult:
        """The configuration whose verdict is the step's (the first of the worst)."""
        return max(self.configs, key=lambda c: c.verdict.severity)
