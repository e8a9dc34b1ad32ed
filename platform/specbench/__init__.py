"""specbench: evaluation of latency-hiding techniques for ASR and simultaneous translation."""

__version__ = "0.1.0"
