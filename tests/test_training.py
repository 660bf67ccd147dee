"""kcert.training with torch: slot mapping, the paired runs, checkpoints and the train-compare command.

The runs use a tiny model (hidden 32, 30 steps) except the command-line test, which runs the
``--quick`` mode CI is promised, stopped at 30 steps."""

import functools
import json
import textwrap

import numpy as np
import pytest
import torch

import kcert
from kcert.controls import norms as controls_norms
from kcert.training import TrainingConfig, TrainingVerdict, compare
from kcert.training.slots import SlotError, bind, case_channels, initial_norm_weights, kernels

TINY = TrainingConfig(steps=30, hidden=32, heads=2, ffn=64, seq=16, batch=4, eval_every=15, eval_sequences=8)


def _norm_case(prod, name="rms"):
    from kcert.catalog import norms as N

    return N.RMSNORM.case(name, prod, shape=(1, 8, 64))


def test_cases_map_onto_slots_and_others_are_refused_by_name():
    assert bind(controls_norms.gemma_one_plus_w_bf16()).kind == "norm"
    assert bind(controls_norms.layernorm_stats_low_precision()).bias
    from kcert.controls import activations, rope

    assert bind(activations.silu_one_minus_sigmoid_bf16()).kind == "activation"
    assert bind(activations.swiglu_fused_silu_mul()).kind == "gated_activation"
    assert bind(activations.splitk_partials_bf16()).kind == "linear"
    assert bind(rope.angles_bf16_autocast()).head_dim == 256
    from kcert.controls import moe

    router = bind(moe.topk_not_renormalised())
    assert (router.kind, router.experts, router.bias) == ("router", 64, True)
    assert bind(moe.softmax_topk_renorm_vs_topk_softmax()).kind == "router_logits"
    softmax = lambda logits: torch.softmax(logits.float(), -1).to(logits.dtype)  # noqa: E731
    odd = kcert.Case(name="softmaxish", ref=softmax, prod=softmax, inputs={"logits": kcert.Gaussian((2, 4, 8))})
    with pytest.raises(SlotError, match=r"case 'softmaxish' cannot be mapped onto the training model: its arguments "
                                        r"\(inputs \['logits'\], weights \[\]\) match no slot \(one input and no "
                                        r"weight, but ref is neither elementwise"):
        bind(odd)
    attention = lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2), -1) @ v  # noqa: E731
    qkv = {n: kcert.Gaussian((1, 2, 4, 8)) for n in "qkv"}
    with pytest.raises(SlotError, match=r"case 'sdpa' cannot be mapped .* match no slot\. Slots, read from what"):
        bind(kcert.Case(name="sdpa", ref=attention, prod=attention, inputs=qkv))
    assert issubclass(SlotError, kcert.KcertError) and issubclass(SlotError, ValueError)


