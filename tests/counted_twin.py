"""The twin as a GPU benchmark process sees a decoder module (`benchmarks.decoder.gpu_processes`): its
"memory" is the number of decoders alive in the process, so a mode's peak shows whether the decoder of the
mode before was still held."""

from __future__ import annotations

from specbench.decoder.twin import TwinDecoder

_COUNT = {"live": 0, "peak": 0}


class CountedTwin(TwinDecoder):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        _COUNT["live"] += 1
        _COUNT["peak"] = max(_COUNT["peak"], _COUNT["live"])

    def __del__(self) -> None:
        _COUNT["live"] -= 1


def peak_memory_bytes() -> int:
    return _COUNT["peak"]


def reset_peak_memory() -> None:
    _COUNT["peak"] = _COUNT["live"]
