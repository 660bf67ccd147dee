"""kcert.certify_model (docs/model.md): a module certified on ref's recorded inputs FAILs for its own defect
alone and is localized; a benign rewrite (not bitwise equal) does not FAIL; matching by qualified name
(swapped classes, patched forwards, unmatched modules); bad input named; checkpoint per row. Tiny models,
64 replicates."""

import copy
import types

import pytest
import torch

import kcert
from kcert.verdict import Verdict
from model_fixtures import SEQ, VOCAB, EpsOutside, Norm, FusedGain, swapped, tiny

INPUTS = {"input_ids": kcert.Integers((2, SEQ), 0, VOCAB)}
FAST = dict(replicates=64, peer_rules=False)


def test_an_injected_norm_defect_is_localized_and_alone_fails_among_leaves():
    ref = tiny()
    prod = swapped(ref, "layers.1.norm2", EpsOutside)
    selection = kcert.Modules(names=("layers.1", "layers.1.norm*", "layers.1.attn", "layers.1.mlp*"))
    cert = kcert.certify_model(ref, prod, INPUTS, modules=selection, backward=False, name="tiny", **FAST)
    assert cert.first_failure is not None and cert.first_failure.module == "layers.1.norm2"
    assert cert.first_failure.prod_kind == "EpsOutside"
    leaves = {"layers.1.norm1", "layers.1.norm2", "layers.1.mlp.gate", "layers.1.mlp.up", "layers.1.mlp.act",
              "layers.1.mlp.down"}
    assert leaves <= {r.module for r in cert.rows}
    failing = {r.module for r in cert.failures}
    assert failing & leaves == {"layers.1.norm2"}
    # the block holding the norm FAILs too, as including it, not as the culprit
    assert "layers.1" in failing and cert.failing_descendants(cert.row("layers.1")) == ("layers.1.norm2",)
    assert cert.row("layers.1.attn").verdict is not Verdict.FAIL  # downstream of the defect, own inputs: clean
    assert cert.verdict is Verdict.FAIL
    orders = [r.order for r in cert.rows if r.direction == "forward"]
    assert orders == sorted(orders)


def test_the_defect_fails_its_backward_row_too():
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.0.norm*",)),
                               end_to_end=False, **FAST)
    back = cert.row("layers.0.norm1", "backward")
    assert back.verdict is Verdict.FAIL
    names = [o.name for o in back.certificate.outputs]
    assert names == ["grad_x", "grad_param__weight"]
    assert cert.row("layers.0.norm2", "backward").verdict is not Verdict.FAIL


def test_a_benign_rewrite_that_is_not_bitwise_equal_does_not_fail():
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", FusedGain)
    x = torch.randn(2, SEQ, 32, dtype=torch.bfloat16)
    with torch.no_grad():  # the positive control is a real rewrite: its outputs differ in rounding
        assert not torch.equal(ref.layers[0].norm1(x), prod.layers[0].norm1(x))
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.0.norm1",)), **FAST)
    assert [r.direction for r in cert.rows] == ["forward", "backward", "end to end"]
    assert not cert.failures, [(r.module, r.direction, r.figure) for r in cert.failures]
    assert cert.first_failure is None
    bitwise = cert.row("layers.0.norm1").certificate.bitwise[0]
    assert bitwise.ulp_histogram[1:].sum() > 0  # prod differed from ref in some elements


def test_unmatched_modules_are_listed_and_hold_the_verdict_at_warn():
    ref = tiny()
    prod = copy.deepcopy(ref)
    prod.layers[0].extra = torch.nn.Identity()
    del prod.layers[1].mlp.act
    prod.layers[1].mlp.act = None  # forward would fail: not selected, and not run (unmatched)
    prod.layers[1].mlp.forward = types.MethodType(
        lambda self, x: self.down(torch.nn.functional.silu(self.gate(x)) * self.up(x)), prod.layers[1].mlp)
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.1.mlp",)), backward=False,
                               end_to_end=False, **FAST)
    assert ("prod", "layers.0.extra") in cert.unmatched and ("ref", "layers.1.mlp.act") in cert.unmatched
    assert cert.row("layers.1.mlp").verdict is not Verdict.FAIL  # the patched forward computes the same
    assert cert.verdict.severity >= Verdict.WARN.severity


