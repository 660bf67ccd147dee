"""``torch.compile`` as prod: what compilation happened during a certification, for the report.

kcert evaluates a compiled kernel as it is: in the working dtype for the replicates, and in float64
and float32 real mode for the algebra gate's identity test, so dynamo compiles it once per
precision (and once more per new shape, e.g. batched replicates). The symbolic proof runs it with
compilation disabled (its Python definition; kcert.execution.symbolic.compilation_disabled), which
costs no compilation. The count comes from dynamo's own counters.
"""

from __future__ import annotations

import sys


def frames_compiled() -> int:
    """Frames dynamo has compiled in this process so far (0 when dynamo was never imported)."""
    utils = sys.modules.get("torch._dynamo.utils")
    if utils is None:
        return 0
    return int(utils.counters["frames"]["ok"])


def compile_note(before: int) -> str | None:
    """The report's note on compilation since ``before`` (:func:`frames_compiled`), or None."""
    compiled = frames_compiled() - before
    if compiled <= 0:
        return None
    return (f"torch.compile: dynamo compiled {compiled} frame{'s' * (compiled != 1)} during this certification "
            "(a compiled kernel is compiled for each precision kcert runs it in: the working dtype for the "
            "replicates, float64 and float32 for the algebra gate's identity test; the symbolic proof runs its "
            "Python definition with compilation disabled; docs/torch-compile.md)")
