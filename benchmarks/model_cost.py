"""The cost of ``kcert.certify_model`` (issue 25, item 5): a 2-layer Hugging Face Llama (hidden 256; the
zoo's, benchmarks/model_zoo.py) certified against its sdpa twin at R replicates (default kcert's default),
backward on, on this machine's CPU, with the split of the wall time:

- recording: the forwards of ref's model up to each module that record the module's inputs, per replicate
  (timed by wrapping the engine's recording function; part of the rows below);
- forward rows, backward rows, the end-to-end row: the wall time of each row (from the engine's
  ``on_event("row")`` notices), summed per direction, and the median per row;
- with the recording store (kcert.model.store: one forward of ref's whole model per draw of the inputs,
  shared by every row) or without it (``--no-share``: each row records its module alone), or both, one after
  the other in this process (``--compare``), with the ratio of the two;
- beside it, in the same process, a plain ``kcert.certify`` of one module case at the same R (the HF
  RMSNorm case of kcert.adapters.hf, the model's own norm size) as the unit of scale: the model's time
  over it, and the median row over it.

    OMP_NUM_THREADS=1 PYTHONPATH=src:benchmarks python benchmarks/model_cost.py [--replicates 1024] \\
        [--no-share | --compare] [--no-backward] [--leaves] [--max-replicates M] [--no-settle]
        [--json benchmarks/data/model_cost.json]

Under ``torchrun --nproc-per-node N`` (both cores of this machine: N = 2) every rank runs the same rows and
shares each row's replicates (``--shard replicates``, the default, as ``kcert model``'s), or takes whole rows
from one queue (``--shard rows``); rank 0 prints and writes the JSON (its own split: with shared replicates
the ranks wait for each other at every look, so their walls agree; with ``--shard rows`` the split covers rank
0's rows only, the total is the whole run's).
"""

from __future__ import annotations

import argparse
import builtins
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

import host
import kcert
import model_zoo


class RecordingTimer:
    """Seconds spent in the engine's recording function (wrapped where the engine calls it)."""

    def __init__(self):
        self.seconds, self.calls, self._undo = 0.0, 0, []

    def wrap(self, module, attr: str) -> None:
        original = getattr(module, attr)

        def timed(*a, **k):
            start = time.perf_counter()
            try:
                return original(*a, **k)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1

        setattr(module, attr, timed)
        self._undo.append((module, attr, original))

    def restore(self) -> None:
        for module, attr, original in reversed(self._undo):
            setattr(module, attr, original)


