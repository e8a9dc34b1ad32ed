"""`specbench`: the one command-line entry point. `main(argv) -> int`.

`parser.py` builds the parser from one small function per verb; `commands.py` holds the verbs' handlers;
`options.py` makes command-line options from a config dataclass. Every user-fixable error is a
`SpecbenchError`: printed as one message (file, field, fix), exit code 2, no traceback. Anything else is a
bug and keeps its traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from specbench.errors import SpecbenchError


def main(argv: Sequence[str] | None = None) -> int:
    """Parse `argv` and run the command; returns the exit code."""
    try:
        from specbench.cli.parser import build_parser

        args = build_parser().parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except SpecbenchError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specbench: interrupted", file=sys.stderr)
        return 130


def entry_point() -> None:
    sys.exit(main())
