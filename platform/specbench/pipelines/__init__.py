"""specbench.pipelines"""
