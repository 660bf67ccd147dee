"""Error types. Every error kcert raises on bad input subclasses :class:`KcertError`
and the matching builtin, so callers can catch either."""

from __future__ import annotations


class KcertError(Exception):
    """Base class of every error kcert raises on purpose."""


class ParameterError(KcertError, ValueError):
    """A parameter of a public entry point is out of its domain."""


class CaseError(KcertError, ValueError):
    """A case declaration is malformed (probes, buckets, dtype, names)."""


class CaseFileError(KcertError, ImportError):
    """A case file cannot be imported or defines no usable ``kcert.Case``."""


class KernelError(KcertError, RuntimeError):
    """A kernel (ref, prod or oracle) raised, or returned something kcert cannot compare."""


class RealModeUnsupported(KcertError, RuntimeError):
    """A callable does something real-mode (float64) evaluation cannot follow faithfully."""
