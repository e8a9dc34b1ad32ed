"""The versions of the outside programs whose output a cached artifact holds (espeak-ng's pronunciations in the
decoding graph, the synthesizers' audio in a speech corpus), as each program reports them, so that a cache
can tell when an upgrade changed what it would make."""

from __future__ import annotations

import functools
import subprocess


@functools.cache
def tool_version(program: str, flag: str = "--version") -> str | None:
    """What `program flag` prints on stdout, stripped (`eSpeak NG text-to-speech: 1.51  Data at: ...`); the
    exit status is not checked (flite prints its version and exits 1). None when the program cannot run
    (not installed, or no answer within 10 s). Read once per process."""
    try:
        out = subprocess.run([program, flag], capture_output=True, text=True, encoding="utf-8", errors="replace",
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return out.strip()
