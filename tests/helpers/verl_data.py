"""Small verl-layout Parquet data sets for the one-line-refusal tests (unit/test_faults_errors.py,
integration/test_faults_errors_flow.py): a good one, one with columns replaced, and `ts train` on them."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

GOOD = {
    "data_source": ["chain_sum", "chain_sum"],
    "prompt": [[{"role": "user", "content": "1+2="}], [{"role": "user", "content": "3+4="}]],
    "ability": ["math", "math"],
    "reward_model": [{"style": "rule", "ground_truth": "3"}, {"style": "rule", "ground_truth": "7"}],
    "extra_info": [{"split": "train", "index": 0}, {"split": "train", "index": 1}],
}


def write(path: Path, **changes) -> Path:
    """A small verl data set with some columns replaced (an Arrow array, or a list to infer from)."""
    cols = {**GOOD, **changes}
    pq.write_table(pa.table(cols), path)
    return path


def one_line(text: str) -> str:
    assert "\n" not in text.strip(), text
    assert "Traceback" not in text
    return text


def train_args(train: Path, val: Path, run_id: str = "u1") -> list[str]:
    return [
        "train",
        "--preset",
        "tiny",
        "--run-id",
        run_id,
        "--set",
        "data.source=parquet",
        "--set",
        f"data.train_path={train}",
        "--set",
        f"data.val_path={val}",
    ]
