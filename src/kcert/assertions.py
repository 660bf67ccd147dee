"""``kcert.assert_certified``: certify a case inside a test and fail the test unless it PASSes.

The failure message is the diagnosis of :func:`kcert.report.text.failure_message` (the one place that
writes failure text) followed by the exact command that reproduces the certificate. Session defaults
(seed, replicates, horizon, report folder) come from the pytest plugin (:mod:`kcert.pytest_plugin`),
which pushes them here; an argument given in the call always wins over them.

This module imports nothing heavy at import time (no torch, numpy, rich): the pytest plugin imports it
in every pytest session of an environment where kcert is installed.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import ParameterError
from .reproduce import certify_call, command_line
from .settings import DEFAULTS

if TYPE_CHECKING:  # pragma: no cover
    from .case import Case
    from .certificate import Certificate
    from .stats.thresholds import BiasThresholds, VarianceThresholds

class NotCertified(AssertionError):
    """A certificate was FAIL (or WARN, unless allowed): the failure :func:`kcert.assert_certified` raises.

    An ``AssertionError``, so that pytest reports a failed test, and not a :class:`kcert.KcertError`
    (``except KcertError`` does not swallow a failed certification). The message is the diagnosis
    and the command that reproduces the certificate.

    Parameters
    ----------
    message : str
        The failure message.
    certificate : kcert.Certificate or None, default None
        The certificate (None only so that the exception pickles).
    reports : tuple of pathlib.Path, default ()
        The report files written for it.

    Attributes
    ----------
    certificate : kcert.Certificate
        The full result.
    reports : tuple of pathlib.Path
        The report files written for it (empty without a report folder).

    Examples
    --------
    A production kernel that forms the gain ``(1 + w)`` in bf16 where the reference keeps float32:

    >>> import kcert
    >>> def ref(x, w):
    ...     return (x.float() * (1 + w.float())).to(x.dtype)
    >>> def prod(x, w):
    ...     return x * (1 + w)
    >>> case = kcert.Case(name="bf16_gain", ref=ref, prod=prod,
    ...                   inputs={"x": kcert.Gaussian((4, 16), shift=0.1)},
    ...                   weights={"w": kcert.Gaussian((16,), std=0.02)})
    >>> try:
    ...     kcert.assert_certified(case, replicates=64)
    ... except kcert.NotCertified as failure:
    ...     print(failure.certificate.verdict, "in the bias gate:", failure.certificate.gates["bias"])
    FAIL in the bias gate: FAIL
    """

    # certificate has a default so that the exception pickles (as pytest-xdist and multiprocessing need)
    def __init__(self, message: str, certificate: Certificate | None = None, reports: tuple[Path, ...] = ()):
        super().__init__(message)
        self.certificate = certificate
        self.reports = tuple(reports)


class CertificationWarning(UserWarning):
    """A WARN certificate accepted with ``allow_warn=True``: it still needs a human numerical review."""


@dataclass
class Settings:
    """Defaults for :func:`assert_certified` in one scope (a pytest session); None: not set.
    ``rerun`` holds the command-line options to repeat when rerunning a test; ``written`` the report
    files written in this scope, so that two certificates of one case do not overwrite each other."""

    seed: int | None = None
    replicates: int | None = None
    horizon: float | None = None
    report_dir: Path | None = None
    html: bool = False
    rerun: tuple[str, ...] = ()
    written: set[Path] = field(default_factory=set)


@dataclass
class RunningTest:
    """The pytest test being run: its node id (for the rerun command) and the certificates it made."""

    nodeid: str
    certificates: list = field(default_factory=list)


_SETTINGS: list[Settings] = [Settings()]  # innermost last; the base entry serves plain Python use
_TESTS: list[RunningTest] = []


def push_settings(settings: Settings) -> Settings:
    _SETTINGS.append(settings)
    return settings


def pop_settings(settings: Settings) -> None:
    """Remove ``settings`` (and anything pushed after it and left behind)."""
    for i in range(len(_SETTINGS) - 1, 0, -1):
        if _SETTINGS[i] is settings:
            del _SETTINGS[i:]
            return


def push_test(test: RunningTest) -> RunningTest:
    _TESTS.append(test)
    return test


def pop_test(test: RunningTest) -> None:
    if test in _TESTS:
        del _TESTS[_TESTS.index(test):]


def current_settings() -> Settings:
    return _SETTINGS[-1]


# --- where the case comes from -------------------------------------------------------------------


def _module_cases(namespace: dict) -> list:
    """The module-level cases of a namespace, as ``kcert certify`` would load them from its file."""
    from .case import Case

    found: list = []
    for value in list(namespace.values()):
        values = value if isinstance(value, (list, tuple)) else (value,)
        found += [v for v in values if isinstance(v, Case) and all(v is not c for c in found)]
    return found


def find_casefile(case: Case, namespaces) -> str | None:
    """The file of the first module namespace defining ``case`` at module level under a unique name,
    i.e. a file from which ``kcert certify FILE --case NAME`` loads this very case; else None."""
    for namespace in namespaces:
        file = namespace.get("__file__")
        if not file or not str(file).endswith(".py") or not os.path.isfile(file):
            continue
        cases = _module_cases(namespace)
        if any(c is case for c in cases) and sum(c.name == case.name for c in cases) == 1:
            return _display_path(file)
    return None


def _display_path(file: str | os.PathLike) -> str:
    path = os.path.abspath(file)
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def _candidate_namespaces(case: Case, depth: int) -> list[dict]:
    """The caller's module globals, then the modules of the case's kernels."""
    namespaces = [sys._getframe(depth + 1).f_globals]
    for fn in (case.ref, case.prod):
        module = sys.modules.get(getattr(fn, "__module__", None) or "")
        if module is not None:
            namespaces.append(vars(module))
    return namespaces


def reproduce_command(case: Case, casefile: str | None, *, replicates: int, horizon: float, seed: int,
                      max_replicates: int | None, device: str, extras: dict) -> str:
    """``kcert certify FILE --case NAME ...`` when the case lives in a case file and every setting
    has a command-line option; otherwise the Python call that reproduces the certificate."""
    settings = dict(replicates=replicates, horizon=horizon, seed=seed, max_replicates=max_replicates, device=device)
    if casefile is not None and not extras:
        return command_line(["kcert", "certify", casefile, "--case", case.name], **settings)
    return certify_call(f"<case {case.name!r}>", **settings, extras=extras)


# --- reports ---------------------------------------------------------------------------------------


def _report_stem(folder: Path, name: str, written: set[Path]) -> Path:
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "case"
    path, k = folder / stem, 1
    while path in written:  # a second certificate of the same case in this session
        k += 1
        path = folder / f"{stem}-{k}"
    written.add(path)
    return path


def write_reports(cert: Certificate, folder: Path, html: bool, written: set[Path]) -> tuple[Path, ...]:
    """Write ``NAME.json`` (and ``NAME.html``) for ``cert`` into ``folder``, created if missing."""
    from .report.formats import FORMATS

    folder.mkdir(parents=True, exist_ok=True)
    stem = _report_stem(folder.resolve(), cert.case, written)
    paths = []
    for form in FORMATS:
        if form.name == "json" or (form.name == "html" and html):
            paths.append(stem.with_name(stem.name + form.suffix))
            paths[-1].write_text(form.render([cert], None), encoding="utf-8")
    return tuple(paths)


# --- the assertion ---------------------------------------------------------------------------------


def _check_flag(name: str, value) -> bool:
    if not isinstance(value, bool):
        raise ParameterError(f"{name} must be True or False, got {value!r}")
    return value


def assert_certified(
    case: Case,
    *,
    replicates: int | None = None,
    horizon: float | None = None,
    seed: int | None = None,
    max_replicates: int | None = None,
    device: str = "cpu",
    allow_warn: bool = False,
    report_dir: str | os.PathLike | None = None,
    html: bool | None = None,
    casefile: str | os.PathLike | None = None,
    bias_thresholds: BiasThresholds | None = None,
    variance_thresholds: VarianceThresholds | None = None,
) -> Certificate:
    """Certify ``case`` and return its certificate if it PASSes (or WARNs and ``allow_warn``).

    Otherwise raise :class:`NotCertified` (an ``AssertionError``) whose message is the diagnosis and
    the command that reproduces it: ``kcert certify FILE --case NAME ...`` when the case is defined at
    module level in a file (the caller's module or its kernels' module; or ``casefile``), else the
    Python call. ``replicates``, ``horizon``, ``seed``, ``report_dir`` and ``html`` left as None take
    the pytest session's ``--kcert-*`` options, then kcert's defaults (1024 replicates, seed 0, one
    optimizer step). With a report folder the JSON (and with ``html`` the HTML) report is written
    there as ``<case name>.json`` whatever the verdict. docs/tutorial.md (section 7) shows it in a
    test suite.

    Parameters
    ----------
    case : kcert.Case
        The case to certify.
    replicates : int, optional
        The number of replicates (session option, then 1024).
    horizon : float, optional
        The number of kernel calls the variance gate judges over (session option, then one
        optimizer step).
    seed : int, optional
        The seed of every draw (session option, then 0).
    max_replicates, device, bias_thresholds, variance_thresholds
        As in :func:`kcert.certify`. A call that sets thresholds is reproduced by the Python call.
    allow_warn : bool, default False
        Accept a WARN: return its certificate with a warning (it still needs a human numerical
        review) instead of raising.
    report_dir : str or os.PathLike, optional
        The folder (created if missing) the reports are written to; not an existing file.
    html : bool, optional
        Also write the HTML report.
    casefile : str or os.PathLike, optional
        The case file defining ``case``, named in the reproduce command.

    Returns
    -------
    kcert.Certificate
        The certificate, PASS (or WARN with ``allow_warn``).

    Raises
    ------
    kcert.NotCertified
        If the certificate is FAIL, or WARN without ``allow_warn``.
    kcert.ParameterError
        If ``case`` is not a ``kcert.Case``, a flag is not a bool, ``report_dir`` is not a folder
        path or ``casefile`` is not a file.

    Examples
    --------
    >>> import kcert
    >>> def ref(x, w):
    ...     return x * (1 + w)
    >>> def prod(x, w):
    ...     return x * (w + 1)
    >>> case = kcert.Case(name="gain", ref=ref, prod=prod,
    ...                   inputs={"x": kcert.Gaussian((4, 16), shift=0.1)},
    ...                   weights={"w": kcert.Gaussian((16,), std=0.02)})
    >>> cert = kcert.assert_certified(case, replicates=64)  # raises kcert.NotCertified unless PASS
    >>> print(cert.verdict)
    PASS
    """
    __tracebackhide__ = True  # pytest: the traceback ends at the test's call, not in here
    from .case import Case
    from .certification import certify
    from .report.text import failure_message
    from .verdict import Verdict

    if not isinstance(case, Case):
        raise ParameterError(f"case must be a kcert.Case, got {type(case).__name__}")
    settings = current_settings()
    seed = next(v for v in (seed, settings.seed, DEFAULTS["seed"]) if v is not None)
    replicates = next(v for v in (replicates, settings.replicates, DEFAULTS["replicates"]) if v is not None)
    horizon = next(v for v in (horizon, settings.horizon, DEFAULTS["horizon"]) if v is not None)
    folder = report_dir if report_dir is not None else settings.report_dir
    html = settings.html if html is None else _check_flag("html", html)
    _check_flag("allow_warn", allow_warn)
    if folder is not None:
        if not isinstance(folder, (str, os.PathLike)):
            raise ParameterError(f"report_dir must be a folder path or None, got {folder!r}")
        folder = Path(folder)
        if folder.exists() and not folder.is_dir():
            raise ParameterError(f"report_dir {str(folder)!r} exists and is not a folder")
    if casefile is not None:
        if not isinstance(casefile, (str, os.PathLike)) or not os.path.isfile(casefile):
            raise ParameterError(f"casefile must be the path of the case file defining the case, got {casefile!r}")
        source = _display_path(casefile)
    else:
        source = find_casefile(case, _candidate_namespaces(case, 1))
    extras = {k: v for k, v in (("bias_thresholds", bias_thresholds), ("variance_thresholds", variance_thresholds))
              if v is not None}
    command = reproduce_command(case, source, replicates=replicates, horizon=horizon, seed=seed,
                                max_replicates=max_replicates, device=str(device), extras=extras)
    cert = certify(case, replicates=replicates, horizon=horizon, seed=seed, max_replicates=max_replicates,
                   device=device, command=command, bias_thresholds=bias_thresholds,
                   variance_thresholds=variance_thresholds)
    reports = write_reports(cert, folder, html, settings.written) if folder is not None else ()
    if _TESTS:
        _TESTS[-1].certificates.append(cert)
    if cert.verdict is Verdict.PASS or (cert.verdict is Verdict.WARN and allow_warn):
        if cert.verdict is Verdict.WARN:
            warnings.warn(CertificationWarning(failure_message(cert)), stacklevel=2)
        return cert
    lines = [failure_message(cert)]
    if _TESTS:
        lines.append(f"  rerun: {shlex.join(['pytest', _TESTS[-1].nodeid, *settings.rerun])}")
    lines += [f"  report: {p}" for p in reports]
    if cert.verdict is Verdict.WARN:
        lines.append("  (a WARN needs a human numerical review; pass allow_warn=True to accept it)")
    raise NotCertified("\n".join(lines), cert, reports)
