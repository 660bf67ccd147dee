"""The recording store of ``kcert.certify_model`` (kcert.model.store): one forward of ref's model per draw
of the inputs, shared by every row, gives the rows of a run without it (every verdict, effect, U and JSON
number), runs ref's model about once per replicate instead of once per row and replicate, leaves no file
behind, and stays out of a checkpoint's fingerprint. A store that hands a row another draw's recording
would be seen: the comparison fails when the key is broken."""

import copy
import tempfile

import pytest
import torch

import kcert
from kcert.model import engine, report, store
from model_fixtures import SEQ, VOCAB, EpsOutside, FusedGain, swapped, tiny

INPUTS = {"input_ids": kcert.Integers((2, SEQ), 0, VOCAB)}
MODULES = kcert.Modules(names=("layers.0.norm1", "layers.0.attn", "layers.0.attn.qkv", "layers.1.mlp"))
FAST = dict(modules=MODULES, end_to_end=False, replicates=8, peer_rules=False,
            settle=False)  # rows held back would go on from files in a temporary folder of their own


def _without_times(d):
    if isinstance(d, dict):
        return {k: _without_times(v) for k, v in d.items() if k not in ("timings", "date") and "time" not in k}
    return [_without_times(v) for v in d] if isinstance(d, list) else d


def _run(share, monkeypatch, tmp_path, **options):
    """The rows' JSON (less times), ref's forwards while the rows ran, and the store's folders seen then."""
    monkeypatch.setattr(engine, "SHARE_RECORDINGS", share)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    forwards, seen = [0, 0], set()

    def on_event(kind, detail):
        if kind == "row":
            forwards[1] = 1  # count from the first row on (building the cases records too)
            seen.update(p.name for p in tmp_path.iterdir())

    def count(*_):
        forwards[0] += forwards[1]

    handle = ref.register_forward_pre_hook(count)
    try:
        cert = kcert.certify_model(ref, prod, INPUTS, on_event=on_event, **{**FAST, **options})
    finally:
        handle.remove()
    return _without_times(report.to_json(cert)), forwards[0], seen, cert


def test_shared_recordings_give_the_same_rows_with_one_forward_per_draw(monkeypatch, tmp_path):
    alone, forwards_alone, seen_alone, _ = _run(False, monkeypatch, tmp_path)
    shared, forwards_shared, seen, cert = _run(True, monkeypatch, tmp_path)
    assert shared["rows"] == alone["rows"]
    assert [r["verdict"] for r in shared["rows"]].count("FAIL") >= 1  # the defect is seen either way
    rows = [r for r in cert.rows if r.certificate is not None]
    draws = max(r.certificate.provenance.replicates for r in rows)
    assert len(rows) >= 6
    # alone: every row records every replicate; shared: once per distinct draw (replicates, the algebra
    # gate's points), whatever the number of rows
    assert forwards_alone >= len(rows) * 8
    assert draws <= forwards_shared <= forwards_alone / 4
    assert not seen_alone and len(seen) == 1 and next(iter(seen)).startswith("kcert-recordings-")
    assert list(tmp_path.iterdir()) == []  # the store's folder is removed when certify_model returns


def test_a_wrongly_keyed_store_is_seen(monkeypatch, tmp_path):
    # the evidence above could fail: a store that hands back one draw's recording for every replicate
    # gives other rows
    alone = _run(False, monkeypatch, tmp_path)[0]
    monkeypatch.setattr(store, "inputs_digest", lambda kwargs: "one key for every draw")
    broken = _run(True, monkeypatch, tmp_path)[0]
    assert broken["rows"] != alone["rows"]


def test_a_full_store_records_each_module_alone(monkeypatch, tmp_path):
    monkeypatch.setattr(store, "MAX_BYTES", 0)  # no file: every row records its module as without the store
    alone, forwards_alone = _run(False, monkeypatch, tmp_path)[:2]
    full, forwards_full, _, _ = _run(True, monkeypatch, tmp_path)
    assert full["rows"] == alone["rows"]
    assert forwards_full >= forwards_alone


def test_the_store_is_removed_when_a_row_raises(monkeypatch, tmp_path):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)

    def stop(kind, detail):
        if kind == "row" and detail["index"] == 1:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        kcert.certify_model(ref, prod, INPUTS, on_event=stop, **FAST)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("first, then", [(True, False), (False, True)])
def test_a_checkpoint_made_with_the_store_resumes_without_it(monkeypatch, tmp_path, first, then):
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", FusedGain)
    options = dict(modules=kcert.Modules(names=("layers.0.norm1", "layers.0.attn")), end_to_end=False,
                   replicates=16, peer_rules=False, checkpoint=tmp_path / "run.npz")
    monkeypatch.setattr(engine, "SHARE_RECORDINGS", first)
    before = kcert.certify_model(ref, prod, INPUTS, **options)
    monkeypatch.setattr(engine, "SHARE_RECORDINGS", then)
    again = kcert.certify_model(ref, prod, INPUTS, resume=True, **options)
    assert [r.direction for r in again.rows] == ["forward", "backward", "forward", "backward"]
    assert all(r.certificate.provenance.resumed for r in again.rows)
    assert [r.verdict for r in again.rows] == [r.verdict for r in before.rows]


