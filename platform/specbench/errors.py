"""User-facing errors.

Every error a user can fix is a `SpecbenchError` whose message names the file, the field (when there is
one) and the fix. The CLI prints the message alone, without a traceback, and exits non-zero.
"""

from __future__ import annotations


class SpecbenchError(Exception):
    """An error the user can act on; `str(err)` is the whole message."""


class ConfigError(SpecbenchError):
    """A job or suite file is malformed: unknown key, wrong type, out-of-range value."""


class DataError(SpecbenchError):
    """Input data is missing, unreadable or malformed."""


class FstFormatError(DataError):
    """An OpenFst binary file is corrupt, truncated or of an unsupported type."""


class ArpaFormatError(DataError):
    """An ARPA language-model file is malformed."""


class ToolError(SpecbenchError):
    """An external tool (lmplz, espeak-ng) is missing or failed."""


def plain_reason(error: BaseException) -> str:
    """Why a file could not be read, in the reader's own words and without an exception class name (a missing
    key reads "no field 'x'"; an error without text, "its contents could not be parsed")."""
    if isinstance(error, KeyError):
        return f"no field {error}"
    return " ".join(str(error).split())[:300] or "its contents could not be parsed"
