"""A certificate's JSON report without what legitimately differs between two equal runs.

Two runs of the same case with the same settings give the same certificate except for the run's date,
wall time, time per stage and whether it was resumed from a checkpoint (``provenance.date``,
``provenance.wall_time_s``, ``provenance.timings``, ``provenance.resumed``): :func:`stable_dict` removes those, so
that the rest compares with ``==`` (resumed against uninterrupted runs, batched against unbatched,
one process against several ranks). Pure data: nothing is imported until a certificate is given.
"""

from __future__ import annotations

import copy

RUN_VARYING = ("date", "wall_time_s", "timings", "resumed")  # the provenance fields that differ between equal runs
_ADDED = ("timings", "resumed")  # added within kcert.certificate/1: older reports lack them


def stable_dict(report, *environment_keys: str):
    """The JSON report of a certificate without its run-varying provenance fields.

    Parameters
    ----------
    report : Certificate, dict or list
        A :class:`kcert.Certificate`, its JSON report as a dict (``kcert.report.jsonio.to_dict``, or
        one case read back from a ``--json`` file), or a list of either (a file of several cases).
    *environment_keys : str
        Fields of ``provenance.environment`` to drop as well (e.g. ``"torch_threads"`` when the runs
        used different thread counts).

    Returns
    -------
    dict or list
        A copy without :data:`RUN_VARYING` (and the named environment fields); ``report`` itself is not
        changed. A field that is missing raises ``KeyError``: a report without it is not a certificate's.

    Example
    -------
    >>> stable_dict(kcert.certify(case, seed=1)) == stable_dict(kcert.certify(case, seed=1))  # doctest: +SKIP
    True
    """
    if isinstance(report, list):
        return [stable_dict(r, *environment_keys) for r in report]
    if isinstance(report, dict):
        data = copy.deepcopy(report)
    else:
        from .jsonio import to_dict

        data = to_dict(report)
    for key in RUN_VARYING:
        if key in _ADDED:
            data["provenance"].pop(key, None)
        else:
            data["provenance"].pop(key)
    for key in environment_keys:
        data["provenance"]["environment"].pop(key)
    return data


MODEL_RUN_VARYING = ("wall_time_s", "ranks", "shard")  # a model report's provenance fields that differ between equal runs


def stable_model_dict(report: dict, *environment_keys: str) -> dict:
    """A model report (``kcert.model/1``, one pair's JSON object) without what differs between equal runs: each
    row's certificate through :func:`stable_dict`, the model provenance's wall time, ranks and shard (one
    process and any number of ranks, sharing rows or replicates, give the same rows), and the settle command
    (it names the run's own checkpoint, or none)."""
    data = copy.deepcopy(report)
    data.pop("settle_command", None)
    for row in data["rows"]:
        if row.get("certificate") is not None:
            row["certificate"] = stable_dict(row["certificate"], *environment_keys)
    for key in MODEL_RUN_VARYING:
        data["provenance"].pop(key, None)
    return data
