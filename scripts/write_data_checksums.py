"""Record the sha256 and size of every file of the shipped data folder in
`platform/specbench/data/checksums.json`, which `specbench data check` compares the data folder with.

Run it once per release of the data folder, from the project root, on a pristine copy of it:

    python scripts/write_data_checksums.py                 # the data folder specbench uses (SPECBENCH_DATA)
    python scripts/write_data_checksums.py /path/to/data   # another one

It first runs every content check of `specbench.data.verify` (the project's readers of SLURP, Multi30k and
CMUdict) and writes nothing when one fails. Commit the rewritten checksums.json with the new data.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from specbench.data.resolver import CHECKSUMS, data_dir, write_checksums
from specbench.data.verify import content_problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "data", nargs="?", type=Path, help="the data folder (default: the one specbench uses)"
    )
    parser.add_argument(
        "--out", type=Path, default=CHECKSUMS, help=f"the file to write (default: {CHECKSUMS})"
    )
    args = parser.parse_args(argv)
    root = (args.data or data_dir()).resolve()
    if not root.is_dir():
        print(
            f"{root} is not a folder. Fix: give the data folder (holding slurp/, cmudict/ and multi30k/)."
        )
        return 1
    problems = content_problems(root)
    if problems:
        for relpath, message in problems.items():
            print(f"PROBLEM {relpath}: {message}")
        print(
            f"nothing written: {len(problems)} file(s) of {root} fail their content check. Fix: record "
            "checksums only of a pristine data folder."
        )
        return 1
    start = time.perf_counter()
    sums = write_checksums(root, args.out)
    total = sum(size for _, size in sums.values())
    print(
        f"wrote {args.out}: {len(sums)} files, {total / 1e6:.1f} MB of {root} hashed in "
        f"{time.perf_counter() - start:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
