"""Small kernel pairs shared by the tests (the operator catalogue arrives with the control suite)."""

import torch


def rmsnorm_ref(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)


def rmsnorm_builtin(x, w):
    return torch.nn.functional.rms_norm(x.float(), (x.shape[-1],), w.float(), eps=1e-6).to(x.dtype)


def bf16_rmsnorm(x, w):
    """The same RMSNorm computed entirely in the working precision: differs from rmsnorm_ref."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def rms_bf16_case(prod=bf16_rmsnorm):
    import kcert

    return kcert.Case(name="rms_bf16", ref=rmsnorm_ref, prod=prod, inputs={"x": kcert.Gaussian((4, 64), shift=0.1)},
                      weights={"w": kcert.Gaussian((64,), shift=1.0, std=0.1)}, buckets=kcert.Axes(-1))


def stable_report(cert, *environment_keys) -> dict:
    """The JSON report without what legitimately differs between equal runs (date, wall time, and
    the named environment fields)."""
    from kcert.report.jsonio import to_dict

    data = to_dict(cert)
    for key in ("date", "wall_time_s"):
        data["provenance"].pop(key)
    for key in environment_keys:
        data["provenance"]["environment"].pop(key)
    return data


def rms_bf16_casefile(width: int) -> str:
    """A case file with the rms_bf16 pair (hidden size ``width``), for command-line tests."""
    return f'''
import torch, kcert
def ref(x, w):
    x32 = x.float()
    return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()).to(x.dtype)
def prod(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w
case = kcert.Case(name="rms", ref=ref, prod=prod, inputs={{"x": kcert.Gaussian((4, {width}), shift=0.1)}},
                  weights={{"w": kcert.Gaussian(({width},), shift=1.0, std=0.1)}}, buckets=kcert.Axes(-1))
'''


def control_bar_failures(control, cert) -> list[str]:
    """What a control's certificate violates of the suite's bar: a negative not detected (not WARN or FAIL),
    a positive that FAILs, a verdict other than the control's declared ``expect``."""
    import kcert.report.text

    verdict = cert.verdict
    failures = []
    if control.kind == "negative" and verdict.value not in ("WARN", "FAIL"):
        failures.append(f"negative {control.name} not detected: {verdict.value}")
    if control.kind == "positive" and verdict.value == "FAIL":
        failures.append(f"positive {control.name} FAILs: {kcert.report.text.failure_message(cert)}")
    if control.expect is not None and verdict.value != control.expect:
        failures.append(f"{control.name}: expected {control.expect}, got {verdict.value} "
                        f"({ {k: v.value for k, v in cert.gates.items()} })")
    return failures
