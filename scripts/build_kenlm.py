"""Build KenLM's lmplz and query into `.specbench/bin` unless they are there (or `SPECBENCH_LMPLZ` points at
them); `make run` and `make test` call it after installing the system packages. The first build takes a few
minutes on two cores (`specbench.wfst.kenlm_tools.build_kenlm`); afterwards this returns at once."""

from __future__ import annotations

import sys

from specbench.errors import SpecbenchError
from specbench.wfst.kenlm_tools import kenlm_binary


def main() -> int:
    try:
        for name in ("lmplz", "query"):
            kenlm_binary(name)
    except SpecbenchError as err:
        print(f"specbench: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