def test_a_swapped_class_and_a_patched_forward_are_matched_and_judged():
    ref = tiny()
    prod = swapped(ref, "layers.0.norm2", EpsOutside)

    def wrong_scale(self, x):  # a patched forward with a wrong gate scale
        return self.down(self.act(self.gate(x) * 1.01) * self.up(x))

    prod.layers[1].mlp.forward = types.MethodType(wrong_scale, prod.layers[1].mlp)
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(types=(Norm, "MLP"), depth=3),
                               backward=False, end_to_end=False, **FAST)
    assert not cert.unmatched
    assert cert.row("layers.0.norm2").prod_kind == "EpsOutside"
    assert {r.module for r in cert.failures} == {"layers.0.norm2", "layers.1.mlp"}
    assert cert.first_failure.module == "layers.0.norm2"  # first in execution order


def test_the_default_selection_is_the_modules_that_compute():
    from kcert.model.select import Modules, match, select, trace

    ref = tiny()
    m = match(ref, ref)
    found = trace(ref, m.ref, {"input_ids": torch.randint(0, VOCAB, (2, SEQ))})
    chosen = select(Modules(), m.ref, found)
    assert chosen[:3] == ["embed", "layers.0", "layers.0.norm1"]  # execution order; the block adds residuals
    assert "layers" not in chosen and "" not in chosen  # a ModuleList computes nothing; the root is end to end
    assert {"layers.0.attn", "layers.0.mlp", "layers.0.mlp.act", "head"} <= set(chosen)


@pytest.mark.parametrize("call, message", [
    (lambda ref: kcert.certify_model("ref", ref, INPUTS), "ref_model must be a torch.nn.Module, got str"),
    (lambda ref: kcert.certify_model(ref, copy.deepcopy(ref), {"input_ids": torch.zeros(2, SEQ)}),
     "inputs['input_ids'] is a tensor; give it as kcert.Fixed(tensor)"),
    (lambda ref: kcert.certify_model(ref, copy.deepcopy(ref), INPUTS, modules=kcert.Modules(names=("nothing.*",))),
     "the selection (names nothing.*) matches no module"),
    (lambda ref: kcert.certify_model(ref, ref, INPUTS), "the same object"),
    (lambda ref: kcert.certify_model(ref, copy.deepcopy(ref), {"tokens": INPUTS["input_ids"]}),
     "ref_model raised TypeError"),
    (lambda ref: kcert.Modules(depth=-1), "depth must be None or an int >= 0"),
])
def test_bad_input_is_named(call, message):
    with pytest.raises(kcert.KcertError) as info:
        call(tiny())
    assert message in str(info.value)


def test_a_checkpoint_per_row_resumes(tmp_path):
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    options = dict(modules=kcert.Modules(names=("layers.0.norm1", "embed")), backward=False, end_to_end=False,
                   checkpoint=tmp_path / "run.npz", **FAST)
    first = kcert.certify_model(ref, prod, INPUTS, **options)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["run.000-embed-forward.npz", "run.001-layers.0.norm1-forward.npz"]
    again = kcert.certify_model(ref, prod, INPUTS, resume=True, **options)
    assert [r.verdict for r in again.rows] == [r.verdict for r in first.rows]
    assert all(r.certificate.provenance.resumed for r in again.rows)


def test_a_backward_row_resumes_from_its_checkpoint(tmp_path):
    # a gradient row (its case built by kcert.gradients over the recorded probes) resumes like a forward one
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", FusedGain)
    options = dict(modules=kcert.Modules(names=("layers.0.norm1",)), end_to_end=False,
                   checkpoint=tmp_path / "run.npz", **FAST)
    first = kcert.certify_model(ref, prod, INPUTS, **options)
    again = kcert.certify_model(ref, prod, INPUTS, resume=True, **options)
    assert [r.direction for r in again.rows] == ["forward", "backward"]
    assert [r.verdict for r in again.rows] == [r.verdict for r in first.rows]
    assert all(r.certificate.provenance.resumed for r in again.rows)


