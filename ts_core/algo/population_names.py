"""The names of the loss's token populations (docs/algorithm.md §5), apart from the torch code that
computes their statistics (algo/populations.py): the report and `ts sql`'s output read the names, and
importing them must not import torch (~0.3 s of every `ts sql` command)."""

from __future__ import annotations

# The three token populations; reports add "all" (REPORTED_POPULATIONS).
POPULATIONS = ("on_policy", "continuation", "prefix")
REPORTED_POPULATIONS = (*POPULATIONS, "all")
