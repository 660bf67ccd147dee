"""Where a kernel raised: the frame of the user's own code, not of torch or kcert.

A kernel's exception usually surfaces deep inside torch (an operator's shape check) while the line
to fix is the user's. :func:`kernel_frame` picks the deepest frame of the traceback that belongs to
neither kcert, torch, the standard library nor an installed package, and falls back to the kernel's
entry frame (the first one after kcert's call) when every frame is library code.
"""

from __future__ import annotations

import os
import sysconfig
import traceback
from functools import lru_cache
from pathlib import Path

import torch



@lru_cache(maxsize=1)
def _library_roots() -> tuple[str, ...]:
    roots = {str(Path(__file__).resolve().parents[1]), str(Path(torch.__file__).resolve().parent)}
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        path = sysconfig.get_paths().get(key)
        if path:
            roots.add(str(Path(path).resolve()))
    return tuple(sorted(roots))


def _is_library(filename: str) -> bool:
    if filename.startswith("<"):  # <frozen ...>, <string>, dynamo's generated code
        return True
    path = os.path.realpath(filename)
    return any(path == root or path.startswith(root + os.sep) for root in _library_roots())


def display_path(filename: str) -> str:
    """``filename`` relative to the working folder when it lies inside it."""
    try:
        return os.path.relpath(filename) if Path(filename).resolve().is_relative_to(Path.cwd()) else filename
    except ValueError:  # another drive
        return filename


def kernel_frame(exc: BaseException, skip: int = 1) -> str | None:
    """``file:line in function`` of the frame to show for ``exc``, raised by a kernel called from
    kcert; ``skip``: the frames of kcert's own call at the top of the traceback. None when the
    traceback holds no frame of the kernel (a C function called directly)."""
    frames = traceback.extract_tb(exc.__traceback__)[skip:]
    if not frames:
        return None
    own = [f for f in frames if not _is_library(f.filename)]
    f = own[-1] if own else frames[0]
    return f"{display_path(f.filename)}:{f.lineno} in {f.name}"