def test_a_few_rows_of_a_whole_run_resume_with_a_raised_cap(tmp_path):
    """The settle command of ``kcert model`` (docs/model.md, "Settling a variance WARN"): a selection of a few
    modules resumes their rows from a whole run's checkpoint files (whose indices were the whole run's), their
    looks go on under the raised cap, and each row's certificate is the one a fresh run with that cap gives."""
    from sample_kernels import stable_report

    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", FusedGain)
    options = dict(end_to_end=False, peer_rules=False, replicates=100)
    whole = kcert.Modules(names=("embed", "layers.0.norm1", "layers.0.norm2"))
    first = kcert.certify_model(ref, prod, INPUTS, modules=whole, checkpoint=tmp_path / "run.npz", max_replicates=100,
                                **options)
    files = sorted(p.name for p in tmp_path.iterdir())
    assert len(files) == 6 and "run.005-layers.0.norm2-backward.npz" in files
    assert first.row("layers.0.norm2", "backward").verdict is Verdict.WARN  # its one look left it undecided
    few = kcert.Modules(names=("layers.0.norm2",))
    settled = kcert.certify_model(ref, prod, INPUTS, modules=few, checkpoint=tmp_path / "run.npz", resume=True,
                                  max_replicates=400, **options)
    fresh = kcert.certify_model(ref, prod, INPUTS, modules=few, max_replicates=400, **options)
    assert sorted(p.name for p in tmp_path.iterdir()) == files  # written back to the whole run's files
    back = settled.row("layers.0.norm2", "backward").certificate
    assert back.provenance.resumed["checkpoint"].endswith("run.005-layers.0.norm2-backward.npz")
    assert back.variance[0].looks[-1] > 100  # its looks went on
    for mine, theirs in zip(settled.rows, fresh.rows):
        a, b = stable_report(mine.certificate), stable_report(theirs.certificate)
        a["notes"] = [n for n in a["notes"] if not n.startswith("looks extended on resume")]
        assert a == b, (mine.module, mine.direction)
    # runs with other selections wrote one row's file twice: the resume refuses to choose, naming both
    (tmp_path / "run.000-layers.0.norm2-backward.npz").write_bytes(b"")
    with pytest.raises(kcert.KcertError, match=r"2 checkpoint files hold row layers.0.norm2 backward .*"
                                               r"run.000-layers.0.norm2-backward.npz, run.005-layers.0.norm2-backward"):
        kcert.certify_model(ref, prod, INPUTS, modules=few, checkpoint=tmp_path / "run.npz", resume=True,
                            max_replicates=400, **options)


class _ReadsStorage:
    """A module as an extension or a compiled kernel looks to kcert: it reads raw storage, which real mode
    refuses, so its algebra test is the precision ladder's."""

    def forward(self, x):
        x.untyped_storage()
        return super().forward(x)


class OpaqueNorm(_ReadsStorage, Norm):
    pass


class OpaqueEpsOutside(_ReadsStorage, EpsOutside):
    pass


@pytest.mark.parametrize("cls, verdict", [(OpaqueNorm, Verdict.PASS), (OpaqueEpsOutside, Verdict.FAIL)])
def test_a_module_real_mode_cannot_run_gets_an_algebra_test_at_a_finer_rung(cls, verdict):
    # the recorded activations and the weights are upcast to the ladder's float32 and float64 rungs, where the
    # module computes; kept in bfloat16 there, every finer rung returned bfloat16 and was refused ("no algebra
    # test finer than the bias and variance gates"), forward and backward
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", cls)
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.0.norm1",)),
                               end_to_end=False, **FAST)
    for direction in ("forward", "backward"):
        algebra = cert.row("layers.0.norm1", direction).certificate.algebra
        assert "rungs: bfloat16 (accepted), float32 (accepted), float64 (accepted)" in algebra.reason, algebra.reason
        assert algebra.verdict is verdict, (direction, algebra.reason)


def test_a_compiled_submodule_is_matched_and_called_compiled():
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    prod.layers[0].norm1 = torch.compile(prod.layers[0].norm1, backend="eager")
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.0.norm1",)), backward=False,
                               end_to_end=False, **FAST)
    assert not cert.unmatched  # the _orig_mod level is dropped from the names
    row = cert.row("layers.0.norm1")
    assert row.prod_kind == "OptimizedModule"
    assert row.verdict is Verdict.FAIL  # the compiled defect, called through its wrapper with ref's parameters


