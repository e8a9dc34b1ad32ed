"""specbench.simultrans"""
