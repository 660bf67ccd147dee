"""Where a ``certify_model`` run's time goes, per kernel call: the zoo's Llama eager against sdpa (model_zoo.py),
every call of ref, prod and the oracle timed (wrapping the runner's calls) and summed by row kind (leaf or
composite module, forward or backward), beside the recording store's look-ups, and each row's wall time.
Looks capped at R, so every row runs R replicates (docs/model.md, "Cost").

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_cost_split.py R [--no-backward] \\
        [--modules NAME,...]
"""

from __future__ import annotations

import argparse
import collections
import time

import torch

import kcert
import model_zoo
from kcert.execution import runner
from kcert.model import store


def _composite(module: str) -> bool:
    last = module.rsplit(".", 1)[-1]
    return last in ("self_attn", "mlp") or last.isdigit()


class Split:
    """Seconds and calls per (row kind, role), filled by wrappers around the runner's kernel calls."""

    def __init__(self):
        self.seconds, self.calls = collections.defaultdict(float), collections.Counter()
        self.kind = None

    def add(self, key, start):
        self.seconds[key] += time.perf_counter() - start
        self.calls[key] += 1

    def wrap(self, cls, name, role=None):
        original = getattr(cls, name)

        def timed(obj, *args, **kwargs):
            start = time.perf_counter()
            try:
                return original(obj, *args, **kwargs)
            finally:
                self.add((self.kind, role or (args[0] if args else name)), start)
        setattr(cls, name, timed)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("replicates", type=int)
    ap.add_argument("--no-backward", dest="backward", action="store_false")
    ap.add_argument("--modules", default=None, help="qualified names, comma-separated (default: kcert's selection)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    split = Split()
    kernels = next(c for c in vars(runner).values() if isinstance(c, type) and hasattr(c, "_kernels"))
    split.wrap(kernels, "_call")  # its first argument is the role: ref or prod
    split.wrap(kernels, "_oracle", "oracle")
    split.wrap(store.RecordingStore, "leaves", "recording store")
    walls, current = {}, {}

    def on_event(kind, detail):
        if kind != "row":
            return
        now = time.perf_counter()
        if current:
            walls[current["key"]] = now - current["start"]
        module = detail["module"] or "(model)"
        current.update(key=(module, detail["direction"]), start=now)
        split.kind = ("composite" if _composite(module) else "leaf") + " " + detail["direction"]

    pair = model_zoo.pair("llama_eager_vs_sdpa")
    ref, prod = model_zoo.models(pair)
    modules = kcert.Modules(names=args.modules.split(",")) if args.modules else None
    start = time.perf_counter()
    cert = kcert.certify_model(ref, prod, model_zoo.inputs(pair.arch), modules=modules, backward=args.backward,
                               end_to_end=False, replicates=args.replicates, max_replicates=args.replicates,
                               on_event=on_event)
    walls[current["key"]] = time.perf_counter() - current["start"]
    print(f"wall {time.perf_counter() - start:.1f} s, {len(cert.rows)} rows, R = {args.replicates}")
    for key, seconds in sorted(split.seconds.items(), key=lambda kv: -kv[1]):
        n = split.calls[key]
        print(f"  {key[0]:20s} {key[1]:16s} {seconds:7.1f} s  {n:6d} calls  {seconds / n * 1e3:7.1f} ms per call  "
              f"{seconds / args.replicates:6.3f} s per replicate")
    for (module, direction), seconds in walls.items():
        print(f"  row {module} {direction}: {seconds:.1f} s")


if __name__ == "__main__":
    main()
