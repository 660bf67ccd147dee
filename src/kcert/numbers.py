"""Numbers written as text and as JSON, one way everywhere (reports, calibration, training comparison).

- :func:`fmt`: a number in a sentence or a table cell, ``digits`` significant digits (``:g``); None is
  "-", and inf, -inf and nan print as Python writes them ("inf", "-inf", "nan") unless ``nan`` names
  another text for NaN.
- :func:`json_number`: a strict-JSON scalar (JSON has no infinities and no NaN). A non-finite number
  becomes one of the strings of :data:`NONFINITE` (the certificate's and the calibration's JSON,
  docs/json-schema.md), or null with ``nonfinite_null=True`` (the training comparison's JSON).
- :data:`NONFINITE`: those strings and the floats they stand for (``kcert compare`` reads them back).

Pure: no numpy, no torch.
"""

from __future__ import annotations

import math

NONFINITE = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def fmt(x, digits: int = 3, *, nan: str = "nan") -> str:
    """``x`` with ``digits`` significant digits: ``fmt(1234.5)`` is "1.23e+03", ``fmt(None)`` "-",
    ``fmt(-math.inf)`` "-inf"; a float NaN is ``nan``."""
    if x is None:
        return "-"
    if isinstance(x, float) and math.isnan(x):
        return nan
    return f"{x:.{digits}g}"


def json_number(x, *, nonfinite_null: bool = False):
    """``x`` as a JSON-safe float: None stays None; inf, -inf and NaN become "Infinity", "-Infinity"
    and "NaN" (or None with ``nonfinite_null``)."""
    if x is None:
        return None
    x = float(x)
    if math.isfinite(x):
        return x
    if nonfinite_null:
        return None
    return "NaN" if math.isnan(x) else ("Infinity" if x > 0 else "-Infinity")
