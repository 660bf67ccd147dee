"""Small kernel pairs and helpers shared by the tests (the operator catalogue arrives with the control
suite). Test modules import from here, never from one another."""

import pickle
import threading

import torch

import kcert
import kcert.execution.distributed
from kcert.report.stable import stable_dict as stable_report  # the JSON report without date and wall time


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


class ThreadRanks:
    """``world`` ranks as threads: all_gather pickles like torch.distributed does. One rank runs at
    a time (``lock``, released only inside collectives): real mode patches process-wide state.
    ``serial=False``: the ranks run at once (no lock; for work that touches no process-wide state).
    ``counters=True``: the store's shared counters (``comm.counter``) exist, else ``counter`` returns None."""

    def __init__(self, world, serial=True, counters=False):
        self.world, self.barrier, self.box = world, threading.Barrier(world, timeout=60), [None] * world
        self.lock, self.serial, self.counters, self.totals = threading.Lock(), serial, counters, {}
        self.counting = threading.Lock()

    def wait(self):
        if not self.serial:
            self.barrier.wait()
            return
        self.lock.release()
        try:
            self.barrier.wait()
        finally:
            self.lock.acquire()

    def comm(self, rank):
        ranks = self

        class Comm:
            def __init__(self):
                self.rank, self.world = rank, ranks.world

            def all_gather(self, obj):
                ranks.box[rank] = pickle.dumps(obj)
                ranks.wait()
                out = [pickle.loads(b) for b in ranks.box]
                ranks.wait()
                return out

            def broadcast(self, obj):
                return self.all_gather(obj)[0]

            def counter(self, key):
                if not ranks.counters:
                    return None

                def add(n):
                    with ranks.counting:
                        ranks.totals[key] = ranks.totals.get(key, 0) + n
                        return ranks.totals[key]

                return add

        return Comm()


def run_ranks(monkeypatch, world, prod=bf16_rmsnorm, **kwargs):
    """Certify ``rms_bf16_case(prod)`` on ``world`` in-process ranks (:class:`ThreadRanks`); one result
    per rank, the certificate or the exception it raised."""
    ranks, local, results = ThreadRanks(world), threading.local(), [None] * world
    monkeypatch.setattr(kcert.execution.distributed, "current", lambda: local.comm)

    def go(rank):
        local.comm = ranks.comm(rank)
        with ranks.lock:
            try:
                results[rank] = kcert.certify(rms_bf16_case(prod), **kwargs)
            except BaseException as exc:  # noqa: BLE001 - inspected by the test
                results[rank] = exc  # (a rank that stopped alone leaves the others to the barrier timeout)

    threads = [threading.Thread(target=go, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


# Layouts of one output for the reduction paths (tests/test_batched.py, tests/test_fused.py).
REDUCTION_LAYOUTS = [
    ((8, 300, 520), kcert.Axes(-1)),  # chunked along rows
    ((1, 8, 1024, 64), kcert.Axes(1)),  # heads: a middle axis
    ((2, 4, 33, 64), kcert.Axes(0, 2)),  # bucket axes apart
    ((2, 4, 33, 64), kcert.Axes()),  # one bucket
    ((4096, 64), kcert.Axes(-1)),
    # labels broadcast along heads (summed densely first), with a count and an excluded label
    ((2, 4, 300, 128), kcert.Labels(lambda i, w, r: (torch.arange(300)[:, None] // 100) * 128 + torch.arange(128),
                                    count=3 * 128)),
    ((600, 256), kcert.Labels(lambda i, w, r: torch.arange(600)[:, None] % 9 - 1)),
    ((600, 256), kcert.Labels(lambda i, w, r: (torch.arange(600 * 256) % 11 - 1).reshape(600, 256), count=12)),
]


def control_bar_failures(control, cert) -> list[str]:
    """What a control's certificate violates of the suite's bar, judged by the suite's own rule
    (:attr:`kcert.controls.suite.ControlResult.meets_bar`: a negative detected, a positive not FAIL,
    the declared ``expect`` exactly): empty when it meets the bar, else one message naming the control."""
    from kcert.controls.suite import ControlResult
    from kcert.report.text import failure_message

    if ControlResult(control, cert, 0.0).meets_bar:
        return []
    bar = "detected (WARN or FAIL)" if control.kind == "negative" else "not FAIL"
    if control.expect is not None:
        bar += f", exactly {control.expect}"
    gates = {k: v.value for k, v in cert.gates.items()}
    return [f"{control.kind} {control.name}: {cert.verdict.value}, the bar is {bar}; gates {gates}\n"
            f"{failure_message(cert)}"]


def assert_meets_bar(control, cert) -> None:
    """Fail the test unless the control's certificate meets the suite's bar (:func:`control_bar_failures`)."""
    failures = control_bar_failures(control, cert)
    assert not failures, failures[0]


def draw_float32(case, seed: int) -> dict:
    """One float32 draw of a case's inputs and weights, by name, for calling its kernels directly."""
    g = torch.Generator().manual_seed(seed)
    return {n: p.sample(g, "cpu", torch.float32) for n, p in {**case.inputs, **case.weights}.items()}


def as_outputs(value) -> tuple:
    """A kernel's return value as a tuple of outputs."""
    return value if isinstance(value, tuple) else (value,)
