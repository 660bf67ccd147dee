"""Checkpoints of a certification run: save the accumulated state, resume to the same certificate.

Format (``kcert.checkpoint/3``): one numpy ``.npz`` archive, written to a temporary file in the
same folder and moved into place with ``os.replace`` (a reader never sees half a file). It holds
only numeric arrays plus one string array ``meta``: a JSON document with the run's fingerprint,
the looks done, the target of the look in progress, the oracle status, the output layouts and the
list of accumulation blocks. It is read with ``allow_pickle=False``: no Python object is ever
unpickled. The runner's state is encoded by :mod:`kcert.execution.codec` (which names the arrays).
Version 2 added each output's ``ulp_histogram`` and the early snapshots: a version 1 file lacks
them and is refused rather than resumed to a certificate with an incomplete L0 layer. Version 3 added
``fingerprint.kernels`` (:mod:`kcert.execution.fingerprint`: the kernels' code, closures, globals,
module parameters, Fixed values, Custom and Labels functions, Python/torch/numpy versions): a run
whose kernels changed since the checkpoint was written is refused, naming what changed.

A run may resume a checkpoint with a larger ``max_replicates`` than the one that wrote it (the looks go on:
:func:`kcert.execution.schedule.resume` checks that the checkpoint's planned looks begin this run's); every other
field of the fingerprint must be equal. The meta then keeps the earlier ``plans`` (:func:`extended_plans`), which
bound the false-PASS level of the looks judged under each plan (:func:`extension_level`, :func:`extension_note`).

The meta also lists the ``hosts`` the replicates ran on (:func:`continue_hosts`: from which replicate on, the
host's :func:`~kcert.execution.environment.arithmetic`). A run resumed on another CPU or GPU is not refused
(each replicate compares ref and prod on one host, and refusing would lose the work), but its certificate
says which replicates ran where (:func:`hosts_note`): it cannot be reproduced on one host. Files written
before the list existed resume as from a host not recorded.
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

from ..version import __version__
from ..errors import CheckpointError
from . import codec
from .accumulator import BLOCK
from .fingerprint import case_fingerprint, differences
from .runner import Runner

FORMAT = "kcert.checkpoint/3"


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


# -- files -------------------------------------------------------------------------------------
def snapshot(runner: Runner, fp: dict, looks: list[int], target: int, hosts: list[dict] | None = None,
             plans: list[dict] | None = None) -> tuple[dict, dict[str, np.ndarray]]:
    """The runner's consistent state as (meta, arrays); ``hosts``: :func:`continue_hosts`'s list; ``plans``: the
    earlier plans of a run whose cap was raised on resume (:func:`extended_plans`)."""
    state, arrays = codec.encode_state(runner.state())
    meta = {"format": FORMAT, "fingerprint": fp, "looks": [int(x) for x in looks], "target": int(target), **state}
    if hosts is not None:
        meta["hosts"] = hosts
    if plans:
        meta["plans"] = plans
    return meta, arrays


# -- a cap raised on resume ------------------------------------------------------------------------
def raises_cap(saved: dict, expected: dict) -> bool:
    """Whether this run's fingerprint raises the checkpoint's ``max_replicates`` (its looks may go on)."""
    old, new = saved.get("max_replicates"), expected.get("max_replicates")
    return isinstance(old, int) and isinstance(new, int) and new > old


def extended_plans(meta: dict, saved_schedule: list[int]) -> list[dict]:
    """The plans a checkpoint's looks were judged under, the one that wrote it last: each ``{"max_replicates": M,
    "planned_looks": L, "looks": n}``, n the looks first judged under it (alpha / L each)."""
    earlier = [dict(p) for p in meta.get("plans") or []]
    judged = len(meta.get("looks") or []) - sum(int(p["looks"]) for p in earlier)
    return earlier + [{"max_replicates": int(saved_schedule[-1]), "planned_looks": len(saved_schedule),
                       "looks": max(judged, 0)}]


def extension_level(plans: list[dict], planned_looks: int) -> float:
    """An upper bound of the false-PASS probability, in units of alpha, of a run whose looks were judged under
    ``plans`` and then under this run's ``planned_looks``: each look counts once, at the share of the first plan
    that judged it (a later plan spends less per look, and its bounds are wider, so it cannot PASS a look an earlier
    plan did not); the looks left to this run count at alpha / ``planned_looks`` each (docs/method.md, "Stopping")."""
    before = sum(int(p["looks"]) for p in plans)
    return sum(int(p["looks"]) / int(p["planned_looks"]) for p in plans) + max(planned_looks - before, 0) / planned_looks


def extension_note(plans: list[dict] | None, schedule: list[int], looks: list[int],
                   earlier: str = "the checkpoint's plan", how: str | None = None) -> str | None:
    """A certificate's note when its looks (``looks``, done) went on past those judged under a lower cap on the
    same draws (``earlier``: whose plan that was; ``how``: the words after "looks extended", by default said by
    ``earlier``); else None (a run whose verdict came at a look judged under the lower cap is that plan's
    certificate)."""
    if not plans or len(looks) <= sum(int(p["looks"]) for p in plans):
        return None
    level = extension_level(plans, len(schedule))
    before = ", then ".join(f"{p['max_replicates']} replicates ({p['looks']} of its {p['planned_looks']} looks judged)"
                            for p in plans)
    how = how or ("on resume" if earlier == "the checkpoint's plan" else "past an earlier plan")
    return (f"looks extended {how}: {earlier} ended at {before}, this run's at {schedule[-1]} "
            f"({len(schedule)} looks, each at alpha/{len(schedule)}); over the looks judged under each plan on the same "
            f"draws, a false PASS has probability at most {level:.3g} x alpha, not alpha (docs/method.md, Stopping)")


NOT_RECORDED = {"host": "not recorded"}


def continue_hosts(saved: list[dict] | None, done: int, now: dict) -> list[dict]:
    """The hosts a run's replicates ran on, each ``{"from": first replicate, **arithmetic}``, continued by
    ``now`` from replicate ``done`` when it differs from the last. ``saved``: the checkpoint's list (None
    for a fresh run, or a file that predates the list)."""
    hosts = [dict(h) for h in saved] if saved else ([{"from": 0, **NOT_RECORDED}] if done else [])
    last = {k: v for k, v in hosts[-1].items() if k != "from"} if hosts else None
    if last != now:
        hosts.append({"from": int(done), **now})
    return hosts


def hosts_note(hosts: list[dict] | None, replicates: int) -> str | None:
    """A certificate's note when its replicates ran on more than one host's arithmetic; else None."""
    if not hosts or len(hosts) < 2:
        return None
    ends = [h["from"] for h in hosts[1:]] + [replicates]
    parts = [f"replicates {h['from']}-{end - 1} on " + ", ".join(f"{k} {v}" for k, v in h.items() if k != "from")
             for h, end in zip(hosts, ends) if end > h["from"]]
    return ("resumed on other arithmetic: " + "; ".join(parts) + ". Each replicate compares ref and prod on one "
            "host, but the statistics pool hosts that may round differently: rerun on one host to reproduce it")


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


def read(path: str | os.PathLike, arrays: bool = True) -> tuple[dict, dict[str, np.ndarray]]:
    """The checkpoint's record and its arrays (``arrays=False``: the record alone, the arrays left unread)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (--resume needs a checkpoint written by --checkpoint)")
    try:
        with np.load(path, allow_pickle=False) as data:
            loaded = {k: data[k] for k in data.files if arrays or k == "meta"}
        meta = json.loads(str(loaded.pop("meta")))
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
    return meta, loaded


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
    runner.load_state(codec.decode_state(runner.case, meta, arrays))
    try:
        return [int(x) for x in meta["looks"]], int(meta["target"])
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"checkpoint is incomplete or damaged: {type(exc).__name__}: {exc}") from None


