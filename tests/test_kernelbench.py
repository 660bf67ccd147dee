"""``kcert kernelbench`` and kcert.adapters.kernelbench: loading, shrinking, probes, buckets, errors, the CLI.
The evidence set (examples/kernelbench/) runs in benchmarks/kernelbench.py, not here (docs/kernelbench.md)."""

import json
import textwrap

import pytest
import torch

import kcert
from kcert.adapters import kernelbench as kb
from kcert.cli import main

PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x, y):
        return torch.relu(self.norm(x)) + y


batch_size = 16
features = 256
shape = (features, 12)


def get_inputs():
    return [torch.rand(batch_size, features), torch.rand(batch_size, features)]


def get_init_inputs():
    return [features]
"""

CORRECT = """
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = nn.LayerNorm(features)

    def forward(self, x, y):
        m = x.mean(-1, keepdim=True)
        v = (x - m).pow(2).mean(-1, keepdim=True)
        h = (x - m) * torch.rsqrt(v + self.norm.eps) * self.norm.weight + self.norm.bias
        return h.clamp_min(0.0) + y
"""

NO_NORM_BIAS = CORRECT.replace(" + self.norm.bias", "")


def _write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


@pytest.fixture
def problem(tmp_path):
    return _write(tmp_path, "norm_relu_add.py", PROBLEM)


def test_size_globals_are_the_module_level_int_literals(problem):
    p = kb.load_problem(problem)
    assert [(s.name, s.value) for s in p.sizes] == [("batch_size", 16), ("features", 256), ("shape[1]", 12)]


def test_shrinking_halves_the_largest_sizes_until_the_budget_fits(problem):
    p = kb.load_problem(problem)
    full = kb.fit_sizes(p, None)
    assert full.elements == 3 * 16 * 256 and not full.shrunk
    fitted = kb.fit_sizes(p, 3000)
    assert fitted.sizes["features"] == 32 and fitted.sizes["batch_size"] == 16  # 256 -> 32: 3 * 16 * 32 = 1536
    assert fitted.elements <= 3000 and "features 256 -> 32" in fitted.text()
    # never below SIZE_MIN, and it says when the budget still does not fit
    tight = kb.fit_sizes(p, 10)
    assert not tight.fits and min(tight.sizes.values()) >= kb.SIZE_MIN and "still over" in tight.text()


def test_case_probes_weights_buckets_and_description(problem, tmp_path):
    candidate = _write(tmp_path, "correct.py", CORRECT)
    kc, pc = kb.cases(problem, candidate, budget=3000, shapes=False)
    assert kc.name == "norm_relu_add/correct (kcert probe)" and pc.name == "norm_relu_add/correct (problem probe)"
    assert list(kc.inputs) == ["x", "y"]  # forward's own argument names
    assert "shrunk" in kc.description and "features 256 -> 32" in kc.description
    assert kc.buckets == kcert.Axes(-1) and kc.training_format == "float32"
    # the LayerNorm's gain (1) and bias (0) are drawn trained-like: not constant any more
    w = kc.weights["norm__weight"].value
    assert w.shape == (32,) and float(w.std()) > 0.01
    # the kcert probe is signed; the problem's own is torch.rand's [0, 1)
    from kcert.execution import probes
    signed = probes.draw_inputs(kc, 0, 0, "cpu").working["x"]
    own = probes.draw_inputs(pc, 0, 0, "cpu").working["x"]
    assert float(signed.min()) < 0 <= float(own.min())
    # replicate r's draw depends on (seed, r) only
    assert torch.equal(probes.draw_inputs(kc, 0, 3, "cpu").working["y"], probes.draw_inputs(kc, 0, 3, "cpu").working["y"])
    assert not torch.equal(probes.draw_inputs(kc, 0, 3, "cpu").working["y"], probes.draw_inputs(kc, 0, 4, "cpu").working["y"])


@pytest.mark.parametrize("shape, axes", [((), ()), ((7,), (0,)), ((4, 9), (-1,)), ((2, 3, 5, 5), (1,))])
def test_bucket_rule(shape, axes):
    assert kb.bucket_rule(shape) == kcert.Axes(*axes)


def test_state_dict_mismatch_names_the_keys(problem, tmp_path, capsys):
    renamed = _write(tmp_path, "renamed.py", CORRECT.replace("self.norm", "self.ln"))
    with pytest.raises(kb.KernelBenchError, match=r"only in Model: \['norm.bias', 'norm.weight'\]; only in ModelNew: "
                                                   r"\['ln.bias', 'ln.weight'\]"):
        kb.cases(problem, renamed)
    assert main(["kernelbench", problem, renamed]) == 2
    err = capsys.readouterr().err
    assert "only in Model" in err and "Traceback" not in err


@pytest.mark.parametrize("text, message", [
    ("import torch\n", "defines no Model, get_inputs, get_init_inputs"),
    ("def f(:\n", "cannot be read as Python"),
])
def test_bad_problem_is_one_clear_error(tmp_path, text, message):
    bad = _write(tmp_path, "bad.py", text)
    candidate = _write(tmp_path, "c.py", CORRECT)
    with pytest.raises(kb.KernelBenchError, match=message):
        kb.cases(bad, candidate)


def test_candidate_without_model_new(problem, tmp_path):
    candidate = _write(tmp_path, "c.py", "import torch\nclass Other(torch.nn.Module):\n    pass\n")
    with pytest.raises(kb.KernelBenchError, match="defines no ModelNew"):
        kb.cases(problem, candidate)


def test_cli_budget_default_matches_the_adapter():
    from kcert.commands import kernelbench as command

    assert command.DEFAULT_BUDGET == kb.DEFAULT_BUDGET
    assert command.element_count("64k") == 64_000 and command.element_count("65536") == 65536


def test_cli_fails_a_dropped_norm_bias_and_passes_the_rewrite(problem, tmp_path):
    """The dropped LayerNorm bias is invisible at the module's init (bias 0): the trained-like weights see it.
    A small run: 128 replicates, budget 2048 elements, no sweep (tests/test_shape_sweep.py has it)."""
    wrong = _write(tmp_path, "no_norm_bias.py", NO_NORM_BIAS)
    report = tmp_path / "wrong.json"
    small = ["--replicates", "128", "--max-replicates", "128", "--budget", "2048", "--no-shapes", "--no-algebra-proof"]
    assert main(["kernelbench", problem, wrong, *small, "--json", str(report)]) == 1
    certs = json.loads(report.read_text())
    assert [c["verdict"] for c in certs] == ["FAIL", "FAIL"]
    assert certs[0]["gates"]["algebra"]["verdict"] == "FAIL"
    # every certificate carries the peer rules and the adequacy check
    assert [r["rule"] for r in certs[1]["peer_rules"]["rules"]] == ["assert_close", "kernelbench", "flashattention",
                                                                    "dynamo_same"]
    assert certs[1]["adequacy"]["fakes"] and certs[0]["shape_sweep"] is None

    correct = _write(tmp_path, "correct.py", CORRECT)
    report = tmp_path / "correct.json"
    code = main(["kernelbench", problem, correct, *small, "--json", str(report)])
    certs = json.loads(report.read_text())
    assert code in (0, 3) and all(c["verdict"] != "FAIL" for c in certs)
    assert all(f["status"] != "not rejected" for c in certs for f in c["adequacy"]["fakes"])


OPAQUE = """
import numpy as np
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    \"\"\"relu(x) + y in numpy: real mode cannot follow .numpy(), so the algebra gate runs the precision ladder.\"\"\"

    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        out = np.maximum(x.detach().cpu().numpy(), 0) + y.detach().cpu().numpy()
        return torch.from_numpy(out).to(x.device)
"""

SIMPLE = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        return torch.relu(x) + y


rows = 8
cols = 64


def get_inputs():
    return [torch.randn(rows, cols), torch.randn(rows, cols)]


def get_init_inputs():
    return []
"""


def test_an_opaque_candidate_gets_the_precision_ladder(tmp_path):
    problem = _write(tmp_path, "relu_add.py", SIMPLE)
    candidate = _write(tmp_path, "numpy_relu_add.py", OPAQUE)
    case = kb.case(problem, candidate, shapes=False)
    cert = kcert.certify(case, replicates=64, max_replicates=64, peer_rules=False)
    assert cert.algebra.level == "precision ladder" and cert.algebra.verdict is kcert.Verdict.PASS
    assert "float64" in cert.algebra.ladder.accepted
