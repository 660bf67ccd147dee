"""Plain-data encoding of a run's state: numeric arrays plus JSON-able metadata, no Python object.
Checkpoint files (:mod:`kcert.execution.checkpoint`) and the rank exchange under torch.distributed
(:mod:`kcert.execution.schedule`) both use it, so a block reads back the same from either.

Arrays are named ``<part>.<output>.<field>`` where ``<part>`` is ``prefix`` (the merge of the
complete blocks ``0 .. folded-1``), ``block<b>`` (a block not merged yet) or ``block`` (one block
on the wire); the early snapshots of L0's growth test are ``early<k>.<output>.<row>.{count,mean,m2}``
(``k`` folded blocks).
"""

from __future__ import annotations

import numpy as np
import torch

from ..errors import CheckpointError
from ..stats.moments import MomentAccumulator
from .accumulator import EARLY_ROWS, ROWS, Block, OutputAccumulator
from .layout import OutputLayout
from .runner import RunState


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


def encode_state(state: RunState) -> tuple[dict, dict[str, np.ndarray]]:
    """A runner's state as (meta, arrays): ``meta`` is JSON-able."""
    arrays: dict[str, np.ndarray] = {}
    pending = state.pending or {}
    if state.prefix is not None:
        encode_outputs("prefix", state.prefix, arrays)
    for b, block in sorted(pending.items()):
        encode_outputs(f"block{b}", block.outputs, arrays)
    meta = {
        "done": state.done,
        "oracle_unavailable": state.oracle_unavailable,
        "oracle_checked": state.oracle_checked,
        "layouts": None if state.layouts is None else [encode_layout(l) for l in state.layouts],
        "folded": state.folded,
        "has_prefix": state.prefix is not None,
        "early": encode_early(state.early or {}, arrays),
        "pending": [{"index": b, "first": blk.first, "filled": blk.filled} for b, blk in sorted(pending.items())],
    }
    return meta, arrays


def decode_state(case, meta: dict, arrays) -> RunState:
    """The inverse of :func:`encode_state`; a missing or malformed field raises CheckpointError."""
    try:
        state = RunState(meta["oracle_unavailable"], bool(meta["oracle_checked"]), None)
        if meta["layouts"] is not None:
            layouts = decode_layouts(case, meta["layouts"])
            state.layouts = layouts
            state.prefix = decode_outputs("prefix", layouts, arrays) if meta["has_prefix"] else None
            state.folded = int(meta["folded"])
            state.early = decode_early(meta["early"], len(layouts), arrays)
            state.pending = {int(p["index"]): Block(int(p["index"]), int(p["first"]), int(p["filled"]),
                                                    decode_outputs(f"block{int(p['index'])}", layouts, arrays))
                             for p in meta["pending"]}
        return state
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint is incomplete or damaged: {type(exc).__name__}: {exc}") from None