def load(path, expected: dict, *, extend: bool = False) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a checkpoint of this run. ``extend``: a checkpoint whose ``max_replicates`` is below this run's (and
    every other field equal) is accepted too; the caller checks the looks (schedule.resume)."""
    meta, arrays = read(path)
    saved = meta.get("fingerprint") or {}
    if extend and raises_cap(saved, expected):
        try:
            check_fingerprint(path, saved, {**expected, "max_replicates": saved["max_replicates"]})
            return meta, arrays
        except CheckpointError:
            pass  # refused for another field: name every difference, the cap's too
    check_fingerprint(path, saved, expected)
    return meta, arrays


def save(path, runner: Runner, fp: dict, looks: list[int], target: int, hosts: list[dict] | None = None,
         plans: list[dict] | None = None) -> None:
    meta, arrays = snapshot(runner, fp, looks, target, hosts, plans)
    write(path, meta, arrays)


def from_wire(payload: Any) -> tuple:
    """Check a broadcast (meta, arrays, ...) tuple (rank 0 read the file) before it is used: rank 0's refusal,
    sent as its message, is raised on every rank."""
    if isinstance(payload, str):
        raise CheckpointError(payload)
    return tuple(payload)


__all__ = ["CheckpointError", "FORMAT", "continue_hosts", "extended_plans", "extension_level", "extension_note",
           "fingerprint", "hosts_note", "load", "raises_cap", "restore", "save", "snapshot", "write", "read"]
