"""The settings of one certification, each written once: its default, its domain rule, its command-line
flag and help, and whether it enters the reproduce command.

:class:`Settings` is the one source. :func:`kcert.certify` builds it by keyword
(``certify(case, settings=None, **overrides)``) and checks it (:meth:`Settings.check`); the command line
generates its shared options from the fields' :class:`Flag` (``kcert.commands.options``) and checks them
with the same rules before any heavy import (:func:`check_values`); the reproduce command
(``kcert.commands.options.run_flags``) and the library call (:func:`kcert.reproduce.library_call`) name
the settings whose field says ``reproduce`` when they differ from the default. Torch-free: the device is a string until
:meth:`Settings.check` turns it into a ``torch.device``.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import parameters
from .errors import ParameterError

if TYPE_CHECKING:
    import torch

    from .stats.thresholds import BiasThresholds, VarianceThresholds

DEFAULT_HORIZON = 6.25e5
__all__ = ["DEFAULT_HORIZON", "Flag", "Settings"]


@dataclass(frozen=True)
class Flag:
    """How the command line spells a setting.

    ``help`` may hold ``{default}`` (the command's default: ``on``/``off`` for a toggle, ``:g`` for a
    float) and ``{why}`` (a command's note on that default). ``kind``: "value", "switch" (``--x``) or
    "toggle" (``--x`` / ``--no-x``); ``parse`` names the parser of :mod:`kcert.commands.options`
    ("integer", "float", "bytes", "duration"; None: the text as it is)."""

    names: tuple[str, ...]
    help: str
    kind: str = "value"
    parse: str | None = None
    metavar: str | None = None
    advanced: bool = False

    @property
    def name(self) -> str:
        return self.names[0]

    def help_text(self, default, why: str = "") -> str:
        shown = ("on" if default else "off") if self.kind == "toggle" else default
        return self.help.format(default=shown, why=why)


def _setting(default, *, rule: Callable[[str, Any], Any] | None = None, flag: Flag | None = None,
             reproduce: str | None = None):
    """A field of :class:`Settings` with its rule (``rule(name, value)`` returns the checked value or
    raises ParameterError), its flag and where a value other than the default is written again:
    ``reproduce="both"`` in the command line and the library call (it changes the certificate),
    ``"command line"`` only there (it changes how the run goes, not its certificate), None nowhere."""
    return field(default=default, metadata={"rule": rule, "flag": flag, "reproduce": reproduce})


def _optional(rule):
    return lambda name, value: None if value is None else rule(name, value)


def _at_least(minimum: int):
    return lambda name, value: parameters.integer(name, value, minimum)


def _flag(name, value):
    parameters.flag(name, value)
    return value


def _flag_or_none(name, value):
    parameters.flag(name, value, none=True)
    return value


@dataclass(frozen=True)
class Settings:
    """The settings of one certification. The docstring of :func:`kcert.certify` says what each means;
    each field holds its default, its rule, its command-line flag and whether it enters the reproduce
    command. :meth:`check` fills in the defaults that depend on others and checks every value.

    Attributes
    ----------
    replicates, horizon, seed, device, max_replicates : int, float, int, str or torch.device, int
        The run: replicates of the first look, T, the seed, where the tensors live, the looks' cap.
    algebra_proof, algebra_points, accept_untested_algebra : bool, int, bool
        The algebra gate.
    bias_thresholds, variance_thresholds : BiasThresholds, VarianceThresholds
        The gates' thresholds (None: kcert's).
    shapes, peer_rules, adequacy : bool or None, bool, bool
        The checks around the gates.
    checkpoint, resume, checkpoint_every, checkpoint_seconds, max_time, batch_memory, command
        How the run is saved, bounded, batched and recorded.

    Examples
    --------
    >>> from kcert.settings import Settings
    >>> s = Settings(replicates=64).check()
    >>> s.max_replicates, str(s.device)
    (256, 'cpu')
    """

    # the order of the fields is the command line's order (help and reproduce command)
    replicates: int = _setting(1024, flag=Flag(
        ("--replicates", "-R"), "replicates of the first look (default {default}); the variance gate may add up to 4x",
        parse="integer", metavar="R"))
    horizon: float = _setting(DEFAULT_HORIZON, rule=parameters.horizon, flag=Flag(
        ("--horizon", "-T"), "horizon in kernel calls (default {default:g}, one optimizer step)", parse="float",
        metavar="T"))
    seed: int = _setting(0, rule=_at_least(0), flag=Flag(("--seed", "-s"), "seed (default {default})",
                                                          parse="integer", metavar="S"))
    device: torch.device | str = _setting("cpu", flag=Flag(
        ("--device",), "torch device for the case's tensors: cpu (default), cuda, cuda:1"))
    max_time: float | None = _setting(None, rule=_optional(parameters.seconds), flag=Flag(
        ("--max-time",), "stop the replicates after this long (600, 90s, 30m, 1h30m), save the state to the "
                         "checkpoint and exit 124; --resume continues (default: no limit)",
        parse="duration", metavar="DURATION"))
    checkpoint: str | os.PathLike | None = _setting(None, flag=Flag(
        ("--checkpoint",), "save the run's state to PATH (.npz) periodically, at --max-time, on Ctrl-C and SIGTERM; "
                           "with several cases, one file per case: PATH's stem + '.' + case name", metavar="PATH"))
    resume: bool = _setting(False, rule=_flag, flag=Flag(
        ("--resume",), "continue from --checkpoint PATH to the same certificate", kind="switch"))
    algebra_proof: bool = _setting(True, rule=_flag, reproduce="both", flag=Flag(
        ("--algebra-proof",), "the algebra gate's symbolic proof (default {default}{why}; the identity test always "
                              "runs)", kind="toggle"))
    shapes: bool | None = _setting(None, rule=_flag_or_none, reproduce="both", flag=Flag(
        ("--shapes",), "shape sweep: also certify (algebra gate and a short run) at shapes derived from the probes'; "
                       "a FAIL there FAILs the case (default: only for cases that declare Case.shapes; "
                       "docs/kernelbench.md)", kind="toggle"))
    bias_thresholds: BiasThresholds | None = _setting(None, reproduce="both")  # on the command line: --ulp-floor
    accept_untested_algebra: bool = _setting(False, rule=_flag, reproduce="both", flag=Flag(
        ("--accept-untested-algebra",), "when no algebra test can run (an opaque prod at one precision), let the "
                                        "verdict rest on the bias and variance gates; the report states what is not "
                                        "tested (docs/verdicts.md)", kind="switch"))
    peer_rules: bool = _setting(True, rule=_flag, reproduce="both", flag=Flag(
        ("--peer-rules",), "show what torch.testing.assert_close, KernelBench, FlashAttention and dynamo's same "
                           "would have said on the first samples (default {default})", kind="toggle"))
    max_replicates: int | None = _setting(None, flag=Flag(
        ("--max-replicates",), "cap of the variance gate's adaptive looks (default 4 x R)", parse="integer",
        metavar="M", advanced=True))  # its rule is the replicates' (check_values)
    prior_max_replicates: int | None = _setting(None, reproduce="both", flag=Flag(
        ("--prior-max-replicates",), "the --max-replicates of an earlier run of this case with this seed and R whose "
                                     "looks ran out: this run judges the same draws again under a larger cap, and its "
                                     "certificate states the false-PASS level over both plans (docs/method.md, "
                                     "Stopping; a --resume reads it from the checkpoint)", parse="integer",
        metavar="M", advanced=True))  # its rule needs the looks' cap (Settings.check)
    batch_memory: int | None = _setting(None, rule=parameters.byte_count, reproduce="command line", flag=Flag(
        ("--batch-memory",), "bytes per batched kernel call for cases that declare independent_leading_axis "
                             "(e.g. 256MiB; default 16MiB on CPU, 256MiB on accelerators)", parse="bytes",
        metavar="BYTES", advanced=True))
    checkpoint_every: int = _setting(1024, rule=_at_least(1), flag=Flag(
        ("--checkpoint-every",), "save after every N replicates (default {default}; at block boundaries of 64)",
        parse="integer", metavar="N", advanced=True))
    checkpoint_seconds: float = _setting(300.0, rule=parameters.seconds, flag=Flag(
        ("--checkpoint-seconds",), "or after S seconds (default {default:g})", parse="float", metavar="S",
        advanced=True))
    adequacy: bool = _setting(False, rule=_flag, reproduce="both", flag=Flag(
        ("--adequacy",), "run the fixed fakes (zeros, a constant, the input, a stale output, ref rounded, a fresh "
                         "input) through the same probes and gates; one not FAILed keeps a case from PASS "
                         "(docs/kernelbench.md)", kind="switch"))
    variance_thresholds: VarianceThresholds | None = _setting(None, reproduce="both")
    algebra_points: int = _setting(8, rule=_at_least(1), reproduce="both")
    command: str | None = _setting(None)  # the reproduce command to record (default: the library call)

    def check(self) -> Settings:
        """These settings with defaults filled in and every value checked; a bad one raises ParameterError."""
        values = check_values({f.name: getattr(self, f.name) for f in FIELDS})
        if self.resume and self.checkpoint is None:
            raise ParameterError("resume=True needs checkpoint, the file to resume from; got checkpoint=None")
        checkpoint = self.checkpoint
        if checkpoint is not None:
            checkpoint = os.fspath(checkpoint)
            folder = os.path.dirname(os.path.abspath(checkpoint))
            if not os.path.isdir(folder):
                raise ParameterError(f"checkpoint {checkpoint!r}: the folder {folder!r} does not exist")
        from .stats.thresholds import BiasThresholds, VarianceThresholds

        return dataclasses.replace(self, **(values | dict(
            device=_check_device(self.device), checkpoint=checkpoint,
            bias_thresholds=self.bias_thresholds or BiasThresholds(),
            variance_thresholds=self.variance_thresholds or VarianceThresholds())))

    @classmethod
    def build(cls, settings: Settings | int | None = None, **overrides) -> Settings:
        """``settings`` (default: the defaults) with ``overrides`` by keyword; an unknown name is a
        ParameterError that lists the known ones. An integer in the place of ``settings`` is the
        replicates (``certify(case, 1024)``, as before settings existed)."""
        if isinstance(settings, int) and not isinstance(settings, bool):  # certify(case, 1024): the replicates
            if "replicates" in overrides:
                raise ParameterError(f"replicates given twice: {settings!r} in the settings' place and "
                                     f"replicates={overrides['replicates']!r}")
            settings, overrides = None, {"replicates": settings, **overrides}
        if settings is not None and not isinstance(settings, Settings):
            raise ParameterError(f"settings must be a kcert.Settings or None, got {type(settings).__name__} "
                                 f"{settings!r} (an integer there is the replicates; give the other settings by "
                                 f"keyword: certify(case, 1024, seed=3))")
        unknown = sorted(set(overrides) - set(NAMES))
        if unknown:
            raise ParameterError(f"unknown setting(s) {', '.join(unknown)}; the settings are {', '.join(NAMES)}")
        return dataclasses.replace(settings or cls(), **overrides)


FIELDS = dataclasses.fields(Settings)
NAMES = tuple(f.name for f in FIELDS)
FLAGS = {f.name: f.metadata["flag"] for f in FIELDS if f.metadata["flag"] is not None}
DEFAULTS = {f.name: f.default for f in FIELDS}
# the settings the command line's reproduce command names when they differ from the command's default
REPRODUCED = frozenset(f.name for f in FIELDS if f.metadata["reproduce"])


def check_values(values: Mapping[str, Any], spell: Callable[[str], str] = lambda name: name) -> dict[str, Any]:
    """``values`` (setting name -> value; the settings absent are not checked) with every field's rule
    applied and the cap of the adaptive looks filled in (4 x replicates); ``spell(name)`` is how the
    caller names a setting in its messages (``--replicates`` on the command line). Torch-free."""
    out = dict(values)
    if "replicates" in values:
        out["replicates"], out["max_replicates"] = parameters.replicates(
            spell("replicates"), values["replicates"], spell("max_replicates"), values.get("max_replicates"))
    if values.get("prior_max_replicates") is not None:
        _check_prior(spell, out["replicates"], out["max_replicates"], values["prior_max_replicates"])
    for f in FIELDS:
        rule = f.metadata["rule"]
        if rule is not None and f.name in values:
            checked = rule(spell(f.name), values[f.name])
            out[f.name] = values[f.name] if checked is None else checked
    return out


def _check_prior(spell: Callable[[str], str], replicates: int, max_replicates: int, prior) -> None:
    """An earlier run's cap must plan looks that begin this run's (R, 2R, 4R, ...): the same draws judged again,
    with more looks after them (docs/method.md, "Raising the cap after the last look"). Its looks begin this run's
    exactly when it is R times a power of 2 and under this run's cap."""
    name = spell("prior_max_replicates")
    if isinstance(prior, bool) or not isinstance(prior, int) or not replicates <= prior < max_replicates:
        raise ParameterError(f"{name} must be an integer from {spell('replicates')} ({replicates}) to below "
                             f"{spell('max_replicates')} ({max_replicates}): the earlier run's cap, lower than this "
                             f"run's; got {prior!r}")
    if not parameters.doubles_from(replicates, prior):
        raise ParameterError(f"{name} {prior} is not {spell('replicates')} ({replicates}) times a power of 2: that "
                             f"run's last look was cut short, no larger cap plans it, and its draws cannot be judged "
                             f"again as one plan's first looks")


def _check_device(device):
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ParameterError(f"device must name a torch device such as 'cpu' or 'cuda', got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ParameterError(f"device {device!r} was asked for but CUDA is not available on this machine")
    return dev
