"""kcert.numbers: the one number formatter and the one JSON number encoder."""

import json
import math

import numpy as np

from kcert.numbers import NONFINITE, fmt, json_number


def test_fmt_writes_infinities_with_their_sign_and_missing_values_as_a_dash():
    assert [fmt(x) for x in (None, 1.23456, 1234.5, math.inf, -math.inf, math.nan)] == \
        ["-", "1.23", "1.23e+03", "inf", "-inf", "nan"]
    assert fmt(1.23456, 4) == "1.235" and fmt(math.nan, nan="-") == "-" and fmt(-math.inf, nan="-") == "-inf"


def test_json_number_is_strict_json_and_reads_back():
    values = [None, 0.5, np.float32(0.25), 3, math.inf, -math.inf, math.nan]
    encoded = [json_number(x) for x in values]
    assert encoded == [None, 0.5, 0.25, 3.0, "Infinity", "-Infinity", "NaN"]
    json.dumps(encoded, allow_nan=False)
    back = [NONFINITE.get(x, x) if isinstance(x, str) else x for x in encoded]
    assert back[4:6] == [math.inf, -math.inf] and math.isnan(back[6])
    assert [json_number(x, nonfinite_null=True) for x in values[3:]] == [3.0, None, None, None]
