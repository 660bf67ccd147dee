"""Checkpoints of a certification run: save the accumulated state, resume to the same certificate.

Format (``kcert.checkpoint/2``): one numpy ``.npz`` archive, written to a temporary file in the
same folder and moved into place with ``os.replace`` (a reader never sees half a file). It holds
only numeric arrays plus one string array ``meta``: a JSON document with the run's fingerprint,
the looks done, the target of the look in progress, the oracle status, the output layouts and the
list of accumulation blocks. It is read with ``allow_pickle=False``: no Python object is ever
unpickled. Arrays are named ``<part>.<output>.<field>`` where ``<part>`` is ``prefix`` (the merge
of the complete blocks ``0 .. folded-1``) or ``block<b>`` (a block not merged yet); the early
snapshots of L0's growth test are ``early<k>.<output>.<row>.{count,mean,m2}`` (``k`` folded blocks).
Version 2 added each output's ``ulp_histogram`` and the early snapshots: a version 1 file lacks
them and is refused rather than resumed to a certificate with an incomplete L0 layer. Version 3 added
``fingerprint.kernels`` (:mod:`kcert.execution.fingerprint`: the kernels' code, closures, globals,
module parameters, Fixed values, Custom and Labels functions, Python/torch/numpy versions): a run
whose kernels changed since the checkpoint was written is refused, naming what changed.
"""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .. import __version__
from ..errors import KcertError
from ..stats.moments import MomentAccumulator
from .fingerprint import case_fingerprint, differences
from .outputs import ROWS, OutputLayout
from .runner import BLOCK, EARLY_ROWS, Block, OutputAccumulator, Runner

FORMAT = "kcert.checkpoint/3"


class CheckpointError(KcertError, ValueError):
    """A checkpoint cannot be read, or belongs to another run than the one being resumed."""


def fingerprint(case, seed: int, replicates: int, max_replicates: int, horizon: float, device: torch.device,
                bias_thresholds, variance_thresholds) -> dict:
    """What must be equal for a resumed run to give the certificate of an uninterrupted one."""
    fp = {
        "case": case.name,
        "seed": int(seed),
        "dtype": str(case.dtype).removeprefix("torch."),
        "probes": case.describe(),
        "replicates": int(replicates),
        "max_replicates": int(max_replicates),
        "horizon": float(horizon),
        "device_type": device.type,
        "bias_thresholds": dataclasses.asdict(bias_thresholds),
        "variance_thresholds": dataclasses.asdict(variance_thresholds),
        "block": BLOCK,
        "kcert": __version__,
        "kernels": case_fingerprint(case),
    }
    return json.loads(json.dumps(fp, default=str))  # as it reads back from the file


# -- plain-data encoding (shared by checkpoints and the torch.distributed gather) ----------------
def encode_layout(layout: OutputLayout) -> dict:
    return {
        "index": layout.index, "name": layout.name, "shape": list(layout.shape),
        "dtype": str(layout.dtype).removeprefix("torch."), "prod_dtype": str(layout.prod_dtype).removeprefix("torch."),
        "bucket_axes": list(layout.bucket_axes), "bucket_shape": list(layout.bucket_shape),
    }


def decode_layouts(case, described: list[dict]) -> list[OutputLayout]:
    n = len(described)
    layouts = []
    for i, d in enumerate(described):
        dtype, prod_dtype = getattr(torch, d["dtype"], None), getattr(torch, d["prod_dtype"], None)
        if not isinstance(dtype, torch.dtype) or not isinstance(prod_dtype, torch.dtype):
            raise CheckpointError(f"output {i} has an unknown dtype {d['dtype']!r} / {d['prod_dtype']!r}")
        layouts.append(OutputLayout(int(d["index"]), str(d["name"]), tuple(d["shape"]), dtype, prod_dtype,
                                    case.bucket_spec(i, n), tuple(d["bucket_axes"]), tuple(d["bucket_shape"])))
    return layouts


