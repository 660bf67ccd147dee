"""The probe draws are part of a certificate's definition (a seed and a replicate give the same
values everywhere, docs/design.md): making them cheaper must not change a bit of them."""

import hashlib

import pytest
import torch

import kcert
from kcert.execution import probes, seeding

PROBES = {"unit": kcert.Gaussian((3, 257), shift=0.1), "centred": kcert.Gaussian((3, 257)),
          "wide": kcert.Gaussian((3, 257), shift=-0.5, std=2.5), "uniform": kcert.Uniform((3, 257), low=-2.0, high=3.0),
          "unit_uniform": kcert.Uniform((3, 257), low=0.0, high=1.0)}
# sha256 of the working and float64 draws of PROBES (seed 7, replicates 0-2, plain and 4x wider),
# written by the code before the draws skipped their multiplications by 1 and additions of 0
DIGESTS = {torch.bfloat16: "d2f88af446dcab91", torch.float16: "35a74dcda8b11eb3", torch.float32: "92088166b310e430",
           torch.float64: "6eaeb874b508cadd"}


def _case(dtype):
    return kcert.Case(name="draws", ref=lambda **k: k["unit"], prod=lambda **k: k["unit"], inputs=PROBES, dtype=dtype)


@pytest.mark.parametrize("dtype", list(DIGESTS))
def test_draws_keep_every_bit(dtype):
    h = hashlib.sha256()
    for r in range(3):
        for widen in (1.0, 4.0):
            draw = probes.draw_inputs(_case(dtype), 7, r, torch.device("cpu"), widen=widen)
            for name in PROBES:
                h.update(draw.working[name].contiguous().view(torch.uint8).numpy().tobytes())
                h.update(draw.exact[name].numpy().tobytes())
    assert h.hexdigest()[:16] == DIGESTS[dtype]


@pytest.mark.parametrize("name", list(PROBES))
def test_draws_are_the_textbook_formula(name):
    """randn * std + shift and rand * (high - low) + low, each rounded in float32, then to bf16."""
    probe = PROBES[name]
    draw = probes.draw_inputs(_case(torch.bfloat16), 7, 1, torch.device("cpu"))
    g = seeding.generator(7, seeding.INPUTS, 1)
    for other in PROBES:  # the probes draw from one generator, in order
        if other == name:
            break
        PROBES[other].sample(g, torch.device("cpu"), torch.float32)
    if isinstance(probe, kcert.Gaussian):
        expected = torch.randn(probe.shape, generator=g).mul_(probe.std).add_(probe.shift)
    else:
        expected = torch.rand(probe.shape, generator=g).mul_(probe.high - probe.low).add_(probe.low)
    expected = expected.to(torch.bfloat16)
    assert torch.equal(draw.working[name].view(torch.int16), expected.view(torch.int16))
    assert torch.equal(draw.exact[name], expected.double())
