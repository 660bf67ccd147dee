"""Progress bars of long commands (rich; imported only when a command runs)."""

from __future__ import annotations

from rich.progress import (BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.text import Text


class Rate(ProgressColumn):
    """Replicates per second (rich's own speed columns speak of bytes or hide the rate)."""

    def render(self, task) -> Text:
        return Text(f"{task.speed:.1f} rep/s" if task.speed else "", style="cyan")


def replicates_bar(label: str, console) -> Progress:
    """A transient bar for one case's replicates (off when stderr is not a terminal)."""
    return Progress(TextColumn(f"[bold]{label}"), BarColumn(), MofNCompleteColumn(), Rate(), TimeElapsedColumn(),
                    TimeRemainingColumn(), console=console, transient=True, disable=not console.is_terminal)


def items_bar(console) -> Progress:
    """A transient bar over named items (controls, calibration runs)."""
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=True, disable=not console.is_terminal)
