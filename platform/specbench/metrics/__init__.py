"""specbench.metrics"""
