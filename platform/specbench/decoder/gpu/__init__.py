"""The GPU backend: the only package that imports cupy (lazily, behind `gpu_available()`).

`backend.py`: `GpuDecoder`, the lane algorithm (`decoder/lanes.py`) on CUDA kernels through cupy;
`kernels/lanes.cu`: the kernels; `ceiling.py` and `kernels/ceiling.cu`: the arc-rate ceiling the decoder
benchmark compares the decoder with; `kernels/float_keys.cuh`: what both sources share, put before each by
`sources.py`; `nvrtc.py`: compiles the kernels without a GPU (a check that runs in CI).
"""

from specbench.decoder.gpu.backend import GpuDecoder, GpuUnavailableError, gpu_available, peak_memory_bytes

__all__ = ["GpuDecoder", "GpuUnavailableError", "gpu_available", "peak_memory_bytes"]