def encode_outputs(part: str, outputs: list[OutputAccumulator], arrays: dict[str, np.ndarray]) -> None:
    for i, acc in enumerate(outputs):
        key = f"{part}.{i}."
        for row in ROWS:
            m = acc.moments[row]
            arrays[key + row + ".count"] = m.count
            arrays[key + row + ".mean"] = m.mean
            arrays[key + row + ".m2"] = m.m2
        arrays[key + "replicate"] = np.asarray(acc.replicate, np.int64)
        arrays[key + "e_prod"] = np.asarray(acc.e_prod, np.float64)
        arrays[key + "e_ref"] = np.asarray(acc.e_ref, np.float64)
        arrays[key + "peak"] = np.asarray(acc.peak, np.float64)
        arrays[key + "nonfinite"] = np.asarray([acc.nonfinite_prod, acc.nonfinite_ref], np.int64)
        arrays[key + "nonfinite_replicates"] = np.asarray(acc.nonfinite_replicates, np.int64)
        arrays[key + "ulp_histogram"] = np.asarray(acc.ulp_histogram, np.int64)


def decode_outputs(part: str, layouts: list[OutputLayout], arrays) -> list[OutputAccumulator]:
    out = []
    for i, layout in enumerate(layouts):
        key = f"{part}.{i}."
        moments = {row: _moments(arrays, key + row) for row in ROWS}
        nonfinite = [int(v) for v in arrays[key + "nonfinite"]]
        out.append(OutputAccumulator(
            layout, moments, [int(v) for v in arrays[key + "replicate"]],
            [float(v) for v in arrays[key + "e_prod"]], [float(v) for v in arrays[key + "e_ref"]],
            [float(v) for v in arrays[key + "peak"]], nonfinite[0], nonfinite[1],
            [int(v) for v in arrays[key + "nonfinite_replicates"]],
            np.array(arrays[key + "ulp_histogram"], np.int64),
        ))
    return out


def _moments(arrays, key: str) -> MomentAccumulator:
    return MomentAccumulator(np.array(arrays[key + ".count"], np.int64), np.array(arrays[key + ".mean"], np.float64),
                             np.array(arrays[key + ".m2"], np.float64))


def encode_early(early: dict[int, list[dict[str, MomentAccumulator]]], arrays: dict[str, np.ndarray]) -> list[int]:
    """The runner's early snapshots (L0's growth test) as arrays; returns their block counts."""
    for k, outputs in early.items():
        for i, rows in enumerate(outputs):
            for row, m in rows.items():
                key = f"early{k}.{i}.{row}"
                arrays[key + ".count"], arrays[key + ".mean"], arrays[key + ".m2"] = m.count, m.mean, m.m2
    return sorted(int(k) for k in early)


def decode_early(blocks: list[int], outputs: int, arrays) -> dict[int, list[dict[str, MomentAccumulator]]]:
    return {int(k): [{row: _moments(arrays, f"early{k}.{i}.{row}") for row in EARLY_ROWS} for i in range(outputs)]
            for k in blocks}


def encode_block(block: Block) -> dict:
    arrays: dict[str, np.ndarray] = {}
    encode_outputs("block", block.outputs, arrays)
    return {"index": block.index, "first": block.first, "filled": block.filled, "arrays": arrays}


def decode_block(encoded: dict, layouts: list[OutputLayout]) -> Block:
    return Block(int(encoded["index"]), int(encoded["first"]), int(encoded["filled"]),
                 decode_outputs("block", layouts, encoded["arrays"]))


# -- files -------------------------------------------------------------------------------------
def snapshot(runner: Runner, fp: dict, looks: list[int], target: int) -> tuple[dict, dict[str, np.ndarray]]:
    """The runner's consistent state as (meta, arrays)."""
    arrays: dict[str, np.ndarray] = {}
    pending = runner.safe_pending() if runner.layouts is not None else {}
    if runner.prefix is not None:
        encode_outputs("prefix", runner.prefix, arrays)
    for b, block in sorted(pending.items()):
        encode_outputs(f"block{b}", block.outputs, arrays)
    meta = {
        "format": FORMAT,
        "fingerprint": fp,
        "looks": [int(x) for x in looks],
        "target": int(target),
        "done": BLOCK * runner.folded + sum(blk.filled for blk in pending.values()),
        "oracle_unavailable": runner.oracle_unavailable,
        "oracle_checked": runner.oracle_checked,
        "layouts": None if runner.layouts is None else [encode_layout(l) for l in runner.layouts],
        "folded": runner.folded,
        "has_prefix": runner.prefix is not None,
        "early": encode_early(runner.early, arrays),
        "pending": [{"index": b, "first": blk.first, "filled": blk.filled} for b, blk in sorted(pending.items())],
    }
    return meta, arrays


