"""``kcert.certify_model`` on a model with a Triton kernel inside, in the CPU interpreter (docs/model.md,
"Triton kernels inside a model"): the rows run inside ``interpreter_compat`` (the kernel pins its float
argument with ``eps.to(tl.float32)``, which the interpreter as shipped refuses), the certificate names the
kernels prod launches, a bfloat16 pair whose prod launches one is refused before any row, and a patch that
reached ref too (ref launches the kernel) is named and holds the verdict at WARN."""

import copy

import pytest
import torch
from torch import nn

import kcert
from kcert.errors import TritonPrecisionError

triton = pytest.importorskip("triton", reason="needs triton (pip install 'kcert[opaque]')")
tl = pytest.importorskip("triton.language")

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def scale_rows(x_ptr, y_ptr, eps, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=0.0)
    eps = eps.to(tl.float32)  # as Liger's kernels pin scalar arguments
    tl.store(y_ptr + row * n_cols + offs, x * (1.0 + eps), mask=mask)


class Scale(nn.Module):
    def __init__(self, eps=1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        return x * (1.0 + self.eps)


class TritonScale(Scale):
    kernel = None

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.shape[-1]
        self.kernel[(x.numel() // n,)](x, y, self.eps, n, BLOCK=triton.next_power_of_2(n))
        return y


@pytest.fixture
def pair(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(TritonScale, "kernel", triton.jit(scale_rows))
    torch.manual_seed(0)
    ref = nn.Sequential(nn.Linear(16, 16), Scale()).eval()
    prod = copy.deepcopy(ref)
    prod[1] = TritonScale()
    return ref, prod


def test_a_triton_module_runs_in_the_interpreter_and_is_named(pair):
    ref, prod = pair
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 16))}, dtype=torch.float32, backward=False,
                               replicates=16, max_replicates=16, peer_rules=False)
    assert cert.provenance["triton_interpreter"] == ["scale_rows"]
    row = next(r for r in cert.rows if r.module == "1")
    assert row.certificate is not None and row.prod_kind == "TritonScale"
    assert row.verdict is not kcert.Verdict.FAIL  # x * (1 + eps) in float32 either way


def test_a_low_precision_pair_with_a_triton_kernel_is_refused(pair):
    ref, prod = pair
    with pytest.raises(TritonPrecisionError, match=r"launches Triton kernels \(scale_rows\).*bfloat16"):
        kcert.certify_model(ref.bfloat16(), prod.bfloat16(), {"input": kcert.Gaussian((4, 16))},
                            dtype=torch.bfloat16, backward=False, replicates=16, peer_rules=False)


def test_without_triton_kernels_the_interpreter_changes_nothing(pair):
    ref, _ = pair
    prod = copy.deepcopy(ref)
    cert = kcert.certify_model(ref.bfloat16(), prod.bfloat16(), {"input": kcert.Gaussian((4, 16))},
                               dtype=torch.bfloat16, backward=False, end_to_end=False, replicates=16,
                               max_replicates=16, peer_rules=False)
    assert "triton_interpreter" not in cert.provenance


def test_a_patch_that_reached_ref_too_is_named_and_holds_the_verdict_at_warn(pair, monkeypatch):
    """A library that patches a function of the architecture's module (Liger's apply_rotary_pos_emb) patches ref
    as well: the rows then compare the Triton kernel with itself. Seen by counting ref's launches too."""
    ref, prod = pair
    monkeypatch.setattr(Scale, "forward", TritonScale.forward)  # the class both models use, patched
    monkeypatch.setattr(Scale, "kernel", TritonScale.kernel, raising=False)
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 16))}, dtype=torch.float32, backward=False,
                               end_to_end=False, modules=kcert.Modules(names=("0",)), replicates=16,
                               max_replicates=16, peer_rules=False)
    assert cert.provenance["ref_triton_interpreter"] == ["scale_rows"]
    assert cert.warnings and "ref_model launches Triton kernels too (scale_rows)" in cert.warnings[0]
    assert cert.row("0").verdict is not kcert.Verdict.FAIL  # the Linear itself: the same on both sides
    assert cert.verdict is kcert.Verdict.WARN
    from kcert.model.results import ModelCertificate, ModuleRow
    skipped = (ModuleRow("0", "Linear", "Linear", "forward", 0, skipped_reason="x"),)
    assert ModelCertificate("m", skipped, warnings=cert.warnings).verdict is kcert.Verdict.WARN  # the warning's doing
    assert ModelCertificate("m", skipped).verdict is kcert.Verdict.SKIPPED
    from kcert.model.report import to_json
    assert to_json(cert)["warnings"] == list(cert.warnings)


def test_a_model_pair_without_a_shared_patch_has_no_warning(pair):
    ref, prod = pair
    cert = kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 16))}, dtype=torch.float32, backward=False,
                               end_to_end=False, modules=kcert.Modules(names=("0",)), replicates=16,
                               max_replicates=16, peer_rules=False)
    assert cert.warnings == () and "ref_triton_interpreter" not in cert.provenance


def test_a_float32_pair_under_16_bit_autocast_with_a_triton_kernel_is_refused(pair):
    ref, prod = pair  # float32 models: the kernel would receive what autocast makes of its input
    with pytest.raises(TritonPrecisionError, match=r"launches Triton kernels \(scale_rows\) and autocast is bfloat16"
                                                   r".*without autocast"):
        kcert.certify_model(ref, prod, {"input": kcert.Gaussian((4, 16))}, dtype=torch.float32,
                            autocast=torch.bfloat16, backward=False, replicates=16, peer_rules=False)
