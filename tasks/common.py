"""Kept for one importer: flows/compare.py takes `artifact_key` from here. Import it from
`thinking_seeds.tasks.artifacts`; this module goes once flows/compare.py does."""

from .artifacts import artifact_key

__all__ = ["artifact_key"]
