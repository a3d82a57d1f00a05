"""The directory job._worker_path() puts on the PYTHONPATH of Spark's Python
workers in local mode: its sitecustomize runs as each of them starts."""
