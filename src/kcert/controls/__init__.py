"""The control suite: real-defect negative controls and known-good positive controls.

Each control is a function that builds a :class:`kcert.Case`, registered with :func:`negative`
or :func:`positive`. Its docstring names the public source, states in math what was wrong (or why
the rewrite is benign) and says why the reproduction is faithful.
"""

from .registry import Control, all_controls, negative, positive

__all__ = ["Control", "all_controls", "negative", "positive"]
