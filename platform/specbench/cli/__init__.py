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
        _hint_global_options(list(sys.argv[1:] if argv is None else argv), exit_.code)
        return int(exit_.code or 0)
    try:
        return args.handler(args)
    except SpecbenchError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specbench: interrupted", file=sys.stderr)
        return 130


GLOBAL_OPTIONS = ("--tracking-uri", "--ray-address")


def _hint_global_options(argv: list[str], code: object) -> None:
    """After argparse refused the command line: if a global option came after the verb (where argparse
    does not look for it), say where it goes."""
    verb = next((i for i, a in enumerate(argv) if not a.startswith("-") and (i == 0 or argv[i - 1] not in
                                                                         GLOBAL_OPTIONS)), None)
    late = [a.split("=")[0] for a in argv[(verb or 0) + 1:] if a.split("=")[0] in GLOBAL_OPTIONS]
    if code == 2 and verb is not None and late:
        print(f"specbench: {late[0]} is a global option: it goes before the command. Fix: specbench "
              f"{late[0]} VALUE {argv[verb]} ...", file=sys.stderr)


def entry_point() -> None:
    sys.exit(main())
