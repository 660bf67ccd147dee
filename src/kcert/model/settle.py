"""Rows held back for lack of evidence go on (docs/model.md, "Rows held back go on"). ``certify_model`` runs each
row under its planned looks (R, 2R, 4R by default); a row the variance gate left undecided at its last look while
every other gate PASSes (:func:`kcert.settling.lack_of_evidence`) then continues to the settle cap (16R by default)
from its own checkpoint (the run's, or a temporary one), so only the further looks' replicates are computed: the
certificate ``kcert model``'s printed settle command gives, in one run. Its note states the level over both plans
(at most 1.4 alpha from R..4R to 16R; docs/method.md, "Raising the cap after the last look")."""

from __future__ import annotations

import dataclasses
import json
import os

from ..errors import CheckpointError
from ..execution import checkpoint
from ..execution.checkpoint import extension_note
from ..execution.fingerprint import case_fingerprint
from ..execution.schedule import look_schedule
from ..settling import lack_of_evidence

EARLIER = "the row's first plan"  # the words of a settled row's note, where a resume says "the checkpoint's plan"


def saved_cap(path: str | None) -> int | None:
    """The cap of the plan a row's checkpoint file was written under (None: no file, or one that does not read): a
    resumed row whose file holds the settle cap went on in the run that wrote it, and continues under that plan."""
    if path is None or not os.path.exists(path):
        return None
    try:
        meta, _ = checkpoint.read(path, arrays=False)
        return int((meta.get("fingerprint") or {})["max_replicates"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None  # the resume itself names what is wrong with the file


def refresh_kernels(path: str, case) -> None:
    """Rewrite the kernels' fingerprint in a row's checkpoint file with ``case``'s as it is now, before the row goes
    on in the process that wrote it. The fingerprint follows the simple attributes of a model's modules, and a
    forward may change one (a call counter): a resume in another process must refuse that, but here the case is
    the same object the file's replicates ran, and an uninterrupted run would have gone on with it as it is."""
    meta, arrays = checkpoint.read(path)
    meta["fingerprint"]["kernels"] = json.loads(json.dumps(case_fingerprint(case), default=str))
    checkpoint.write(path, meta, arrays)


def goes_on(cert, cap: int | None, comm) -> bool:
    """Whether the row of ``cert`` goes on to ``cap``: it WARNs only for lack of evidence at a look below it (rank
    0 decides for every rank)."""
    if cap is None:
        return False
    looks = lack_of_evidence(cert)
    return bool(comm.broadcast(looks is not None and looks < cap))


def settled(cert, replicates: int, cap: int, temporary: bool):
    """The certificate of a row that went on (its resumed run's ``cert``), worded as a settle: its note names the
    row's first plan, and a temporary checkpoint is not recorded as a resume (it is gone once the run ends, and the
    same case and seed give the same report)."""
    resumed = cert.provenance.resumed or {}
    plans = resumed.get("plans")
    schedule = look_schedule(replicates, cap)
    looks = [n for n in schedule if n <= cert.provenance.replicates]
    worded = extension_note(plans, schedule, looks)
    own = extension_note(plans, schedule, looks, earlier=EARLIER, how="to settle a lack of evidence")
    notes = tuple(own if n == worded else n for n in cert.notes)
    provenance = dataclasses.replace(cert.provenance, resumed=None) if temporary else cert.provenance
    return dataclasses.replace(cert, notes=notes, provenance=provenance)


__all__ = ["EARLIER", "goes_on", "refresh_kernels", "saved_cap", "settled"]
