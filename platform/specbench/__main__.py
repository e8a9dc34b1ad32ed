"""`python -m specbench ARGS`: the command line from a source tree without an installed entry point (the GPU
machine runs it with `PYTHONPATH=platform`)."""

from __future__ import annotations

import sys

from specbench.cli import main

if __name__ == "__main__":
    sys.exit(main())