def test_a_model_compiled_as_a_whole_is_matched_and_says_its_module_rows_run_eagerly():
    ref = tiny()
    prod = torch.compile(swapped(ref, "layers.0.norm1", EpsOutside), backend="eager")
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.0.norm1",)), backward=False,
                               **FAST)
    assert not cert.unmatched
    assert cert.first_failure.module == "layers.0.norm1"  # the defect is in the module's Python: seen eagerly too
    assert cert.provenance["prod_compiled_whole"] is True
    end = next(r for r in cert.rows if r.direction == "end to end")
    assert any("compiled as a whole" in n or "compile'd as a whole" in n for n in end.notes)
    plain = kcert.certify_model(ref, swapped(ref, "layers.0.norm1", EpsOutside), INPUTS,
                                modules=kcert.Modules(names=("layers.0.norm1",)), backward=False, **FAST)
    assert "prod_compiled_whole" not in plain.provenance
    assert not next(r for r in plain.rows if r.direction == "end to end").notes


def test_max_time_bounds_the_whole_run_and_a_resume_finishes_it(tmp_path, monkeypatch):
    """max_time is the whole call's budget, every row together (not each row's): past it the run stops
    before the next row, naming it and the rows finished; their checkpoints let resume=True finish the run.
    A fake clock that advances 100 s as each row starts makes the stop deterministic."""
    import time as real_time

    from kcert.errors import ModelTimeLimitReached
    from kcert.model import engine

    now = [0.0]
    monkeypatch.setattr(engine, "time", types.SimpleNamespace(monotonic=lambda: now[0],
                                                              perf_counter=real_time.perf_counter))

    def advance(kind, detail):
        if kind == "row":
            now[0] += 100.0

    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    options = dict(modules=kcert.Modules(names=("embed", "layers.0.norm1", "layers.0.norm2")), backward=False,
                   end_to_end=False, checkpoint=tmp_path / "run.npz", **FAST)
    with pytest.raises(ModelTimeLimitReached) as info:  # rows start at 0 s and 100 s; at 200 s none is left
        kcert.certify_model(ref, prod, INPUTS, max_time=150, on_event=advance, **options)
    stop = info.value
    assert (stop.finished, stop.rows, stop.row, stop.done) == (2, 3, "layers.0.norm2 forward", 0)
    assert "before row layers.0.norm2 forward started, 2 of 3 rows finished" in str(stop)
    assert isinstance(stop, TimeoutError)  # as every kcert time limit
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.000-embed-forward.npz",
                                                          "run.001-layers.0.norm1-forward.npz"]
    done = kcert.certify_model(ref, prod, INPUTS, resume=True, **options)
    assert [r.certificate.provenance.resumed is not None for r in done.rows] == [True, True, False]
    assert done.first_failure.module == "layers.0.norm1"


def test_a_row_stopped_by_its_time_limit_names_the_model_row(monkeypatch):
    from kcert.errors import ModelTimeLimitReached, TimeLimitReached
    from kcert.model import engine

    calls = []

    def certify(case, settings, **kwargs):
        calls.append(settings.max_time)
        raise TimeLimitReached(case.name, 5, 64, settings.max_time, None)

    monkeypatch.setattr(engine, "certify", certify)
    ref = tiny()
    with pytest.raises(ModelTimeLimitReached) as info:
        kcert.certify_model(ref, copy.deepcopy(ref), INPUTS, modules=kcert.Modules(names=("embed",)),
                            backward=False, end_to_end=False, max_time=30, **FAST)
    assert 0 < calls[0] <= 30  # the row is given what is left of the whole run's budget
    assert (info.value.row, info.value.done, info.value.planned) == ("embed forward", 5, 64)
    assert "in row embed forward after 5 of 64 planned replicates, 0 of 1 rows finished" in str(info.value)
    assert "no checkpoint was given, so nothing is saved" in str(info.value)


