"""Names of the Prefect artifacts the flows publish."""

from __future__ import annotations

import re


def artifact_key(*parts: str | int) -> str:
    """An artifact key from parts (Prefect allows lowercase letters, digits and dashes only)."""
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", "-".join(str(p) for p in parts).lower())).strip("-")
