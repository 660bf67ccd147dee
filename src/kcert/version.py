"""kcert's version (recorded in every report and checkpoint)."""

__version__ = "0.1.0"