def test_inputs_digest_tells_draws_apart():
    a = {"input_ids": torch.arange(6).reshape(2, 3)}
    assert store.inputs_digest(a) == store.inputs_digest({"input_ids": torch.arange(6).reshape(2, 3)})
    assert store.inputs_digest(a) != store.inputs_digest({"input_ids": torch.arange(6).reshape(3, 2)})
    assert store.inputs_digest(a) != store.inputs_digest({"input_ids": torch.arange(6.0).reshape(2, 3)})
    assert store.inputs_digest(a) != store.inputs_digest({"ids": torch.arange(6).reshape(2, 3)})


class _Sometimes(torch.nn.Module):
    """Calls ``b`` only when the first input is positive: a draw where it is not reached."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(8, 8), torch.nn.Linear(8, 8)

    def forward(self, x):
        y = self.a(x)
        return self.b(y) if x[0, 0] > 0 else y


@pytest.mark.parametrize("share", [False, True])
def test_a_module_a_draw_does_not_reach_fails_as_without_the_store(monkeypatch, share):
    monkeypatch.setattr(engine, "SHARE_RECORDINGS", share)
    torch.manual_seed(0)
    ref = _Sometimes().eval()
    prod = copy.deepcopy(ref)
    with pytest.raises(kcert.KernelError, match="module 'b': the module was not called"):
        kcert.certify_model(ref, prod, {"x": kcert.Gaussian((2, 8), shift=2.0)}, dtype=torch.float32,
                            backward=False, end_to_end=False, replicates=64, peer_rules=False)


def test_a_draws_file_gives_back_each_modules_tensors_as_recorded(tmp_path):
    """The raw file of a draw: every module's tensors read back alone, bit for bit, with their dtype, shape,
    strides and storage offset (a transposed or offset clone keeps its layout: a kernel's numerics may depend
    on it); a tensor two modules received is written once and read back into each module's own storage."""
    shared = torch.randn(4, 6).to(torch.bfloat16)
    transposed = torch.randn(6, 4, dtype=torch.float64).t().clone()  # strides (1, 4): not contiguous
    offset = torch.arange(10, dtype=torch.int64)[3:7]  # a view that starts inside its storage
    held = {0: {"x": shared, "t": transposed}, 1: {"x": shared, "ids": offset, "again": shared}, 2: {}}
    index = store._write(tmp_path / "draw.bin", held)
    assert (tmp_path / "draw.bin").stat().st_size == 4 * 6 * 2 + 6 * 4 * 8 + 10 * 8  # each storage once
    with store.RecordingStore(torch.nn.Identity(), {}, []) as s:
        s.files["k"], s.index_of["k"] = tmp_path / "draw.bin", index
        got = {i: s._load("k", i) for i in (1, 0, 2)}
        for i in held:
            assert set(got[i]) == set(held[i])
            for name, value in held[i].items():
                back = got[i][name]
                assert (back.dtype, back.shape, back.stride(), back.storage_offset()) == (
                    value.dtype, value.shape, value.stride(), value.storage_offset())
                assert torch.equal(back, value)
                assert back.untyped_storage().data_ptr() != value.untyped_storage().data_ptr()
        assert got[0]["x"].untyped_storage().data_ptr() != got[1]["x"].untyped_storage().data_ptr()
        assert got[1]["x"].untyped_storage().data_ptr() == got[1]["again"].untyped_storage().data_ptr()


def _ref_module_calls(reuse, monkeypatch, ref, prod, **options):
    """The rows' JSON (less times) and how often ref's selected modules ran while the rows ran."""
    monkeypatch.setattr(engine, "REUSE_REF_OUTPUTS", reuse)
    calls, counting = [0], [0]
    names = options["modules"].names

    def on_event(kind, detail):
        counting[0] = 1

    handles = [ref.get_submodule(n).register_forward_pre_hook(lambda *_: calls.__setitem__(0, calls[0] + counting[0]))
               for n in names]
    try:
        cert = kcert.certify_model(ref, prod, INPUTS, on_event=on_event, **options)
    finally:
        for h in handles:
            h.remove()
    return _without_times(report.to_json(cert)), calls[0], cert


def test_ref_outputs_kept_by_the_store_give_the_same_rows_with_fewer_calls(monkeypatch):
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    options = {**FAST, "backward": False}
    again, calls_again, _ = _ref_module_calls(False, monkeypatch, ref, prod, **options)
    kept, calls_kept, cert = _ref_module_calls(True, monkeypatch, ref, prod, **options)
    assert kept["rows"] == again["rows"]
    assert [r["verdict"] for r in kept["rows"]].count("FAIL") >= 1
    # the rows' ref calls on the recorded inputs are gone; the recording forwards and the algebra's scaled and
    # real-mode points still call ref's modules
    replicates = sum(r.certificate.provenance.replicates for r in cert.rows if r.certificate is not None)
    assert calls_again - calls_kept >= replicates - 2 * len(cert.rows)