def write(path: str | os.PathLike, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write atomically: a temporary file in the same folder, then ``os.replace``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o644)  # mkstemp makes it private; a checkpoint is an ordinary file
        with os.fdopen(fd, "wb") as f:
            np.savez(f, meta=np.array(json.dumps(meta, sort_keys=True)), **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with _suppress():
            os.unlink(tmp)
        raise


class _suppress:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return exc[0] is not None and issubclass(exc[0], OSError)


def read(path: str | os.PathLike) -> tuple[dict, dict[str, np.ndarray]]:
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (--resume needs a checkpoint written by --checkpoint)")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
        meta = json.loads(str(arrays.pop("meta")))
    except OSError as exc:
        raise CheckpointError(f"checkpoint {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    except Exception:  # noqa: BLE001 - numpy, zipfile and json each raise their own kind on a bad file
        raise CheckpointError(f"checkpoint {str(path)!r} is corrupt or not a kcert checkpoint (not an .npz "
                              "archive with kcert's 'meta' record); write a new one with --checkpoint") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        found = meta.get("format") if isinstance(meta, dict) else None
        older = " (written by an older kcert: start a new run)" if isinstance(found, str) and \
            found.startswith("kcert.checkpoint/") else ""
        raise CheckpointError(f"checkpoint {str(path)!r} has format {found!r}, expected {FORMAT!r}{older}")
    return meta, arrays


def check_fingerprint(path, saved: dict, expected: dict) -> None:
    """Refuse a checkpoint of another run, naming every field that differs."""
    kernels = differences(saved.get("kernels") or {}, expected.get("kernels") or {})
    diffs = [f"{k}: checkpoint {saved.get(k)!r}, this run {v!r}" for k, v in expected.items()
             if k != "kernels" and saved.get(k) != v]
    diffs += [f"{k}: checkpoint {v!r}, this run has none" for k, v in saved.items() if k not in expected]
    if kernels:
        diffs.append("the kernels, changed since the checkpoint was written: " + ", ".join(kernels))
    if diffs:
        raise CheckpointError(f"checkpoint {str(path)!r} belongs to another run; differs in " + "; ".join(diffs))


def restore(runner: Runner, meta: dict, arrays) -> tuple[list[int], int]:
    """Load (meta, arrays) into a fresh runner; returns (looks, target)."""
    try:
        runner.oracle_unavailable = meta["oracle_unavailable"]
        runner.oracle_checked = bool(meta["oracle_checked"])
        if meta["layouts"] is not None:
            runner.layouts = decode_layouts(runner.case, meta["layouts"])
            if meta["has_prefix"]:
                runner.prefix = decode_outputs("prefix", runner.layouts, arrays)
            runner.folded = int(meta["folded"])
            runner.early = decode_early(meta["early"], len(runner.layouts), arrays)
            for p in meta["pending"]:
                b = int(p["index"])
                runner.add_block(Block(b, int(p["first"]), int(p["filled"]), decode_outputs(f"block{b}", runner.layouts, arrays)))
        return [int(x) for x in meta["looks"]], int(meta["target"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint is incomplete or damaged: {type(exc).__name__}: {exc}") from None


def load(path, expected: dict) -> tuple[dict, dict[str, np.ndarray]]:
    meta, arrays = read(path)
    check_fingerprint(path, meta.get("fingerprint") or {}, expected)
    return meta, arrays


def save(path, runner: Runner, fp: dict, looks: list[int], target: int) -> None:
    meta, arrays = snapshot(runner, fp, looks, target)
    write(path, meta, arrays)


def from_wire(payload: Any) -> tuple[dict, dict[str, np.ndarray]]:
    """Check a broadcast (meta, arrays) pair (rank 0 read the file) before it is used."""
    if isinstance(payload, str):
        raise CheckpointError(payload)
    meta, arrays = payload
    return meta, arrays


__all__ = ["CheckpointError", "FORMAT", "fingerprint", "load", "restore", "save", "snapshot", "write", "read"]
