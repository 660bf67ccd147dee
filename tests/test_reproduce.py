"""The reproduce command of every entry point (the command line, the library, assert_certified and the
pytest plugin) gives the same certificate, with a horizon that six significant digits would change."""

import ast
import json
import re
import shlex

import pytest

import kcert
from kcert import assertions
from kcert.cli import build_parser, main
from kcert.report.stable import stable_dict
from kcert.reproduce import certify_call, command_line, exact_number
from sample_kernels import rms_bf16_casefile

HORIZON = 1234567.8  # f"{HORIZON:g}" is 1.23457e+06: another horizon, another certificate


def tiny_case():
    """The case of rms_bf16_casefile(16), built in code."""
    namespace = {}
    exec(rms_bf16_casefile(16), namespace)
    return namespace["case"]


def call_arguments(call: str) -> tuple[str, dict]:
    """The case's stand-in and the keyword arguments of a ``kcert.certify(<case>, k=v, ...)`` line."""
    match = re.fullmatch(r"kcert\.certify\((<[^>]*>), (.*)\)", call)
    assert match, call
    keywords = ast.parse(f"f({match.group(2)})", mode="eval").body.keywords
    return match.group(1), {k.arg: ast.literal_eval(k.value) for k in keywords}


@pytest.mark.parametrize("x", [625000, 6.25e5, HORIZON, 0.1 + 0.2, 1e300, 2.0**-1074, 1 / 3])
def test_numbers_are_written_exactly(x):
    assert float(exact_number(x)) == x


def test_the_builders_keep_the_order_of_the_options():
    assert exact_number(625000.0) == "625000" and exact_number(HORIZON) == "1234567.8"
    assert (command_line(["kcert", "certify", "my cases.py", "--case", "rms"], replicates=64, horizon=HORIZON, seed=3,
                         max_replicates=128, device="cuda:1", flags=["--no-algebra-proof"])
            == "kcert certify 'my cases.py' --case rms --replicates 64 --horizon 1234567.8 --seed 3 "
               "--max-replicates 128 --device cuda:1 --no-algebra-proof")
    assert (certify_call("<rms>", replicates=64, horizon=HORIZON, seed=3, max_replicates=128, device="cuda",
                         extras={"bias_thresholds": None})
            == "kcert.certify(<rms>, replicates=64, horizon=1234567.8, seed=3, max_replicates=128, device='cuda', "
               "bias_thresholds=None)")


def test_the_command_line_reproduces_its_certificate(tmp_path, capsys):
    cases = tmp_path / "cases.py"
    cases.write_text(rms_bf16_casefile(16))
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    main(["certify", str(cases), "-R", "64", "--max-replicates", "64", "--horizon", str(HORIZON), "--seed", "3",
          "--no-peer-rules", "--json", str(first)])
    report = json.loads(first.read_text())
    words = shlex.split(report["provenance"]["command"])
    assert words[:2] == ["kcert", "certify"] and words[words.index("--horizon") + 1] == "1234567.8"
    main([*words[1:], "--json", str(second)])  # the printed command, as the `kcert` program runs it
    capsys.readouterr()
    again = json.loads(second.read_text())
    assert again["provenance"]["horizon"] == HORIZON
    assert stable_dict(again) == stable_dict(report)


def test_the_library_call_reproduces_its_certificate():
    case = tiny_case()
    cert = kcert.certify(case, replicates=64, horizon=HORIZON, seed=3, peer_rules=False)
    stand_in, arguments = call_arguments(cert.provenance.command)
    # every setting that is not the default is named, so the call alone reproduces the certificate
    assert stand_in == f"<{case.name}>" and arguments == {"replicates": 64, "horizon": HORIZON, "seed": 3,
                                                          "peer_rules": False}
    again = kcert.certify(case, **arguments)
    assert stable_dict(again) == stable_dict(cert)


def test_the_library_call_names_non_default_settings():
    case = tiny_case()
    cert = kcert.certify(case, replicates=64, horizon=HORIZON, seed=3, max_replicates=64, peer_rules=False,
                         algebra_proof=False, bias_thresholds=kcert.BiasThresholds(z_star=6.0))
    command = cert.provenance.command
    assert ", max_replicates=64," in command and ", algebra_proof=False," in command
    assert "bias_thresholds=kcert.BiasThresholds(z_star=6.0," in cert.provenance.command
    assert "variance_thresholds" not in cert.provenance.command  # the default is not named


def test_assert_certified_and_the_plugin_print_every_digit():
    """assert_certified (and through it the pytest plugin, whose --kcert-horizon it takes) prints
    ``kcert certify FILE --case NAME ...`` for a case in a case file, else the Python call."""
    case = tiny_case()
    settings = dict(replicates=64, horizon=HORIZON, seed=3, max_replicates=None, device="cpu")
    line = assertions.reproduce_command(case, "cases.py", **settings, extras={})
    args = build_parser().parse_args(shlex.split(line)[1:])
    assert (args.casefile, args.case, args.replicates, args.horizon, args.seed, args.max_replicates) == \
        ("cases.py", ["rms"], 64, HORIZON, 3, None)
    stand_in, arguments = call_arguments(assertions.reproduce_command(case, None, **settings, extras={}))
    assert stand_in == "<case 'rms'>" and arguments == {"replicates": 64, "horizon": HORIZON, "seed": 3}


def test_a_failing_assertion_prints_the_command_with_its_horizon():
    with pytest.raises(kcert.NotCertified) as failed:
        kcert.assert_certified(tiny_case(), replicates=64, horizon=HORIZON, seed=3)
    line = next(s for s in str(failed.value).splitlines() if s.startswith("  reproduce: "))
    _, arguments = call_arguments(line.removeprefix("  reproduce: "))
    assert arguments == {"replicates": 64, "horizon": HORIZON, "seed": 3}
    assert failed.value.certificate.provenance.horizon == HORIZON
