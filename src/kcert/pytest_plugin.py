"""pytest plugin (entry point ``pytest11: kcert.pytest_plugin``): session defaults for :func:`kcert.assert_certified`.

Options (ini equivalents in brackets): ``--kcert-seed S`` [kcert_seed], ``--kcert-replicates R``
[kcert_replicates], ``--kcert-horizon T`` [kcert_horizon], ``--kcert-report-dir DIR`` [kcert_report_dir],
``--kcert-html`` [kcert_html]. They become the defaults of every ``assert_certified`` call of the session
that does not set the argument itself. A failing certification shows its diagnosis, the command that
reproduces it and, under the traceback, the full terminal rendering of its certificate.

Also: the ``kcert`` marker (``pytest -m kcert`` selects certification tests; tests that use the
``kcert_certify`` fixture get it automatically) and the ``kcert_certify`` fixture (``assert_certified``).

Loading this plugin imports nothing heavy (no torch, numpy, scipy, matplotlib, rich): without its
options it only registers them and does nothing else.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

from . import assertions
from .settings import DEFAULTS

_SETTINGS = pytest.StashKey[assertions.Settings]()
_TEST = pytest.StashKey[assertions.RunningTest]()
_MARKER = "kcert: a kernel certification test (select with -m kcert; see kcert.assert_certified)"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kcert", "kernel certification (kcert.assert_certified defaults)")
    group.addoption("--kcert-seed", metavar="S",
                    help=f"seed of assert_certified calls that set none (default {DEFAULTS['seed']})")
    group.addoption("--kcert-replicates", metavar="R",
                    help=f"replicates of assert_certified calls that set none (default {DEFAULTS['replicates']})")
    group.addoption("--kcert-horizon", metavar="T",
                    help=f"horizon in kernel calls of assert_certified calls that set none (default "
                         f"{DEFAULTS['horizon']:g})")
    group.addoption("--kcert-report-dir", metavar="DIR",
                    help="write each certificate's JSON report to DIR/<case>.json (created if missing)")
    group.addoption("--kcert-html", action="store_true", default=None,
                    help="also write an HTML report (<case>.html) wherever a JSON report is written")
    parser.addini("kcert_seed", "default --kcert-seed", type="string", default="")
    parser.addini("kcert_replicates", "default --kcert-replicates", type="string", default="")
    parser.addini("kcert_horizon", "default --kcert-horizon", type="string", default="")
    parser.addini("kcert_report_dir", "default --kcert-report-dir (relative to the ini file)", type="string",
                  default="")
    parser.addini("kcert_html", "default --kcert-html", type="bool", default=False)


def _parsed(config: pytest.Config, name: str, convert, rule: str, valid):
    """The value of ``--kcert-NAME`` (else ini ``kcert_NAME``, else None), converted and checked;
    a bad value is a usage error naming where it came from, the rule and the value."""
    option = config.getoption(f"kcert_{name}")
    where, text = f"--kcert-{name.replace('_', '-')}", option
    if option is None:
        where, text = f"ini option kcert_{name}", config.getini(f"kcert_{name}").strip()
        if not text:
            return None
    try:
        value = convert(text)
    except ValueError:
        value = None
    if value is None or not valid(value):
        raise pytest.UsageError(f"{where} must be {rule}, got {text!r}")
    return value


def _settings(config: pytest.Config) -> assertions.Settings:
    seed = _parsed(config, "seed", int, "an integer >= 0", lambda v: v >= 0)
    replicates = _parsed(config, "replicates", int, "an integer >= 2", lambda v: v >= 2)
    horizon = _parsed(config, "horizon", float, "a finite number > 1", lambda v: math.isfinite(v) and v > 1)
    folder = config.getoption("kcert_report_dir")
    if folder is not None:
        folder = Path(config.invocation_params.dir, folder)
    elif config.getini("kcert_report_dir").strip():
        base = config.inipath.parent if config.inipath else config.rootpath
        folder = Path(base, config.getini("kcert_report_dir").strip())
    if folder is not None and folder.exists() and not folder.is_dir():
        raise pytest.UsageError(f"kcert report dir {str(folder)!r} exists and is not a folder")
    html = config.getoption("kcert_html")
    html = bool(config.getini("kcert_html")) if html is None else html
    # only what the command line set needs repeating to rerun a test: the ini file stays in force
    rerun: list[str] = []
    for name in ("seed", "replicates", "horizon"):
        if config.getoption(f"kcert_{name}") is not None:
            rerun += [f"--kcert-{name}", str(config.getoption(f"kcert_{name}"))]
    return assertions.Settings(seed=seed, replicates=replicates, horizon=horizon, report_dir=folder, html=html,
                               rerun=tuple(rerun))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER)
    config.stash[_SETTINGS] = assertions.push_settings(_settings(config))


def pytest_unconfigure(config: pytest.Config) -> None:
    settings = config.stash.get(_SETTINGS, None)
    if settings is not None:
        assertions.pop_settings(settings)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "kcert_certify" in getattr(item, "fixturenames", ()) and item.get_closest_marker("kcert") is None:
            item.add_marker("kcert")


@pytest.fixture
def kcert_certify():
    """:func:`kcert.assert_certified` with this session's ``--kcert-*`` defaults; marks the test ``kcert``."""
    return assertions.assert_certified


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item):
    # certificates made during the test are kept for its report; the node id names the rerun
    item.stash[_TEST] = test = assertions.push_test(assertions.RunningTest(item.nodeid))
    try:
        yield
    finally:
        assertions.pop_test(test)


def _render(cert, config: pytest.Config) -> str:
    from rich.console import Console

    from .report.terminal import render

    # pytest's own width and colour choice; at least 132 columns (as the CLI) so tables stay readable in logs
    width, colour = 0, False
    if config.pluginmanager.get_plugin("terminalreporter") is not None:  # absent under -p no:terminal
        writer = config.get_terminal_writer()
        width, colour = writer.fullwidth, writer.hasmarkup
    out = io.StringIO()
    render(cert, Console(file=out, width=max(width, 132), force_terminal=colour,
                         color_system="standard" if colour else None, soft_wrap=False))
    return out.getvalue()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    outcome = yield
    test = item.stash.get(_TEST, None)
    if call.when != "call" or test is None or not test.certificates:
        return
    report = outcome.get_result()
    for cert in test.certificates:
        if cert.verdict.value == "PASS":  # sections show under a failure (and with -rP for an allowed WARN)
            continue
        try:
            text = _render(cert, item.config)
        except Exception as exc:  # noqa: BLE001 - a rendering problem must not hide the test's outcome
            text = f"(the certificate could not be rendered: {type(exc).__name__}: {exc})"
        report.sections.append((f"kcert certificate {cert.case!r}: {cert.verdict.value}", text))


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    settings = config.stash.get(_SETTINGS, None)
    if settings is not None and settings.written:
        folders = ", ".join(sorted({str(p.parent) for p in settings.written}))
        terminalreporter.write_line(f"kcert: {len(settings.written)} certificate report(s) written to {folders}")
