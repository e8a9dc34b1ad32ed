"""How reports print a figure: a whole number in full with thousands separators (16,514,210: six significant
digits would print 2,345,678 and 2,345,679 alike, and a zero-tolerance check between them would read as a
regression between equal numbers), anything else to six significant digits, a missing or undefined value
as "-" (NaN marks a value a job did not log), an infinity as "inf" or "-inf" (a WER with insertions against
no reference words is no missing value)."""

from __future__ import annotations

import math


def figure(value: float | int | None) -> str:
    if value is None or math.isnan(value):
        return "-"
    if math.isinf(value):
        return str(float(value))
    if float(value).is_integer() and abs(value) < 1e15:
        return f"{int(value):,}"
    return f"{value:.6g}"
