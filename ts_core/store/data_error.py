"""DataError, in a module of its own (store/parquet_io.py re-exports it): the containment checks of
store/contained.py raise it too, and parquet_io hashes through them."""

__all__ = ["DataError"]


class DataError(ValueError):
    """A data file is missing, corrupt, or does not match its contract. The message says which
    file (and column / row where it applies) and how to fix it."""
