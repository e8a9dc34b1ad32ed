"""`specbench`: the one command-line entry point. `main(argv) -> int`.

`parser.py` builds the parser from one small function per verb; `commands.py` holds the verbs' handlers;
`options.py` makes command-line options from a config dataclass. Every user-fixable error is a
`SpecbenchError`: printed as one message (file, field, fix), exit code 2, no traceback. Anything else is a
bug and keeps its traceback.

The verbs that open MLflow runs (`RUN_VERBS`) turn SIGTERM (what `kill`, Ray's job stop, Kubernetes and CI
timeouts send) into KeyboardInterrupt, as Ctrl-C is, so that the open runs' context managers end them FAILED
on the way out instead of leaving them RUNNING; the exit code is then 128 + the signal's number. (Once a job
has started or joined Ray, Ray's own SIGTERM handler raises SystemExit instead: the runs end FAILED too.)
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext

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
        with _runs_end_on_signals(args):
            return args.handler(args)
    except SpecbenchError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as err:
        name = str(err)  # the signal's name from `interrupted_by_signals`; '' from Python's own Ctrl-C
        known = name in signal.Signals.__members__
        print(f"specbench: interrupted{f' ({name})' if known else ''}", file=sys.stderr)
        return 128 + (signal.Signals[name].value if known else signal.SIGINT.value)


# the verbs that open MLflow runs (a job, a suite, the nightly, a training, a benchmark, a comparison's table)
RUN_VERBS = frozenset({"run", "nightly", "train", "graph", "data", "bench", "compare"})


def _runs_end_on_signals(args: argparse.Namespace) -> AbstractContextManager[None]:
    """For a verb that opens MLflow runs: SIGTERM (and SIGINT) raise KeyboardInterrupt while it works, so that
    its runs end FAILED (`TrackedRun.__exit__`); the previous handlers come back afterwards. Other verbs keep
    Python's own handling (the `ui` and `server` verbs install the same handlers themselves)."""
    main_thread = threading.current_thread() is threading.main_thread()  # the only one that may set handlers
    if getattr(args, "command", None) not in RUN_VERBS or not main_thread:
        return nullcontext()
    from specbench.tracking.ui import interrupted_by_signals  # imports no mlflow: the GPU machine has none

    return interrupted_by_signals()


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
