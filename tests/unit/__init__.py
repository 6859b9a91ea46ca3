"""Unit tests: pure and fast -- no subprocess, no training run, no Prefect flow run."""