class _Wrapped:
    """A mask object of prod's own kind (as flex attention's BlockMask is to eager's tensor mask)."""

    def __init__(self, values):
        self.values = values


class _Gate(torch.nn.Module):
    def forward(self, x, mask):
        if not isinstance(mask, _Wrapped):
            raise TypeError("this implementation takes a _Wrapped mask")
        return x * mask.values


class _TensorGate(torch.nn.Module):
    def forward(self, x, mask):
        return x * mask


class _Masked(torch.nn.Module):
    def __init__(self, wrapped: bool):
        super().__init__()
        self.lin, self.wrapped = torch.nn.Linear(8, 8), wrapped
        self.gate = _Gate() if wrapped else _TensorGate()

    def forward(self, input):
        mask = (input > -3).to(input.dtype)
        return self.gate(self.lin(input), _Wrapped(mask) if self.wrapped else mask)


def test_a_module_that_takes_another_interface_in_prod_is_skipped_with_the_reason():
    """prod's module receives, in prod's own model, an argument of another kind than ref's (flex attention's
    BlockMask against eager's tensor mask): run on ref's recorded inputs it would get an input it never gets
    (flex's compiled kernel crashed the process). Its rows are SKIPPED, named; the rest is certified."""
    from kcert.model.record import interface_difference

    torch.manual_seed(0)
    ref = _Masked(False).eval()
    prod = _Masked(True).eval()
    prod.load_state_dict(ref.state_dict())
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 8))}, dtype=torch.float32, **FAST)
    gate = cert.row("gate")
    assert gate.verdict is Verdict.SKIPPED and cert.row("gate", "backward").verdict is Verdict.SKIPPED
    assert "'mask' is a Tensor in ref's model and a _Wrapped in prod's" in gate.skipped_reason
    assert cert.row("lin").certificate is not None and cert.row("", "end to end").certificate is not None
    assert cert.verdict is not Verdict.FAIL
    x = torch.ones(2)
    assert interface_difference(((x,), {"mask": None}), ((x,), {"mask": x})) is None  # sdpa: None for eager's mask
    assert interface_difference(((x,), {"mask": x.bool()}), ((x,), {"mask": x})) is None  # another dtype: one kind
    assert interface_difference(((x, 1), {}), ((x, "a"), {})) == "argument 1 is a int in ref's model and a str in prod's"


def test_prod_weights_that_differ_from_refs_are_named_in_a_warning():
    """Module rows hand ref's parameters to both sides (they certify prod's code): a prod whose own weights
    differ (a converted checkpoint) is told so, and the verdict is held at WARN at least."""
    from kcert.model.select import parameter_differences

    ref = tiny()
    same = copy.deepcopy(ref)
    assert parameter_differences(ref, same) is None
    prod = copy.deepcopy(ref)
    with torch.no_grad():
        prod.layers[1].norm2.weight[3] += 0.25
    warning = parameter_differences(ref, prod)
    assert warning is not None and "layers.1.norm2.weight (1 of" in warning and "certify prod's code" in warning
    cert = kcert.certify_model(ref, prod, INPUTS, modules=kcert.Modules(names=("layers.1.norm2",)), backward=False,
                               end_to_end=False, **FAST)
    assert cert.warnings == (warning,)
    assert cert.row("layers.1.norm2").verdict is not Verdict.FAIL  # ref's weight on both sides: the same code
    assert cert.verdict.severity >= Verdict.WARN.severity


class _Checkpointed(torch.nn.Module):
    """A block that checkpoints its own forward with torch.utils.checkpoint (not Hugging Face's flag)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(lambda h: self.b(torch.nn.functional.gelu(self.a(h))), x, use_reentrant=False)


def test_a_backward_row_skipped_in_a_checkpoint_recompute_says_so():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(16, 16), _Checkpointed()).train()
    cert = kcert.certify_model(ref, copy.deepcopy(ref), {"input": kcert.Gaussian((4, 16))}, dtype=torch.float32,
                               modules=kcert.Modules(names=("1",)), end_to_end=False, **FAST)
    row = cert.row("1", "backward")
    assert row.verdict is Verdict.SKIPPED
    assert "raised in torch.utils.checkpoint's recompute" in row.skipped_reason
