"""Prefect flows and the `ts` CLI. Importing any of them sets two Prefect defaults (a user's own
environment wins): no analytics, and 120 s for the temporary server to start (Prefect's 20 s is
not enough on a loaded 2-core machine)."""

import os

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
