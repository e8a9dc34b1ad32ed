"""specbench.wfst"""
