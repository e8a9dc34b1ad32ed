"""specbench.data"""
