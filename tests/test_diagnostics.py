"""Diagnostic codes are an enum (``diagnostics.Code``): the gates test them by member, a misspelt code
fails where it is written, and the reports still carry the plain code strings."""

import json

import pytest

from kcert.diagnostics import CATALOGUE, Code, Diagnostic, diagnostic, raised


def test_every_code_has_its_meaning_and_remedy():
    assert set(CATALOGUE) == set(Code) and len(Code) == 31
    assert all(isinstance(m, str) and m and isinstance(r, str) and r for m, r in CATALOGUE.values())


def test_a_diagnostic_carries_the_plain_code_string():
    d = diagnostic(Code.INFINITE_RATIO, "3 of 10 replicates")
    assert type(d.code) is str and d.code == "infinite_ratio"
    assert json.loads(json.dumps(d.to_dict()))["code"] == "infinite_ratio"
    assert d.message.endswith(": 3 of 10 replicates") and d.remedy == CATALOGUE[Code.INFINITE_RATIO][1]


def test_raised_reads_members_and_refuses_unknown_codes():
    found = (diagnostic(Code.FEW_EXCEEDANCES), Diagnostic(code="low_power", message="m", remedy="r"))
    assert raised(found, Code.FEW_EXCEEDANCES) and raised(found, Code.LOW_POWER, Code.INFINITE_RATIO)
    assert not raised(found, Code.INFINITE_RATIO)
    with pytest.raises(KeyError):
        raised(found, "few_exceedance")  # misspelt: not "not raised"
    with pytest.raises(AttributeError):
        Code.FEW_EXCEEDANCE
