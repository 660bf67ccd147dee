"""Result types of a training comparison (``kcert train-compare``, docs/training.md): numpy only.
``kcert.training`` builds them, ``report.training`` renders them; derived numbers are their methods."""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field

import numpy as np

from ..stats.training import PairedStatistic, pointwise_interval


class TrainingVerdict(enum.Enum):
    DIFFERS = "training differs"
    INDISTINGUISHABLE = "indistinguishable at this horizon"
    INCONCLUSIVE = "inconclusive"

    @property
    def exit_code(self) -> int:
        """0 indistinguishable, 1 differs, 3 inconclusive (2 is a usage error), like ``kcert certify``."""
        return {TrainingVerdict.INDISTINGUISHABLE: 0, TrainingVerdict.DIFFERS: 1, TrainingVerdict.INCONCLUSIVE: 3}[self]


@dataclass(frozen=True, eq=False)
class ArmRun:
    """One arm of one seed: the loss per step (on that step's batch, before the update; nan after a
    non-finite loss, where the run stops), the held-out loss at ``eval_steps``, the final norm
    parameters (``norm<site>_w``, ``norm<site>_b``) and the RMS of each channel's column in the
    matrices that read the norm (``norm<site>_downstream``), the norm parameters at every
    evaluation (name -> (evaluations, channels)) and the step whose loss was first non-finite
    (None if none)."""

    arm: str
    train_loss: np.ndarray
    eval_steps: np.ndarray
    eval_loss: np.ndarray
    norm_params: dict[str, np.ndarray]
    nonfinite_step: int | None
    seconds: float
    norm_trajectory: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def final_loss(self) -> float:
        return float(self.eval_loss[-1]) if self.eval_loss.size else math.nan

    @property
    def finite(self) -> bool:
        return self.nonfinite_step is None


@dataclass(frozen=True, eq=False)
class SeedRun:
    """Both arms of one seed. ``distance``: ``|theta_prod - theta_ref| / |theta_ref - theta_init|``
    over every parameter at the end: how far apart the arms ended against how far training moved."""

    seed: int
    ref: ArmRun
    prod: ArmRun
    distance: float


@dataclass(frozen=True, eq=False)
class DriftResult:
    """The drift prod - ref of every norm channel's gain at the end, paired by seed.

    ``differences``: (seeds, channels); ``channel_names``: ``site:channel``; ``seed_spread``:
    per channel, the sd over seeds of ref's final gain (gains start equal in every seed, so this
    is how far the seed alone moves a channel); ``coherence``: the sign-flip test's statistic and
    p-value; ``mean``: the drift averaged over channels, as a paired statistic."""

    differences: np.ndarray
    channel_names: tuple[str, ...]
    seed_spread: np.ndarray
    statistic: float
    p_value: float
    mean: PairedStatistic

    @property
    def rms(self) -> float:
        """RMS over seeds and channels of the paired drift."""
        return float(np.sqrt(np.nanmean(self.differences ** 2))) if self.differences.size else math.nan

    def seed_mean(self) -> tuple[np.ndarray, np.ndarray]:
        """Per channel: the drift's mean over seeds and its standard error (zeros with one seed)."""
        d = self.differences
        mean = d.mean(axis=0)
        se = d.std(axis=0, ddof=1) / np.sqrt(d.shape[0]) if d.shape[0] > 1 else np.zeros_like(mean)
        return mean, se

    @property
    def rms_seed_spread(self) -> float:
        return float(np.sqrt(np.nanmean(self.seed_spread ** 2))) if self.seed_spread.size else math.nan


@dataclass(frozen=True)
class DriftPrediction:
    """The predicted and measured drift of the norm gains.

    ``predicted``: per model channel (all norm sites, gains), full compensation. ``slope``: per
    seed, the least-squares slope of the measured drift on ``predicted``, as a one-sample
    statistic over seeds. ``moved_ulps``: the median over predicted channels of how far the gain
    travelled during training (ref arm), in ULPs of the working dtype at the effective gain: well
    above 1, a bias that depends on the gain's value (a rounding of ``1 + w``) cannot have stayed
    what the certificate measured."""

    available: bool
    reason: str
    predicted: np.ndarray | None = None
    channels: int = 0  # model channels with a non-zero prediction
    predicted_rms: float = math.nan  # over those channels
    coherent_rms: float = math.nan  # RMS over those channels of the drift's mean over seeds
    noise_rms: float = math.nan  # RMS over those channels of the drift's sd over seeds
    slope: PairedStatistic | None = None
    moved_ulps: float = math.nan
    mean_relative_error: float = math.nan  # mean delta over the predicted channels (its sign: coherent?)
    slope_steps: np.ndarray | None = None  # the slope at every evaluation: steps, and mean/low/high per step
    slope_path: np.ndarray | None = None  # (evaluations, 3)
    effective_slope: PairedStatistic | None = None  # the same for the channel's effective scale


@dataclass(frozen=True)
class CertificateSummary:
    """The certificate the prediction reads, reduced to what the comparison reports."""

    verdict: str
    gates: dict
    replicates: int
    seed: int
    bias_findings: int  # buckets at FAIL or WARN
    significant: int  # buckets |z| > z* on the sign-aligned statistic of the first output


@dataclass(frozen=True, eq=False)
class TrainingComparison:
    case: str
    slot: str
    where: str
    dtype: str
    config: dict
    seeds: tuple[int, ...]
    runs: tuple[SeedRun, ...]
    final_loss: PairedStatistic
    loss_curve: PairedStatistic
    drift: DriftResult
    adjusted_p: dict
    verdict: TrainingVerdict
    reason: str
    alpha: float
    power: float
    prediction: DriftPrediction
    certificate: CertificateSummary | None
    wall_time_s: float
    resumed_seeds: tuple[int, ...] = ()
    entropy_rate: float = math.nan
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    @property
    def expected_from_certificate(self) -> str | None:
        """What kcert's verdict says training should show: FAIL -> differs, PASS -> indistinguishable."""
        if self.certificate is None:
            return None
        return {"FAIL": TrainingVerdict.DIFFERS.value, "PASS": TrainingVerdict.INDISTINGUISHABLE.value}.get(
            self.certificate.verdict, "review (WARN/SKIPPED)")

    @property
    def median_distance(self) -> float:
        """The median over seeds (NaN-skipping) of the final parameters' |prod - ref| / |ref - init|."""
        return float(np.nanmedian([r.distance for r in self.runs]))

    def mean_loss(self, arm: str, window: int = 1) -> np.ndarray:
        """One arm's (``"ref"`` or ``"prod"``) training loss per step, the mean over seeds (NaN-skipping),
        after a moving average of ``window`` steps: the i-th value ends at step i + window."""
        curves = np.stack([getattr(r, arm).train_loss for r in self.runs])
        return np.convolve(np.nanmean(curves, axis=0), np.ones(window) / window, mode="valid")

    def curve_band(self, level: float | None = None, window: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per step: mean over seeds of prod - ref training loss and a t interval (pointwise),
        after a moving average of ``window`` steps."""
        d = np.stack([r.prod.train_loss - r.ref.train_loss for r in self.runs])
        if window > 1:
            kernel = np.ones(window) / window
            d = np.stack([np.convolve(row, kernel, mode="valid") for row in d])
        return pointwise_interval(d, level or 1 - self.alpha)