_IN_MODEL = [False]


class _Aware(torch.nn.Module):
    """Runs ``inner`` with a flag up: a module reading it computes otherwise inside the model than alone."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids):
        _IN_MODEL[0] = True
        try:
            return self.inner(input_ids)
        finally:
            _IN_MODEL[0] = False


class _Context(EpsOutside):
    def forward(self, x):
        return super().forward(x) + (0.5 if _IN_MODEL[0] else 0.0)


def test_a_module_that_computes_otherwise_inside_the_model_never_gets_its_kept_outputs(monkeypatch):
    """ref's module's output inside the model differs from its own call on the same inputs: the first replicate's
    check sees it, and every row computes ref's module as without kept outputs (else ref would differ from prod,
    the same module, by 0.5, and the row FAIL)."""
    ref = _Aware(swapped(tiny(), "layers.0.norm1", _Context))
    prod = copy.deepcopy(ref)
    options = dict(modules=kcert.Modules(names=("inner.layers.0.norm1", "inner.layers.0.attn")), end_to_end=False,
                   replicates=8, peer_rules=False, backward=False)
    again, _, _ = _ref_module_calls(False, monkeypatch, ref, prod, **options)
    kept, _, cert = _ref_module_calls(True, monkeypatch, ref, prod, **options)
    assert kept["rows"] == again["rows"]
    assert "FAIL" not in [r.verdict.value for r in cert.rows]


def _loss(out, inputs):
    return out.float().square().mean()


def _end_to_end_ref_forwards(reuse, monkeypatch, ref, prod, flag=None, modules=MODULES):
    """The rows' JSON (less times) and how often ref's model ran while the end-to-end row ran; ``flag``, if
    given, is raised when that row starts."""
    monkeypatch.setattr(engine, "REUSE_REF_OUTPUTS", reuse)
    forwards, counting = [0], [0]

    def on_event(kind, detail):
        if kind == "row":
            counting[0] = int(detail["direction"] == "end to end")
            if flag is not None:
                flag[0] = bool(counting[0])

    handle = ref.register_forward_pre_hook(lambda *_: forwards.__setitem__(0, forwards[0] + counting[0]))
    try:
        cert = kcert.certify_model(ref, prod, INPUTS, on_event=on_event, loss=_loss,
                                   **{**FAST, "modules": modules, "end_to_end": True, "backward": False})
    finally:
        handle.remove()
        if flag is not None:
            flag[0] = False
    return _without_times(report.to_json(cert)), forwards[0], cert


def test_the_end_to_end_row_takes_refs_outputs_from_the_store_with_the_same_row(monkeypatch):
    ref = tiny()
    prod = swapped(ref, "layers.0.norm1", EpsOutside)
    again, forwards_again, _ = _end_to_end_ref_forwards(False, monkeypatch, ref, prod)
    kept, forwards_kept, cert = _end_to_end_ref_forwards(True, monkeypatch, ref, prod)
    assert kept["rows"] == again["rows"]
    whole = cert.rows[-1]
    assert whole.direction == "end to end" and whole.certificate is not None
    # every draw the module rows recorded is not run again by the end-to-end row (the first is, to check it)
    draws = max(r.certificate.provenance.replicates for r in cert.rows[:-1] if r.certificate is not None)
    assert forwards_again - forwards_kept >= min(draws, whole.certificate.provenance.replicates) - 1


class _Flagged(torch.nn.Module):
    """Adds 0.5 to its output while the flag is up: a model that computes otherwise in the end-to-end row than
    in the recording forwards of the module rows."""

    def __init__(self, inner, flag):
        super().__init__()
        self.inner, self.flag = inner, flag

    def forward(self, input_ids):
        return self.inner(input_ids) + (0.5 if self.flag[0] else 0.0)


def test_kept_model_outputs_that_differ_from_refs_own_are_never_used(monkeypatch):
    """The first replicate's check sees it and the row runs ref's model as without kept outputs (else ref, kept
    from the recordings without the 0.5, would differ from prod, the same model, by 0.5, and the row FAIL)."""
    flag = [False]
    ref = _Flagged(tiny(), flag)
    prod = copy.deepcopy(ref)
    prod.flag = flag  # deepcopy made it another list
    options = dict(monkeypatch=monkeypatch, ref=ref, prod=prod, flag=flag,
                   modules=kcert.Modules(names=("inner.layers.0.norm1", "inner.layers.1.mlp")))
    again, _, _ = _end_to_end_ref_forwards(False, **options)
    kept, _, cert = _end_to_end_ref_forwards(True, **options)
    assert kept["rows"] == again["rows"]
    assert cert.rows[-1].verdict.value != "FAIL"
