"""specbench.acoustic"""