def test_slots_follow_what_the_kernel_computes_not_its_argument_names():
    """Each slot's kernel written with other argument names, in another order, binds to the same slot
    and roles (docs/training.md, "slots")."""
    from kcert.catalog import activations as A, linear as L, norms as N, rope as R

    def case(ref, inputs, weights=None):
        return kcert.Case(name="renamed", ref=ref, prod=ref, inputs=inputs, weights=weights or {})

    layernorm = case(lambda beta, hidden, gamma: N.layer_norm(hidden, gamma, beta),
                     {"hidden": kcert.Gaussian((2, 8, 32))},
                     {"beta": kcert.Gaussian((32,), std=0.1), "gamma": kcert.Gaussian((32,), shift=1.0, std=0.1)})
    slot = bind(layernorm)
    assert (slot.kind, slot.arguments) == ("norm", {"x": "hidden", "w": "gamma", "b": "beta"}) and slot.bias
    assert np.array_equal(slot.weight_draw["w"], slot.weight_draw["w"]) and set(slot.weight_draw) == {"w", "b"}
    gelu = case(lambda inp: torch.nn.functional.gelu(inp), {"inp": kcert.Gaussian((4, 16))})
    assert (bind(gelu).kind, bind(gelu).arguments) == ("activation", {"x": "inp"})
    swiglu = case(lambda u, g: A.swiglu(g, u), {"u": kcert.Gaussian((4, 16)), "g": kcert.Gaussian((4, 16))})
    assert bind(swiglu).arguments == {"gate": "g", "up": "u"}
    proj = case(lambda inp, weight, bias: L.linear(inp, weight) + bias, {"inp": kcert.Gaussian((8, 16))},
                {"weight": kcert.Gaussian((24, 16), std=0.1), "bias": kcert.Gaussian((24,), std=0.1)})
    assert (bind(proj).kind, bind(proj).arguments) == ("linear", {"x": "inp", "w": "weight", "b": "bias"})
    freqs = functools.partial(R.default_frequencies, dim=16, base=10000.0)

    def rotate(pos, key, query):  # returns (k, q): the outputs in the other order than the slot's
        q, k = R.rope_neox(query, key, pos, frequencies=freqs)
        return k, q

    rope = case(rotate, {"query": kcert.Gaussian((1, 2, 8, 16)), "key": kcert.Gaussian((1, 2, 8, 16)),
                         "pos": kcert.Integers((1, 8), 0, 4096)})
    slot = bind(rope)
    assert (slot.kind, slot.head_dim, slot.positions) == ("rope", 16, (0, 4096))
    assert {slot.arguments["q"], slot.arguments["k"]} == {"query", "key"} and slot.arguments["position_ids"] == "pos"
    q, k = torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16)
    pos = torch.arange(8)[None]
    named = {slot.arguments["q"]: q, slot.arguments["k"]: k}
    want = R.rope_neox(named["query"], named["key"], pos, frequencies=freqs)
    got = kernels(slot, "ref", 16).rope(q, k, pos)  # the slot hands q's rotation back first whatever the order
    expected = want if slot.arguments["q"] == "query" else want[::-1]
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_the_tutorial_example_trains(one_thread):
    """docs/tutorial.md's example names its arguments hidden_states and weight, as HF does."""
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "examples" / "rmsnorm_cases.py"
    spec = importlib.util.spec_from_file_location("rmsnorm_cases_example", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    slot = bind(module.gemma)
    assert (slot.kind, slot.arguments) == ("norm", {"x": "hidden_states", "w": "weight"})
    result = compare(module.gemma, seeds=2, config=TINY.replace(steps=3, eval_every=3), predict=False)
    assert result.slot == "norm" and all(r.ref.finite and r.prod.finite for r in result.runs)


def test_a_kernel_that_returns_the_wrong_thing_is_named(one_thread):
    from kcert.catalog import norms as N

    case = _norm_case(lambda x, w: (N.rms_norm(x, w), x), name="pair")
    with pytest.raises(SlotError, match=r"case 'pair': prod returns a tuple of 2 in the norm slot of the training "
                                        r"model, which needs a floating tensor of shape \(4, 16, 32\)"):
        compare(case, seeds=2, config=TINY.replace(steps=2), predict=False)


def test_router_cases_train_a_mixture_of_experts(one_thread):
    from kcert.controls import moe

    result = compare(moe.topk_not_renormalised(), seeds=2, config=TINY.replace(steps=3, eval_every=3), predict=False)
    assert result.slot == "router" and all(r.ref.finite and r.prod.finite for r in result.runs)
    assert result.final_loss.mean != 0  # unnormalised top-k weights change what the experts contribute


def test_norm_sites_start_from_the_certified_weights():
    slot = bind(_norm_case(controls_norms.rms_norm_truncating_store))
    init = initial_norm_weights(slot, sites=3, hidden=48)
    drawn = slot.weight_draw["w"]
    assert np.array_equal(init[0]["w"], drawn[:48])
    assert np.array_equal(init[1]["w"], drawn[np.r_[48:64, 0:32]])  # wraps around the case's 64 channels
    assert np.array_equal(case_channels(slot, 2, 48), (96 + np.arange(48)) % 64)


def test_identical_kernels_train_identically(one_thread):
    from kcert.catalog import norms as N

    result = compare(_norm_case(N.rms_norm), seeds=3, config=TINY, predict=False)
    assert result.verdict is TrainingVerdict.INDISTINGUISHABLE and result.exit_code == 0
    assert np.all(result.final_loss.differences == 0) and np.all(result.drift.differences == 0)
    assert all(r.distance == 0 for r in result.runs)
    assert result.runs[0].ref.final_loss != result.runs[1].ref.final_loss  # the seeds do differ
    # two seeds are too few for a verdict (the cache trains the shared kernel once)
    two = compare(_norm_case(N.rms_norm), seeds=2, config=TINY, predict=False, cache={})
    assert two.verdict is TrainingVerdict.INCONCLUSIVE and two.exit_code == 3


def test_prod_that_diverges_differs(one_thread):
    from kcert.catalog import norms as N

    result = compare(_norm_case(lambda x, w: N.rms_norm(x, w) * float("inf")), seeds=3, config=TINY, predict=False)
    assert result.verdict is TrainingVerdict.DIFFERS and "non-finite in seeds [0, 1, 2]" in result.reason
    assert all(r.prod.nonfinite_step == 0 and r.ref.finite for r in result.runs)


def test_strong_negative_differs_and_a_rounding_defect_moves_the_gains(one_thread):
    strong = compare(controls_norms.llama_kernel_on_gemma_weights(), seeds=3, config=TINY, predict=False)
    assert strong.verdict is TrainingVerdict.DIFFERS and strong.exit_code == 1
    assert strong.final_loss.low > 0  # w instead of 1 + w: the outputs nearly vanish, the loss stays high
    # truncation shrinks every output by ~2^-9: the prod arm's gains grow to make up for it
    trunc = compare(_norm_case(controls_norms.rms_norm_truncating_store), seeds=3, config=TINY, predict=False)
    assert trunc.drift.mean.low > 0


def test_checkpoint_resume_recomputes_nothing(tmp_path, one_thread):
    path = tmp_path / "train.json"
    case = _norm_case(controls_norms.rms_norm_truncating_store)
    first = compare(case, seeds=3, config=TINY, predict=False, checkpoint=str(path))
    ticks = []
    again = compare(case, seeds=3, config=TINY, predict=False, checkpoint=str(path), resume=True,
                    progress=lambda done, total, label: ticks.append(done))
    assert ticks == [] and again.resumed_seeds == (0, 1, 2)
    assert np.array_equal(again.drift.differences, first.drift.differences)
    assert again.final_loss.p_value == first.final_loss.p_value
    with pytest.raises(kcert.KcertError, match="belongs to another comparison"):
        compare(case, seeds=3, config=TINY.replace(steps=20), predict=False, checkpoint=str(path), resume=True)


CASES = """
from kcert.controls import norms
strong = norms.llama_kernel_on_gemma_weights()
"""


def test_train_compare_quick_from_a_case_file(tmp_path, capsys, one_thread):
    """The CI smoke run of ``kcert train-compare --quick``: the Liger-Kernel #74 mix-up (a Llama
    kernel on Gemma weights) must be seen as "training differs", as its certificate FAILs. The run
    stops at 30 of --quick's 120 steps (the defect separates the losses within the first steps, as
    test_strong_negative_differs_and_a_rounding_defect_moves_the_gains shows at 30); everything else
    is --quick's: its model, seeds and certificate."""
    from kcert.cli import main
    from kcert.training.config import QUICK

    cases = tmp_path / "cases.py"
    cases.write_text(textwrap.dedent(CASES))
    out = tmp_path / "t.json"
    code = main(["train-compare", str(cases), "--quick", "--steps", "30", "--json", str(out),
                 "--html", str(tmp_path / "t.html")])
    printed = capsys.readouterr().out
    assert code == 1, printed
    report = json.loads(out.read_text())
    assert report["format"] == "kcert.training-comparison/1" and report["verdict"] == "training differs"
    assert QUICK.steps == 120 and report["config"] == QUICK.replace(steps=30, eval_every=30).describe()
    assert report["slot"] == "norm" and report["seeds"] == [0, 1, 2, 3]
    assert set(report["metrics"]) == {"final_loss", "loss_curve", "mean_drift"}
    final = report["metrics"]["final_loss"]
    assert final["low"] > 0 and len(final["differences"]) == 4
    assert report["certificate"]["verdict"] == "FAIL" and report["certificate"]["training_expected"] == "training differs"
    assert report["prediction"]["available"] and len(report["prediction"]["predicted"]) == 5 * 64
    assert "training differs" in printed and (tmp_path / "t.html").read_text().count("data:image/png") == 2


def test_train_compare_input_errors(tmp_path, capsys):
    from kcert.cli import main

    cases = tmp_path / "cases.py"
    cases.write_text(textwrap.dedent(CASES + "other = norms.bf16_truncation_not_rne()\n"))
    assert main(["train-compare", str(cases)]) == 2
    assert "defines 2 cases" in capsys.readouterr().err
    assert main(["train-compare", str(cases), "--case", "nope"]) == 2
    assert "has no case named 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        main(["train-compare", str(cases), "--resume"])
    assert stop.value.code == 2
    assert main(["train-compare", str(cases), "--case", "bf16_truncation_not_rne", "--seeds", "1"]) == 2
    assert "seeds must be >= 2" in capsys.readouterr().err


@pytest.mark.parametrize("raised, code, said", [
    (RuntimeError("boom"), 2, "kcert: error: case 'llama_kernel_on_gemma_weights': kcert stopped on an unexpected RuntimeError: boom"),
    (KeyboardInterrupt(), 130, "kcert: interrupted; finished seeds are in {ckpt}, continue with --resume"),
])
def test_train_compare_ends_through_the_shared_command_loop(tmp_path, capsys, monkeypatch, raised, code, said):
    """An unexpected exception is one line and exit 2 (never 1, a FAIL); Ctrl-C is 130 and says where the
    finished seeds are: kcert.commands.session.CommandRun.attempt, as for the certifying commands."""
    import importlib

    from kcert.cli import main

    engine = importlib.import_module("kcert.training.compare")  # the module (kcert.training.compare: the function)

    def stop(*args, **kwargs):
        raise raised

    monkeypatch.setattr(engine, "compare", stop)
    cases = tmp_path / "cases.py"
    cases.write_text(textwrap.dedent(CASES))
    ckpt = tmp_path / "seeds.json"
    assert main(["train-compare", str(cases), "--checkpoint", str(ckpt)]) == code
    err = capsys.readouterr().err
    assert said.format(ckpt=ckpt) in err and "Traceback" not in err
