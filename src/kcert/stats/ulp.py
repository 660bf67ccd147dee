"""True unit in the last place (ULP) of a floating format at a given magnitude.

The ULP at ``x`` is the spacing of the format inside the binade that holds ``|x|``:
``2**(floor(log2|x|) - (p - 1))`` with ``p`` significand bits (the implicit bit counted),
clamped to the subnormal spacing ``2**(emin - (p - 1))`` below the smallest normal.
``eps * |x|`` is not the ULP: it is off by up to 2x inside every binade (docs/method.md, "Gate 2").

Formats are named by string so this module stays free of torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FloatFormat:
    name: str
    significand_bits: int  # p, including the implicit leading bit
    min_exponent: int  # exponent of the smallest normal number, 2**emin
    max_finite: float

    @property
    def smallest_subnormal(self) -> float:
        return 2.0 ** (self.min_exponent - self.significand_bits + 1)


FORMATS: dict[str, FloatFormat] = {
    f.name: f
    for f in (
        FloatFormat("float64", 53, -1022, float(np.finfo(np.float64).max)),
        FloatFormat("float32", 24, -126, float(np.finfo(np.float32).max)),
        FloatFormat("float16", 11, -14, 65504.0),
        FloatFormat("bfloat16", 8, -126, 3.3895313892515355e38),
        FloatFormat("float8_e4m3fn", 4, -6, 448.0),
        FloatFormat("float8_e5m2", 3, -14, 57344.0),
    )
}


def float_format(name: str) -> FloatFormat:
    """The format named ``name`` ('bfloat16', 'float32', ...; a 'torch.' prefix is ignored)."""
    key = name.removeprefix("torch.")
    try:
        return FORMATS[key]
    except KeyError:
        known = ", ".join(sorted(FORMATS))
        raise ValueError(f"unknown floating format {name!r}; known formats: {known}") from None


def ulp(magnitude, fmt: str | FloatFormat) -> np.ndarray | float:
    """The true ULP of ``fmt`` at ``magnitude`` (scalar or array; the sign is ignored).

    Exact: built with ``frexp``/``ldexp``, no logarithms. Non-finite magnitudes give nan.
    """
    f = float_format(fmt) if isinstance(fmt, str) else fmt
    x = np.abs(np.asarray(magnitude, dtype=np.float64))
    _, e = np.frexp(x)  # x = m * 2**e with m in [0.5, 1): floor(log2 x) = e - 1
    exponent = np.where(x > 0, np.maximum(e - 1, f.min_exponent), f.min_exponent)
    out = np.ldexp(1.0, exponent - (f.significand_bits - 1))
    out = np.where(np.isfinite(x), out, np.nan)
    return float(out) if out.ndim == 0 else out


def harm_format(output: str, training: str) -> str:
    """The format whose ULP is the harm unit of an output: the coarser (fewer significand bits) of
    the output's own format and the precision the training that consumes it runs at. A float32 loss
    in a bf16 training run is judged in bf16 ULPs: differences of a few float32 ULPs are 2^-16 of
    what that training can resolve (docs/method.md, "The harm scale")."""
    out, train = float_format(output), float_format(training)
    return (out if out.significand_bits <= train.significand_bits else train).name
