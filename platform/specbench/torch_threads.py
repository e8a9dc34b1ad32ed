"""Torch's intra-op thread count for one block of work, restored after it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def torch_threads(count: int) -> Iterator[None]:
    """Run the block with torch on `count` intra-op threads (0 leaves the count as it is); the previous count
    is restored after it, also when it raises, so that a trainer called in a long-lived process (a Ray worker,
    a test session) does not change the threads of what runs there next."""
    before = torch.get_num_threads()
    if count:
        torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)
