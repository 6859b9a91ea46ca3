"""Reading `ts eval --data FILE --prompts 2`'s rows costs two rows, not the file (issue 51): a 70 KB
Parquet file of 5 million rows took 6 GB when every column became a Python list before --prompts
applied, and a larger one was reported as "truncated or corrupt" when memory ran out.

Measured in a child process that reads the file as `ts eval` does (load_dataset with the --prompts
limit), its data capped at 300 MiB (RLIMIT_DATA: the old code ends in a MemoryError within seconds):
the whole process -- Python, pyarrow, the project's data module -- must run and peak under 300 MiB
resident (~75 MiB). The full command, whose torch, transformers and verifier imports alone are ~400
MiB before a row is read, is measured in tests/e2e/test_eval_memory.py.
"""

from __future__ import annotations

import sys

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.helpers.memory import many_rows_file, peak_rss_mib
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.store.parquet_io import DataError

READ = (
    "import sys; from thinking_seeds.data.sources import load_dataset; "
    "rows = load_dataset(sys.argv[1], limit=int(sys.argv[2])); print(len(rows), rows[-1].prompt_id)"
)

READ_ALL = (
    "import sys; from thinking_seeds.store.parquet_io import DataError, read_table\n"
    "try: read_table(sys.argv[1])\nexcept DataError as e: sys.exit(str(e))"
)


def test_reading_two_prompts_of_five_million_rows_stays_small(tmp_path):
    data = many_rows_file(tmp_path / "many.parquet")
    rc, peak, out = peak_rss_mib([sys.executable, "-c", READ, str(data), "2"], cap_mib=300)
    assert rc == 0, out
    assert out.split() == ["2", "many-1"]
    assert peak < 300, f"peak resident memory {peak:.0f} MiB reading 2 rows of a 5M-row file"
    # the whole file does not fit a cap (150 MiB: it fails sooner): said as such, not called corrupt
    rc, _, out = peak_rss_mib([sys.executable, "-c", READ_ALL, str(data)], cap_mib=150)
    assert rc == 1 and out.strip().startswith("out of memory reading Parquet file"), out
    assert "corrupt" not in out


def test_a_limit_reads_the_first_rows_and_checks_only_those(tmp_path):
    rows = [
        {
            "data_source": "s",
            "prompt": [{"role": "user", "content": f"q{i}"}],
            "reward_model": {"style": "rule", "ground_truth": "" if i == 4150 else str(i)},
        }
        for i in range(4200)
    ]
    path = tmp_path / "f.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=1000)
    got = load_dataset(path, limit=4097)  # past one batch and one row group
    assert [p.prompt_id for p in got] == [f"f-{i}" for i in range(4097)]
    assert [p.ground_truth for p in got[-2:]] == ["4095", "4096"]
    with pytest.raises(DataError, match="row 4150 has an empty reward_model.ground_truth"):
        load_dataset(path)  # all rows: the bad one is found, with its row number
    with pytest.raises(DataError, match="row 4150"):
        load_dataset(path, limit=10**9)  # a limit past the file reads it all
