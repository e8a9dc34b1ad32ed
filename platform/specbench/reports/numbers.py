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


def markdown_text(text: str) -> str:
    """`text` for a Markdown page: `&`, `<` and `>` as entities, so that `<unk>` is not read as an HTML tag
    and vanishes (backticks and emphasis are kept)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_cell(text: str) -> str:
    """`markdown_text` for a table cell: a `|` escaped and line breaks as <br>, so the text stays in its cell."""
    return markdown_text(text).replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def apart(first: float | None, second: float | None) -> tuple[str, str]:
    """Both values as `figure` prints them, with more digits where six would print two different values
    alike (a check that fails between them must not read as between equal numbers)."""
    a, b = figure(first), figure(second)
    if a != b or first is None or second is None or first == second or not math.isfinite(first - second):
        return a, b
    return next((f"{first:.{d}g}", f"{second:.{d}g}") for d in range(7, 18)
                if f"{first:.{d}g}" != f"{second:.{d}g}" or d == 17)
