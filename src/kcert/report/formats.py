"""The report formats a certificate is written in (``--json``, ``--html``, ``assert_certified``'s report
folder): each format's name, file suffix, label and renderer, in one registry that the command line and
:func:`kcert.assert_certified` both iterate. The renderers are imported when used (they are heavy)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Format:
    """``render(certs, several)``: the text of the report of ``certs`` (``several``: the run certified
    several cases; the JSON report is then an array)."""

    name: str
    suffix: str
    label: str
    render: Callable[[list, bool | None], str]


def _json(certs: list, several: bool | None) -> str:
    from .jsonio import dumps

    return dumps(certs, several=several) + "\n"


def _html(certs: list, several: bool | None) -> str:
    from .html import render_html

    return render_html(certs)


FORMATS = (Format("json", ".json", "JSON report", _json), Format("html", ".html", "HTML report", _html))
