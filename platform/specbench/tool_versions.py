"""The versions of the outside programs whose output a cached artifact holds (espeak-ng's pronunciations in the
decoding graph, the synthesizers' audio in a speech corpus), as each program reports them, so that a cache
can tell when an upgrade changed what it would make."""

from __future__ import annotations

import functools
import re
import subprocess

_VERSION = re.compile(r"\d+(?:\.\d+)+")  # 1.51, 2.5.0, 14.4.2 (a year range such as 1999-2016 has no dot)


@functools.cache
def tool_version(program: str, flag: str = "--version") -> str | None:
    """The version number in what `program flag` prints on stdout (`eSpeak NG text-to-speech: 1.51  Data at:
    /usr/lib/...` gives `1.51`; flite's banner gives `2.2`), or the whole stripped output when it holds no
    dotted number. Only the number, so that the same version installed under another prefix (its data path in
    espeak-ng's line) is the same version. The exit status is not checked (flite prints its version and exits
    1). None when the program cannot run (not installed, or no answer within 10 s). Read once per process."""
    try:
        out = subprocess.run([program, flag], capture_output=True, text=True, encoding="utf-8", errors="replace",
                             timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    version = _VERSION.search(out)
    return version.group(0) if version else out.strip()
