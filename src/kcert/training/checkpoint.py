"""Checkpoints of a training comparison: every finished seed, so a resumed run recomputes none.

Format ``kcert.training-checkpoint/1``: one JSON document (floats written by ``repr``, which reads
back bit for bit) with the run's fingerprint and, per finished seed, both arms' loss curves,
held-out losses, final norm parameters and the distance between the arms. Written to a temporary
file in the same folder and moved into place, so a reader never sees half a file.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path

import numpy as np

from ..version import __version__
from ..errors import TrainingCheckpointError
from ..numbers import json_number
from ..results.training import ArmRun, SeedRun

FORMAT = "kcert.training-checkpoint/1"


def fingerprint(case, slot, config, case_seed: int) -> dict:
    """What must be equal for a resumed comparison to equal an uninterrupted one."""
    fp = {"case": case.name, "probes": case.describe(), "slot": slot.kind, "config": config.describe(),
          "case_seed": int(case_seed), "kcert": __version__}
    return json.loads(json.dumps(fp, default=str))


def _floats(values) -> list:
    return [json_number(v, nonfinite_null=True) for v in values]


def _array(values) -> np.ndarray:
    return np.array([math.nan if v is None else v for v in values], np.float64)


def _matrix(rows, width: int) -> np.ndarray:
    return np.stack([_array(r) for r in rows]) if rows else np.zeros((0, width))


def _arm(run: ArmRun) -> dict:
    return {"arm": run.arm, "train_loss": _floats(run.train_loss), "eval_steps": [int(s) for s in run.eval_steps],
            "eval_loss": _floats(run.eval_loss), "norm_params": {k: _floats(v) for k, v in run.norm_params.items()},
            "nonfinite_step": run.nonfinite_step, "seconds": run.seconds,
            "norm_trajectory": {k: [_floats(row) for row in v] for k, v in run.norm_trajectory.items()}}


def _read_arm(d: dict) -> ArmRun:
    return ArmRun(arm=d["arm"], train_loss=_array(d["train_loss"]), eval_steps=np.array(d["eval_steps"], np.int64),
                  eval_loss=_array(d["eval_loss"]), norm_params={k: _array(v) for k, v in d["norm_params"].items()},
                  nonfinite_step=d["nonfinite_step"], seconds=float(d["seconds"]),
                  norm_trajectory={k: _matrix(v, len(d["norm_params"][k])) for k, v in d["norm_trajectory"].items()})


def check_writable(path) -> None:
    folder = Path(path).resolve().parent
    if not folder.is_dir():
        raise TrainingCheckpointError(f"checkpoint {str(path)!r}: the folder {str(folder)!r} does not exist")


def save(path, fp: dict, runs: dict[int, SeedRun]) -> None:
    doc = {"format": FORMAT, "fingerprint": fp,
           "seeds": {str(s): {"ref": _arm(r.ref), "prod": _arm(r.prod),
                              "distance": json_number(r.distance, nonfinite_null=True)}
                     for s, r in sorted(runs.items())}}
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.resolve().parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def load(path, fp: dict) -> dict[int, SeedRun]:
    """The finished seeds of ``path`` (none if it does not exist yet); refuses another run's file."""
    path = Path(path)
    if not path.exists():
        return {}
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise TrainingCheckpointError(f"checkpoint {str(path)!r} cannot be read: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise TrainingCheckpointError(f"checkpoint {str(path)!r} is not a {FORMAT} file")
    if doc.get("fingerprint") != fp:
        theirs = doc.get("fingerprint") or {}
        differ = sorted(k for k in set(fp) | set(theirs) if fp.get(k) != theirs.get(k))
        raise TrainingCheckpointError(f"checkpoint {str(path)!r} belongs to another comparison (differs in "
                                      f"{', '.join(differ)}); remove it or drop --resume")
    try:
        return {int(s): SeedRun(seed=int(s), ref=_read_arm(d["ref"]), prod=_read_arm(d["prod"]),
                                distance=math.nan if d["distance"] is None else float(d["distance"]))
                for s, d in doc["seeds"].items()}
    except (KeyError, TypeError, ValueError) as exc:
        raise TrainingCheckpointError(f"checkpoint {str(path)!r} is damaged: {type(exc).__name__}: {exc}") from exc