def model_run(replicates: int, seed: int, share: bool = True, backward: bool = True, quiet: bool = False,
              reuse: bool = True, leaves: bool = False, shard: str = "replicates",
              max_replicates: int | None = None, settle: bool | None = None) -> dict:
    from kcert.model import cases as model_cases, engine as model_engine, record as model_record, store

    model_engine.SHARE_RECORDINGS = share
    model_engine.REUSE_REF_OUTPUTS = reuse

    p = model_zoo.pair("llama_eager_vs_sdpa")
    ref, prod = model_zoo.models(p, seed)
    starts: list[tuple[float, str, str]] = []

    def on_event(kind, detail):
        if kind == "settle" and not quiet:
            print(f"  [{time.perf_counter() - start:7.0f} s]   held back at {detail['from']}: on to {detail['to']}",
                  flush=True)
        if kind == "row":
            starts.append((time.perf_counter(), detail["module"], detail["direction"]))
            if not quiet:
                print(f"  [{time.perf_counter() - start:7.0f} s] row {detail['index'] + 1}/{detail['rows']}: {detail['module'] or '(model)'} "
                      f"{detail['direction']}", flush=True)

    timer = RecordingTimer()
    for mod in (model_record, model_cases):  # cases imports the function by name
        if hasattr(mod, "record"):
            timer.wrap(mod, "record")
    timer.wrap(store.RecordingStore, "leaves")  # the shared forwards and the loads of their files
    root_forwards = [0]
    handle = ref.register_forward_pre_hook(lambda *a: root_forwards.__setitem__(0, root_forwards[0] + 1))
    start = time.perf_counter()
    try:
        cert = kcert.certify_model(ref, prod, model_zoo.inputs(p.arch), loss=model_zoo.lm_loss, backward=backward,
                                   modules=kcert.Modules(leaves=True) if leaves else None, name=p.name, replicates=replicates, seed=seed, on_event=on_event,
                                   shard=shard, max_replicates=max_replicates, settle=settle)
    finally:
        timer.restore()
        handle.remove()
        model_engine.SHARE_RECORDINGS = model_engine.REUSE_REF_OUTPUTS = True
    end = time.perf_counter()
    per_row = []
    for i, (t0, module, direction) in enumerate(starts):
        t1 = starts[i + 1][0] if i + 1 < len(starts) else end
        per_row.append({"module": module, "direction": direction, "seconds": t1 - t0})
    by_dir = {d: sum(r["seconds"] for r in per_row if r["direction"] == d) for d in ("forward", "backward", "end to end")}
    modules = sorted({r.module for r in cert.rows if r.direction == "forward"})
    return {"pair": p.name, "shard": shard, "share_recordings": share, "reuse_ref_outputs": share and reuse, "ref_forwards": root_forwards[0], "selection": "leaves" if leaves else "default", "wall_s": end - start, "selected_modules": len(modules), "rows": len(cert.rows),
            "verdict": cert.verdict.value, "settle_max_replicates": cert.provenance.get("settle_max_replicates"),
            "recording_s": timer.seconds, "recording_calls": timer.calls,
            "by_direction_s": by_dir, "per_row": per_row,
            "median_row_s": {d: statistics.median([r["seconds"] for r in per_row if r["direction"] == d] or [0.0])
                             for d in ("forward", "backward")},
            "replicates_run": [r.certificate.provenance.replicates for r in cert.rows if r.certificate is not None],
            "verdicts": {d: {v: sum(1 for r in cert.rows if r.direction == d and r.verdict.value == v)
                             for v in ("PASS", "WARN", "FAIL", "SKIPPED")} for d in ("forward", "backward", "end to end")},
            "not_pass": [{"module": r.module, "direction": r.direction, "verdict": r.verdict.value,
                          "gate": r.deciding_gate, "figure": r.figure} for r in cert.rows if r.verdict.value != "PASS"],
            "rows_json": _rows_without_times(cert)}


def _rows_without_times(cert) -> list:
    """The rows' JSON less what depends on the clock (to check that both modes give the same rows)."""
    from kcert.model import report

    def strip(d):
        if isinstance(d, dict):
            return {k: strip(v) for k, v in d.items() if k not in ("timings", "date") and "time" not in k}
        return [strip(v) for v in d] if isinstance(d, list) else d
    return strip(report.to_json(cert)["rows"])


