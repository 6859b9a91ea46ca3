"""DataError: a data file is missing, corrupt, or not what its contract says (one line, exit 2).

Its own module so that store/contained.py (which store/parquet_io.py hashes through) can raise it;
everyone imports it from store/parquet_io.py, as before.
"""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """A data file is missing, corrupt, or does not match its contract. The message says which
    file (and column / row where it applies) and how to fix it."""
