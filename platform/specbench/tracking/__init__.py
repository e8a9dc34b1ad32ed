"""specbench.tracking: the only package that imports mlflow (runs, logging, queries)."""
