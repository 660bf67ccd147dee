"""The command that settles a WARN given only for lack of evidence: every gate but the variance gate PASSes, and
the variance gate's own stopping rule would have taken another look after its last (docs/method.md, "Stopping";
docs/model.md, "Settling a variance WARN"). ``kcert certify`` and ``kcert model`` print it after a certificate
(``kcert model`` also writes it in its JSON): the same command with ``--max-replicates`` four times the last look,
and either ``--checkpoint PATH --resume`` (the run's checkpoint, which records its plan: only the further looks'
replicates are computed) or ``--prior-max-replicates`` this run's cap (started over on the same draws, the
certificate states the level over both plans)."""

from __future__ import annotations

from ..settling import lack_of_evidence

HOW_RESUMED = "more replicates decide; this continues from the checkpoint:"
HOW_AGAIN = "more replicates decide (with --checkpoint, a rerun would continue from the replicates done), e.g.:"


def settle_flags(args, checkpoint: str | None, last_cap: int | None = None) -> list[str]:
    """What the settle command adds after the run's own words: how it continues (``checkpoint``: the file this
    case or pair wrote, None without one; ``last_cap``: the cap the rows last ran under, when not the run's own)."""
    if checkpoint:
        return ["--checkpoint", checkpoint, "--resume"]
    return ["--prior-max-replicates", str(last_cap or args.max_replicates or 4 * args.replicates)]


def how(resumed: bool) -> str:
    """The words before the command: whether it continues from the checkpoint or starts over."""
    return HOW_RESUMED if resumed else HOW_AGAIN


__all__ = ["HOW_AGAIN", "HOW_RESUMED", "how", "lack_of_evidence", "settle_flags"]
