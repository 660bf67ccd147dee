"""What kcert.certify_model calls the models with (kcert/model/inputs.py, docs/model.md "Inputs"): constant
keywords beside the probes reach both forwards, every replicate; use_cache=True, raw tensors and keywords a
forward lacks are refused before any forward; the working precision defaults to the models' own, so a float32
model fed float hidden states runs on float32 inputs; an integer in the settings' place keeps the symbolic
proof off as the default does."""

import copy

import pytest
import torch
from torch import nn

import kcert
from kcert.model.inputs import own_dtype, working_dtype
from kcert.verdict import Verdict

FAST = dict(replicates=32, peer_rules=False)


class Scaled(nn.Module):
    """A linear layer and a norm; ``exact=False`` takes a cheaper path (the switch a forward keyword sets)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.proj = nn.Linear(16, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, hidden_states, exact: bool = True):
        return self.norm(self.proj(hidden_states))


class SkipsCenteringWhenInexact(Scaled):
    """prod: when ``exact`` is False, the norm is computed without centering (a defect the switch reaches)."""

    def forward(self, hidden_states, exact: bool = True):
        y = self.proj(hidden_states)
        if exact:
            return self.norm(y)
        return self.norm.weight * y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-5) + self.norm.bias


def _pair():
    ref = Scaled().eval()
    prod = SkipsCenteringWhenInexact().eval()
    prod.load_state_dict(ref.state_dict())
    return ref, prod


HIDDEN = {"hidden_states": kcert.Gaussian((4, 16), shift=0.3)}


@pytest.mark.parametrize("exact, fails", [(False, True), (True, False)])
def test_a_constant_keyword_reaches_both_forwards(exact, fails):
    ref, prod = _pair()
    cert = kcert.certify_model(ref, prod, {**HIDDEN, "exact": exact}, backward=False, **FAST)
    row = cert.row("", "end to end")
    assert (row.verdict is Verdict.FAIL) == fails, row.figure
    assert cert.provenance["inputs"]["exact"] == {"kind": "constant", "value": exact}
    assert cert.provenance["inputs"]["hidden_states"]["kind"] == "Gaussian"


@pytest.mark.parametrize("inputs, message", [
    ({**HIDDEN, "use_cache": True}, "inputs['use_cache'] is True"),
    ({**HIDDEN, "mask": torch.ones(4, 16)}, "inputs['mask'] is a tensor; give it as kcert.Fixed(tensor)"),
    ({**HIDDEN, "exact": [True]}, "inputs['exact'] must be a kcert probe"),
    ({"exact": True}, "inputs give only constant keywords (exact)"),
    ({**HIDDEN, "scale": 2.0}, "ref_model's forward takes no keyword 'scale'"),
])
def test_bad_inputs_are_refused_before_any_forward(inputs, message):
    ref, prod = _pair()
    with pytest.raises(kcert.CaseError) as info:
        kcert.certify_model(ref, prod, inputs, **FAST)
    assert message in str(info.value)


def test_a_keyword_only_prod_lacks_is_named():
    class NoSwitch(Scaled):
        def forward(self, hidden_states):
            return self.norm(self.proj(hidden_states))

    ref = Scaled().eval()
    prod = NoSwitch().eval()
    with pytest.raises(kcert.CaseError, match="prod_model's forward takes no keyword 'exact'"):
        kcert.certify_model(ref, prod, {**HIDDEN, "exact": True}, **FAST)


def test_a_model_pair_takes_constants_and_refuses_use_cache():
    ref, prod = _pair()
    assert kcert.ModelPair("p", ref, prod, {**HIDDEN, "exact": False}).dtype is None  # the models' own
    with pytest.raises(kcert.CaseError, match="use_cache"):
        kcert.ModelPair("p", ref, prod, {**HIDDEN, "use_cache": True})


def test_the_working_precision_is_the_models_own():
    ref, prod = _pair()
    assert own_dtype(ref) == torch.float32
    assert working_dtype(ref, None, None, "x") == torch.float32
    assert working_dtype(ref.to(torch.float16), None, None, "x") == torch.float16
    assert working_dtype(nn.ReLU(), None, None, "x") == torch.bfloat16  # nothing floating held: the old default
    assert working_dtype(ref, None, torch.bfloat16, "x") == torch.float32  # autocast runs float32 models
    assert working_dtype(ref, torch.bfloat16, None, "x") == torch.bfloat16  # given: kept
    mixed = nn.Sequential(nn.Linear(64, 64).to(torch.bfloat16), nn.LayerNorm(64))  # fp32 norms, bf16 matmuls
    assert own_dtype(mixed) == torch.bfloat16


def test_a_float32_model_fed_floating_inputs_runs_on_float32_inputs():
    ref, prod = _pair()
    prod = copy.deepcopy(ref)
    seen = []
    ref.proj.register_forward_pre_hook(lambda m, args: seen.append(args[0].dtype))
    cert = kcert.certify_model(ref, prod, HIDDEN, modules=kcert.Modules(names=("proj",)), backward=False,
                               end_to_end=False, **FAST)
    assert cert.provenance["dtype"] == "float32"
    assert torch.float32 in seen and torch.bfloat16 not in seen  # (float64: the oracle)
    assert not cert.warnings
    # a dtype given that is not the models' own is kept and said: a model that casts its inputs runs, and the
    # certificate warns; one that does not raises, and the error says why
    class Casting(Scaled):
        def forward(self, hidden_states, exact: bool = True):
            return super().forward(hidden_states.float())

    casting = Casting().eval()
    cert = kcert.certify_model(casting, copy.deepcopy(casting), HIDDEN, modules=kcert.Modules(names=("proj",)),
                               backward=False, end_to_end=False, dtype=torch.bfloat16, **FAST)
    assert cert.provenance["dtype"] == "bfloat16"
    assert any("drawn in bfloat16" in w and "parameters are float32" in w for w in cert.warnings)
    assert cert.verdict is not Verdict.PASS
    with pytest.raises(kcert.KcertError, match="raised RuntimeError on the drawn inputs.*drawn in bfloat16"):
        kcert.certify_model(ref, prod, HIDDEN, dtype=torch.bfloat16, **FAST)


def test_an_integer_in_the_settings_place_keeps_the_proof_off():
    ref, prod = _pair()
    prod = copy.deepcopy(ref)
    options = dict(modules=kcert.Modules(names=("norm",)), backward=False, end_to_end=False, peer_rules=False)
    by_int = kcert.certify_model(ref, prod, HIDDEN, settings=16, **options)
    assert by_int.row("norm").certificate.algebra.proof is None
    asked = kcert.certify_model(ref, prod, HIDDEN, settings=16, algebra_proof=True, **options)
    assert asked.row("norm").certificate.algebra.proof is not None  # the control: the proof does run when asked


class MaskedScores(nn.Module):
    """Scores of a linear layer under an additive mask (the dtype's most negative value above the diagonal, as HF
    builds it), then a softmax; ``Attend`` holds it and builds the mask."""

    def __init__(self, unguarded: bool = False):
        super().__init__()
        self.proj, self.unguarded = nn.Linear(8, 8), unguarded

    def forward(self, hidden_states, attention_mask):
        s = self.proj(hidden_states) + attention_mask
        if not self.unguarded:
            return torch.softmax(s, -1)
        # an online softmax over two lanes with no guard for a lane whose keys are all masked: NaN on a -inf mask
        lanes = s.reshape(*s.shape[:-1], 4, 2)
        m = lanes.amax(-2)
        d = torch.exp(lanes - m.unsqueeze(-2)).sum(-2)
        total = torch.logsumexp(m + torch.log(d), -1, keepdim=True)
        return torch.exp(s - total)


class Attend(nn.Module):
    def __init__(self, unguarded: bool = False):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.inner = nn.Linear(8, 8), MaskedScores(unguarded)

    def forward(self, hidden_states):
        n = hidden_states.shape[-1]
        above = torch.ones(n, n, dtype=torch.bool).triu(1)
        mask = torch.zeros(n, n, dtype=hidden_states.dtype).masked_fill(above, torch.finfo(hidden_states.dtype).min)
        return self.inner(self.embed(hidden_states), mask)


def test_a_forward_only_run_does_not_widen_a_mask_into_infinities():
    """The algebra gate's wide points scale a module's activations, not its masks: a forward-only run classifies the
    arguments by a recording with grad on, as a backward run does. Before, every floating argument of a forward-only
    row was scaled, the mask's most negative bf16 value became -inf in the widened draw, and a prod whose lanes of
    masked keys NaN on -inf FAILed the algebra gate though it computes ref's function on every mask the model
    gives (docs/model.md, "Study")."""
    ref = Attend().to(torch.bfloat16)
    prod = copy.deepcopy(ref)
    prod.inner.unguarded = True
    probe = {"hidden_states": kcert.Gaussian((2, 8, 8))}
    cert = kcert.certify_model(ref, prod, probe, modules=kcert.Modules(names=["inner"]), backward=False,
                               end_to_end=False, **FAST)
    (row,) = cert.rows
    assert row.certificate.algebra.verdict is Verdict.PASS, row.certificate.algebra.reason
    # the same prod on a -inf mask (what a widened draw made of the recorded mask) is not finite: the guard matters
    inf_mask = torch.zeros(8, 8).masked_fill(torch.ones(8, 8, dtype=torch.bool).triu(1), float("-inf"))
    assert not torch.isfinite(prod.inner.float()(torch.randn(2, 8, 8), inf_mask)).all()
