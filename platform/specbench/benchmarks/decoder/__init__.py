"""`specbench bench decoder`, pluggable: `workloads.py` (what is decoded), `backends.py` (the in-process
backends, a registry), `gpu_processes.py` (the GPU backend as processes sharing the GPU), `agreement.py`
(outcomes, 1-best agreement and the `decoder.*` metrics) and `bench.py` (the composition: `bench_decoder`,
`measure`, `summary`, `execute`)."""