def single_case(replicates: int, seed: int, repeats: int) -> dict:
    from kcert.adapters import hf

    ref = model_zoo.build("llama", seed)
    norm = ref.get_submodule("model.layers.0.input_layernorm")
    case = hf.rmsnorm_case(norm, name="llama_rmsnorm_alone")
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        cert = kcert.certify(case, replicates=replicates, seed=seed)
        times.append(time.perf_counter() - start)
    return {"case": case.name, "wall_s": times, "median_s": statistics.median(times), "verdict": cert.verdict.value,
            "shape": {k: list(v.shape) for k, v in case.inputs.items() if hasattr(v, "shape")}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--replicates", "-R", type=int, default=kcert.Settings().replicates)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the single-case run (median)")
    ap.add_argument("--no-share", action="store_true", help="each row records its module alone (no store)")
    ap.add_argument("--compare", action="store_true", help="run the model without the store, then with it")
    ap.add_argument("--shared-first", action="store_true", help="with --compare: the store's run first")
    ap.add_argument("--no-reuse", action="store_true",
                    help="with the store, forward rows call ref's module again instead of taking its kept outputs")
    ap.add_argument("--compare-reuse", action="store_true",
                    help="with the store: ref's outputs called again, then kept (rows must be identical)")
    ap.add_argument("--no-backward", dest="backward", action="store_false", help="forward rows only")
    ap.add_argument("--leaves", action="store_true",
                    help="select the leaf modules only (the issue's ~20 modules; default: kcert's default selection)")
    ap.add_argument("--shard", choices=("replicates", "rows"), default="replicates",
                    help="under torchrun, what the ranks share (certify_model's shard=; with rows the split is rank "
                         "0's rows only, the total the whole run's)")
    ap.add_argument("--max-replicates", type=int, default=None,
                    help="the variance gate's looks up to M replicates (default kcert's, 4R)")
    ap.add_argument("--no-settle", dest="settle", action="store_false", default=None,
                    help="rows held back for lack of evidence stop at the cap (the default before 2026-12-05)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    from kcert.execution import distributed

    with distributed.process_group("cpu") as comm:
        _measure(args, comm)


def _measure(args, comm) -> None:
    quiet = comm.rank != 0
    print = builtins.print if not quiet else (lambda *a, **k: None)  # noqa: A001 - rank 0 reports
    single = single_case(args.replicates, args.seed, args.repeats)
    print(f"single case {single['case']} at R={args.replicates}: median {single['median_s']:.1f} s "
          f"over {args.repeats} ({single['verdict']})", flush=True)
    if args.compare_reuse:  # (label, share, reuse)
        modes = [("ref called", True, False), ("ref kept", True, True)]
    elif args.compare:
        modes = [("alone", False, True), ("shared", True, True)]
        modes = modes[::-1] if args.shared_first else modes
    else:
        modes = [("alone" if args.no_share else "shared", not args.no_share, not args.no_reuse)]
    runs = {label: model_run(args.replicates, args.seed, share, args.backward, quiet, reuse, args.leaves, args.shard,
                             args.max_replicates, args.settle)
            for label, share, reuse in modes}
    load = os.getloadavg()
    out = {"replicates": args.replicates, "max_replicates": args.max_replicates, "seed": args.seed, "torch": torch.__version__, "ranks": comm.world,
           "backward": args.backward,
           "cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
           "threads": torch.get_num_threads(), "load_average": load, "host": host.describe(), "model": runs,
           "single": single}
    print(host.line(out["host"]))
    s = single
    for label, m in runs.items():
        fwd, bwd = m["by_direction_s"]["forward"], m["by_direction_s"]["backward"]
        print(f"\nLlama 2 layers hidden 256, {m['selected_modules']} selected modules ({m['selection']}), {m['rows']} rows "
              f"({'with' if args.backward else 'no'} backward), R={args.replicates}, {comm.world} rank(s), recordings {label}: {m['wall_s'] / 60:.1f} min ({m['verdict']}); target (R=1024) "
              "<= 10 min: " + (("met" if m["wall_s"] <= 600 else "MISSED") if args.replicates == 1024 else "not this R"))
        print(f"  forward rows {fwd:.0f} s, backward rows {bwd:.0f} s, end to end {m['by_direction_s']['end to end']:.0f} s; "
              f"recording (inside the rows) {m['recording_s']:.0f} s over {m['recording_calls']} calls "
              f"({m['recording_s'] / max(m['wall_s'], 1e-9):.0%} of the total); ref's model ran {m['ref_forwards']} times")
        print(f"  median row: forward {m['median_row_s']['forward']:.1f} s, backward {m['median_row_s']['backward']:.1f} s;"
              f" one module case alone (kcert.certify) {s['median_s']:.1f} s")
        print(f"  ratios: model / one case {m['wall_s'] / s['median_s']:.1f}x; median forward row / one case "
              f"{m['median_row_s']['forward'] / s['median_s']:.2f}x; median backward row / one case "
              f"{m['median_row_s']['backward'] / s['median_s']:.2f}x; load average {load[0]:.1f}")
        print("  verdicts: " + "; ".join(f"{d} " + ", ".join(f"{n} {v}" for v, n in c.items() if n)
                                         for d, c in m["verdicts"].items() if sum(c.values())))
        for r in m["not_pass"]:
            print(f"    {r['module'] or '(model)'} {r['direction']}: {r['verdict']} ({r['gate']}; {r['figure']})")
    if args.compare_reuse:
        a, b = runs["ref called"], runs["ref kept"]
        print(f"\nref kept / ref called: wall {b['wall_s'] / a['wall_s']:.2f}x, forward rows "
              f"{b['by_direction_s']['forward'] / max(a['by_direction_s']['forward'], 1e-9):.2f}x; rows identical "
              f"(JSON less times): {a['rows_json'] == b['rows_json']}")
    if args.compare:
        a, b = runs["alone"], runs["shared"]
        print(f"\nshared / alone: wall {b['wall_s'] / a['wall_s']:.2f}x, recording {b['recording_s'] / a['recording_s']:.2f}x, "
              f"ref forwards {b['ref_forwards']} vs {a['ref_forwards']}; rows identical (JSON less times): "
              f"{a['rows_json'] == b['rows_json']}")
    for m in runs.values():
        m.pop("rows_json")
    if args.json and not quiet:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
