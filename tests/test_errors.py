"""Input errors through the Python API: each names what is wrong and where."""

import pytest
import torch

import kcert

X = {"x": kcert.Gaussian((4, 8))}


def _case(**kw):
    base = dict(name="c", ref=lambda x: x * 2, prod=lambda x: x + x, inputs=X)
    base.update(kw)
    return kcert.Case(**base)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(replicates=1), "replicates must be an integer >= 2, got 1"),
        (dict(replicates=2.5), "replicates must be an integer >= 2, got 2.5"),
        (dict(seed=-1), "seed must be an integer >= 0, got -1"),
        (dict(horizon="soon"), "horizon must be a number > 1, got 'soon'"),
        (dict(horizon=float("inf")), "horizon must be a finite number > 1, got inf"),
        (dict(replicates=8, max_replicates=4), "max_replicates must be an integer >= 8, got 4"),
        (dict(device="tpu:9"), "device"),
    ],
)
def test_invalid_parameters_name_the_rule_and_the_value(kwargs, message):
    with pytest.raises(kcert.ParameterError, match=message.replace("(", r"\(").replace(")", r"\)")):
        kcert.certify(_case(), **kwargs)


def test_certify_needs_a_case():
    with pytest.raises(kcert.ParameterError, match="case must be a kcert.Case, got dict"):
        kcert.certify({"name": "x"})


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        (dict(name=""), kcert.CaseError, "name must be a non-empty string"),
        (dict(inputs={}), kcert.CaseError, "inputs must declare at least one probe"),
        (dict(inputs={"x": torch.zeros(2)}), kcert.CaseError, r"inputs\['x'\] must be a kcert probe"),
        (dict(weights={"x": kcert.Gaussian((2,))}), kcert.CaseError, r"names \['x'\] appear in both"),
        (dict(buckets="channel"), kcert.CaseError, "buckets must be kcert.Axes"),
        (dict(oracle=3), kcert.CaseError, "oracle must be callable or None"),
        (dict(inputs={"1x": kcert.Gaussian((2,))}), kcert.CaseError, "must be a valid argument name"),
    ],
)
def test_case_declaration_errors(kwargs, error, message):
    with pytest.raises(error, match=message):
        _case(**kwargs)
    assert issubclass(error, ValueError)


def test_probe_declaration_errors():
    with pytest.raises(kcert.CaseError, match="Uniform: low must be < high"):
        kcert.Uniform((2,), 1.0, 0.0)
    with pytest.raises(kcert.CaseError, match="Integers: low and high must be ints"):
        kcert.Integers((2,), 0, 0)
    with pytest.raises(kcert.CaseError, match="Fixed: value must be a torch.Tensor"):
        kcert.Fixed([1, 2])
    with pytest.raises(kcert.CaseError, match="Axes: axes must be ints"):
        kcert.Axes("channel")
    with pytest.raises(kcert.CaseError, match="Labels: count must be an int >= 1"):
        kcert.Labels(lambda *a: None, count=0)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(buckets=kcert.Axes(3)),
         r"case 'c', replicate 0 \(seed 2, replicate seed \d+\), output: Axes\(3,\) does not fit an output with 2 dimensions"),
        (dict(buckets=(kcert.Axes(-1), kcert.Axes(-1))), "buckets gives 2 specs but the kernels return 1 outputs"),
        (dict(output_names=("a", "b")), "output_names has 2 names but the kernels return 1 outputs"),
        (dict(oracle=lambda x: (x, x)), "the oracle returns 2 outputs but ref returns 1"),
        (dict(oracle=lambda x: 1 / 0), "oracle raised ZeroDivisionError"),
        (dict(prod=lambda x: [1.0]), "prod must return a tensor or a non-empty tuple of tensors, got list"),
        (dict(ref=lambda x: x.to(torch.int32), prod=lambda x: x.to(torch.int32)), "only floating outputs"),
        (dict(buckets=kcert.Labels(lambda i, w, o: 1 / 0)), "the Labels function raised ZeroDivisionError"),
        (dict(buckets=kcert.Labels(lambda i, w, o: o)), "the Labels function must return an integer tensor"),
        (dict(buckets=kcert.Labels(lambda i, w, o: torch.zeros(3, dtype=torch.long))), "do not broadcast"),
        (dict(buckets=kcert.Labels(lambda i, w, o: torch.full((1,), 5), count=2)), "label 5 is out of range"),
    ],
)
def test_kernel_and_bucket_errors_name_the_case_output_and_replicate(kwargs, message):
    with pytest.raises(kcert.KcertError, match=message):
        kcert.certify(_case(**kwargs), replicates=4, seed=2)


def test_kernel_error_carries_replicate_seed():
    case = _case(prod=lambda x: (_ for _ in ()).throw(ValueError("bad")))
    with pytest.raises(kcert.KernelError) as exc:
        kcert.certify(case, replicates=4, seed=9)
    assert "replicate 0 (seed 9, replicate seed " in str(exc.value)
    assert isinstance(exc.value.__cause__, ValueError)


def test_custom_probes_widen_their_floating_draws():
    import torch as _t

    probe = kcert.Custom(lambda g, d: _t.ones(3, device=d), "ones")
    wide = probe.widened(4.0)
    g = _t.Generator().manual_seed(0)
    assert _t.equal(wide.sample(g, "cpu", _t.float32), _t.full((3,), 4.0))
    assert "x4" in wide.describe()["description"]
