"""specbench.prediction"""
