"""Integration tests: a tiny training run, a Prefect flow in this process, subprocesses (seconds each)."""
