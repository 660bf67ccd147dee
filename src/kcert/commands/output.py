"""Where a command's text goes, and report files that are never lost.

:class:`Streams` holds the report console (stdout, or stderr when stdout carries a JSON or HTML
report) and the error console (stderr: progress, notes, errors; an error is one line, exit 2).
Report paths are checked before a run (:func:`check_output`), so a bad path costs nothing; a write
that still fails at the end (a folder removed meanwhile, a full disk) saves the report to a fallback
file and says where (:func:`write_output`), so a finished certification is never lost.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import re
import sys
import tempfile
from pathlib import Path

STDOUT = "-"


class Streams:
    """The two consoles of a command (rich is imported here, after the arguments are parsed)."""

    def __init__(self, out, err):
        self.out = out
        self.err = err

    @classmethod
    def make(cls, args, stdout_taken: bool = False) -> Streams:
        from rich.console import Console

        silent = bool(getattr(args, "silent", False))  # torchrun ranks other than 0
        err = Console(stderr=True, soft_wrap=False, quiet=silent)
        out = err if stdout_taken else Console(quiet=silent)
        if not out.is_terminal:
            out.width = max(out.width, 132)  # tables stay readable in logs and CI output
        return cls(out, err)

    def error(self, message) -> None:
        from rich.markup import escape

        # soft_wrap: an error is one line however narrow the terminal, so it can be grepped and quoted
        self.err.print(f"[bold red]kcert: error:[/] {escape(str(message))}", soft_wrap=True, highlight=False)

    def note(self, message) -> None:
        self.err.print(str(message), soft_wrap=True, highlight=False, markup=False)


def check_output(flag: str, value: str | None, stdout: bool = True) -> str | None:
    """Why ``value`` cannot receive the report of ``flag`` (checked before any work), or None."""
    if value is None:
        return None
    if value == STDOUT:
        return None if stdout else f"{flag} -: this report is written to a file; give a file name"
    path = Path(value)
    if path.is_dir():
        return f"{flag} {value}: is a folder; give a file name (e.g. {str(path / ('report' + _suffix(flag)))!r})"
    folder = path.resolve().parent
    if not folder.is_dir():
        return f"{flag} {value}: the folder {str(folder)!r} does not exist"
    if path.exists() and not os.access(path, os.W_OK):
        return f"{flag} {value}: the file exists and cannot be written"
    try:  # the only reliable test of a folder (root ignores permissions; /proc refuses new files)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".kcert-write-test-"):
            pass
    except OSError as exc:
        return f"{flag} {value}: cannot create files in {str(folder)!r} ({exc.strerror or exc})"
    return None


def first_output_problem(outputs, file_only: tuple[str, ...] = ()) -> str | None:
    """The first reason one of ``outputs`` ((flag, value) pairs) cannot receive its report, or None;
    the flags in ``file_only`` refuse stdout ('-')."""
    for flag, value in outputs:
        problem = check_output(flag, value, stdout=flag not in file_only)
        if problem:
            return problem
    return None


def _suffix(flag: str) -> str:
    return {"--json": ".json", "--html": ".html", "--markdown": ".md"}.get(flag, ".txt")


def fallback_path(flag: str, target: str) -> list[Path]:
    """Where a report that could not be written at ``target`` goes instead: the working folder,
    else the temporary folder."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"kcert-report-{stamp}-{os.getpid()}{Path(target).suffix or _suffix(flag)}"
    return [Path.cwd() / name, Path(tempfile.gettempdir()) / name]


def write_output(flag: str, target: str, text: str, streams: Streams, what: str = "report") -> bool:
    """Write ``text`` to ``target`` ('-': stdout). On failure save it to a fallback file, say where
    and return False (the command then exits 2)."""
    if target == STDOUT:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
        return True
    try:
        Path(target).write_text(text, encoding="utf-8")
    except OSError as exc:
        problem = f"{flag} {target}: the {what} could not be written ({exc.strerror or exc})"
        for candidate in fallback_path(flag, target):
            try:
                candidate.write_text(text, encoding="utf-8")
            except OSError:
                continue
            streams.error(f"{problem}; it was saved to {candidate} instead")
            return False
        streams.error(f"{problem}, nor to a fallback file in the working or temporary folder; it is lost")
        return False
    return True


def safe_name(name: str) -> str:
    """A case name as one file-name component: characters other than letters, digits, '.', '_' and
    '-' become '_', leading and trailing dots go (no '..', no hidden file), and a name that had to
    change gets a short hash of the original so that two names never share a file."""
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._-")[:80]
    if stem == name:
        return stem
    return f"{stem or 'case'}-{hashlib.sha256(name.encode('utf-8', 'surrogatepass')).hexdigest()[:8]}"
