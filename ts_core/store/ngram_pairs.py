"""ngram_pairs: each (run, source age, 3-gram) and (run, length bucket, 3-gram) pair of the prefix
corpus, kept in the first block of iterations that has it: what prefix_diversity counts (issue 53).

Why a roll-up that depends on earlier blocks: ngram_keys (store/rollups.py) holds each pair once per
block, and most pairs recur in every block (a pool member's seeds of age 5 write the same 3-grams in
block 3 as in block 150), so at 1M prefixes of 64 per iteration ngram_keys has 13.3M rows for 433k
distinct pairs and the query's distinct count over them is most of its cost. A block's part here
holds only the pairs no earlier block had: the union of the parts is the set of pairs, about as large
as the distinct count itself.

Because part b is made against blocks 0 .. b-1, it is valid only while they are what it was made
against. Each part records a chain value, a hash of the previous part's chain value and the
record of its own block's prefix files (`chain_after`: their paths, sizes, mtimes and rows); `ts
sql` reads the parts that chain from block 0, each fresh and each naming its predecessor's value
(`chained`), and for the blocks after the first break it reads ngram_keys (made per block, without
the dependency) instead. A block redone by hand therefore costs time until the next compaction
rewrites the chain from it, never a wrong count. store/compaction.py writes the parts;
store/sql_corpus.py builds the view.

Plain text, schemas and hashing only, like store/rollups.py: the SQL runs over relations the caller
names.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from typing import Any

import pyarrow as pa

__all__ = ["CHAIN_KEY", "NGRAM_PAIRS_SCHEMA", "chain_after", "chained", "new_pairs_sql", "pairs_sql"]

NGRAM_PAIRS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("breakdown", pa.int64()),  # 1: key is the source age, 2: key is the length bucket
        pa.field("key", pa.int64()),
        pa.field("ngram", pa.int64()),
    ]
)
CHAIN_KEY = b"thinking_seeds.pair_chain"  # the part's chain value, in its Parquet metadata


def pairs_sql(ngram_keys_rows: str) -> str:
    """NGRAM_PAIRS_SCHEMA's rows (each pair once) from `ngram_keys_rows`, a relation with ngram_keys' columns."""
    return (
        f"SELECT DISTINCT run_id, 1 AS breakdown, source_age AS key, ngram FROM {ngram_keys_rows} "
        f"UNION SELECT DISTINCT run_id, 2 AS breakdown, len_lo AS key, ngram FROM {ngram_keys_rows}"
    )


def new_pairs_sql(ngram_keys_rows: str, seen: str) -> str:
    """The pairs of `ngram_keys_rows` that are not in `seen` (NGRAM_PAIRS_SCHEMA's columns): a block's part."""
    return f"SELECT * FROM ({pairs_sql(ngram_keys_rows)}) EXCEPT SELECT run_id, breakdown, key, ngram FROM {seen}"


def chain_after(previous: str, recorded: bytes) -> str:
    """The chain value of a part whose record of its files (path -> size, mtime, rows: the part's
    Parquet metadata, store/compacted_parts.py) is `recorded`, after the part whose chain value is
    `previous` ("" for block 0)."""
    return hashlib.sha256(previous.encode() + b"\0" + recorded).hexdigest()[:32]


def chained(parts: Iterable[Any], fresh: Callable[[Any], bool]) -> tuple[list[Any], int]:
    """(the parts that chain from block 0 in order, the first iteration after them). A part (with
    `.path`, `.first`, `.recorded` and `.chain`) is in the chain when its block starts where the last
    one ended, it names the chain value its predecessor and sources give, and `fresh(part)` (its
    files unchanged)."""
    out, previous, first = [], "", 0
    for p in sorted(parts, key=lambda p: p.first):
        if p.first != first or p.chain != chain_after(previous, p.recorded) or not fresh(p):
            break
        out.append(p)
        previous, first = p.chain, _last(p) + 1
    return out, first


def _last(part: Any) -> int:
    """The last iteration of a part's block, from its name (`iterations=000000-000099.parquet`)."""
    return int(part.path.name.split("=", 1)[1].split("-", 1)[1].split(".", 1)[0])
