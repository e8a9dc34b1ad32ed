"""The `real_speech` job: recorded speech through the Sphinx model's HCLG (see `job.py`)."""
