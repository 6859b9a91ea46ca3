"""A run of N x the iterations of a built corpus, for the per-file costs of `ts sql` at 1M prefixes.

    python bench/corpus_replicate.py SRC_RUN DST_RUN N [--linked]
    # e.g. a 1M-prefix run at 64 per file from bench/corpus.py's 100k one:
    python bench/corpus_replicate.py /tmp/corp/c100k /tmp/corp1m/c1000k 10
    python bench/corpus.py --live --rows 1000000 --prefixes-per-file 64 --root /tmp/corp1m --reuse --keep

Building 1M prefixes at 64 per file (15,625 iterations of prefix files, aggregates, rollouts, metrics
and manifests) takes hours on a shared 2-core box; this makes a run with that many files in minutes:
SRC's iteration folders (corpus/prefixes, rollouts, metrics, manifests) copied N times under folders
renumbered k + n*j (n = SRC's iterations). Every copy's Parquet files are rewritten with their rows'
`run_id` DST's name (as a real run's rows name it) and their `iteration` (and `policy_version`, and a
seed's `source_step` when it is a snapshot's, > 0) moved by n*j, and the seeds stage's aggregates with
their keys moved the same way
(recording their new prefix file, so they stay fresh): a run of unique iterations, as a real run of
N*n iterations has (issue 53: `entropy_accuracy` refuses repeated iterations). Only theta_0's seeds
(source_step 0) keep the source_age of their original iteration. `--linked`: every copy hard-linked
(seconds; the rows' iterations then repeat every n folders, so the answers are not a real run's --
the timings of listing, footers and scans are). Compacted parts are not copied (the benchmark writes
the run's own, as it compacts behind itself).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

FOLDERS = ("corpus/prefixes", "rollouts", "metrics", "manifests")
_AGG_OF = b"thinking_seeds.aggregates_of"  # store/prefix_aggregates.py: the prefix file's size
_RUN_OF = b"thinking_seeds.run_id"  # store/prefix_aggregates.py: the run_id of the prefix rows


def _moved(t: pa.Table, off: int, run_id: str) -> pa.Table:
    if "run_id" in t.column_names:  # the rows of run DST, as a real run's rows name it
        i = t.column_names.index("run_id")
        t = t.set_column(i, t.field("run_id"), pa.array([run_id] * len(t), t.field("run_id").type))
    for name in ("iteration", "policy_version"):
        if name in t.column_names:
            i = t.column_names.index(name)
            t = t.set_column(i, t.field(name), pc.add(t.column(name), pa.scalar(off, t.field(name).type)))
    if "source_step" in t.column_names:
        i, col = t.column_names.index("source_step"), t.column("source_step")
        snap = pc.fill_null(pc.greater(col, 0), False)
        t = t.set_column(i, t.field("source_step"), pc.if_else(snap, pc.add(col, pa.scalar(off, col.type)), col))
    return t


def _copy_folder(job: tuple[str, str, int, str]) -> None:
    src_dir, out_dir, off, run_id = Path(job[0]), Path(job[1]), job[2], job[3]
    out_dir.mkdir(parents=True, exist_ok=True)
    names = sorted(f.name for f in src_dir.iterdir())
    # the prefix file before its aggregates: they record its size, and must not be older than it
    names.sort(key=lambda n: n == "aggregates.parquet")
    for name in names:
        f, out = src_dir / name, out_dir / name
        if run_id is None or not name.endswith(".parquet"):  # --linked
            os.link(f, out)
            continue
        pf = pq.ParquetFile(f)
        meta = dict(pf.schema_arrow.metadata or {})
        if name == "aggregates.parquet":
            meta[_AGG_OF] = json.dumps({"prefixes.parquet": (out_dir / "prefixes.parquet").stat().st_size}).encode()
            meta[_RUN_OF] = run_id.encode()
        schema = pf.schema_arrow.with_metadata(meta)
        with pq.ParquetWriter(out, schema) as w:  # row group by row group: the aggregates' layout is kept
            for g in range(pf.num_row_groups):
                w.write_table(_moved(pf.read_row_group(g), off, run_id).cast(schema))


def replicate(src: Path, dst: Path, times: int, linked: bool = False, workers: int = 2) -> int:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    n = len(list((src / "corpus/prefixes").glob("iteration=*")))
    jobs = []
    for sub in FOLDERS:
        for d in (src / sub).glob("iteration=*"):
            k = int(d.name.split("=", 1)[1])
            for j in range(times):
                off = 0 if linked else n * j
                jobs.append((str(d), str(dst / sub / f"iteration={k + n * j}"), off, None if linked else dst.name))
    with ProcessPoolExecutor(workers) as pool:
        list(pool.map(_copy_folder, jobs, chunksize=64))
    config = (src / "config.yaml").read_text()
    (dst / "config.yaml").write_text(re.sub(r"(?m)^iterations: \d+$", f"iterations: {n * times}", config))
    if (src / "checkpoints").exists():
        shutil.copytree(src / "checkpoints", dst / "checkpoints", symlinks=True)
    return n


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", type=Path)
    ap.add_argument("dst", type=Path)
    ap.add_argument("times", type=int)
    ap.add_argument("--linked", action="store_true", help="hard-link every copy (iterations repeat)")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    print(f"{replicate(a.src, a.dst, a.times, a.linked, a.workers)} iteration folders x {a.times} -> {a.dst}")
