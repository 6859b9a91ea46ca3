"""The seeds stage's files computed beside the update (pipeline/seed_files.py) are the bytes the direct
path writes: the prefix file, and its aggregates from the file read back (what a resumed run does)."""

from __future__ import annotations

from thinking_seeds.pipeline import seed_files
from thinking_seeds.pipeline.rows import PrefixRow, read_rows


def _rows(n: int) -> list[PrefixRow]:
    return [
        PrefixRow(
            run_id="r",
            iteration=3,
            prompt_id=f"p{i % 5}",
            seed_id=f"s{i}",
            source_step=i % 3,
            source_age=3 - i % 3,
            prefix_ratio=0.25 + 0.05 * (i % 5),
            prefix_token_ids=[(7 * i + j) % 29 for j in range(4 + i % 9)],
            behaviour_logprobs=[-0.5] * (4 + i % 9),
            prefix_text="x" * (4 + i % 9),
            draft_len=20,
            draft_reward=None if i % 2 else 1.0,
        )
        for i in range(n)
    ]


def test_prepared_files_are_the_direct_paths_bytes(tmp_path):
    for n in (0, 1, 40):
        rows = _rows(n)
        a = tmp_path / f"a{n}" / "runs/r/corpus/prefixes/iteration=3/prefixes.parquet"
        b = tmp_path / f"b{n}" / "runs/r/corpus/prefixes/iteration=3/prefixes.parquet"
        direct = seed_files.write(rows, a)
        prepared = seed_files.write(rows, b, seed_files.prepare(rows, "r"))
        for x, y in zip(direct, prepared, strict=True):
            assert x.read_bytes() == y.read_bytes(), (n, x.name)
        assert len(read_rows(PrefixRow, prepared[0])) == n
