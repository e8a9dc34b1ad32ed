"""specbench.decoder"""
