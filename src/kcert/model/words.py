"""Lists of names in the sentences kcert model prints: the first few, then how many more."""

from __future__ import annotations

from collections.abc import Sequence


def few(items: Sequence[str], limit: int, sep: str = ", ") -> str:
    """``items[:limit]`` joined by ``sep``, then " and N more" when there are more."""
    return sep.join(items[:limit]) + (f" and {len(items) - limit} more" if len(items) > limit else "")
