"""A run of N x the file count of a built corpus, by hard links, for the per-file costs of `ts sql`.

    python bench/corpus_replicate.py SRC_RUN DST_RUN N
    # e.g. a 1M-prefix run at 64 per file from bench/corpus.py's 100k one:
    python bench/corpus_replicate.py /tmp/corp/c100k /tmp/corp1m/c1000k 10
    python bench/corpus.py --live --rows 1000000 --prefixes-per-file 64 --root /tmp/corp1m --reuse --keep

Building 1M prefixes at 64 per file (15,625 iterations of prefix files, aggregates, rollouts, metrics
and manifests) takes hours on a shared 2-core box; this makes a run with that many files in seconds:
SRC's iteration folders (corpus/prefixes, rollouts, metrics, manifests) hard-linked N times under
folders renumbered k + n*j (n = SRC's iterations). The file count, sizes and footers are those of a
run N times as long; the rows' own `iteration` column repeats every n folders, so the answers are not a
real run's -- the timings of listing, footers, parts and scans are. Compacted parts are not copied (the
benchmark writes the run's own, as it compacts behind itself).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

FOLDERS = ("corpus/prefixes", "rollouts", "metrics", "manifests")


def replicate(src: Path, dst: Path, times: int) -> int:
    shutil.rmtree(dst, ignore_errors=True)
    dst.mkdir(parents=True)
    n = len(list((src / "corpus/prefixes").glob("iteration=*")))
    for sub in FOLDERS:
        for d in (src / sub).glob("iteration=*"):
            k = int(d.name.split("=", 1)[1])
            for j in range(times):
                out = dst / sub / f"iteration={k + n * j}"
                out.mkdir(parents=True, exist_ok=True)
                for f in d.iterdir():
                    os.link(f, out / f.name)
    shutil.copy(src / "config.yaml", dst / "config.yaml")
    if (src / "checkpoints").exists():
        shutil.copytree(src / "checkpoints", dst / "checkpoints", symlinks=True)
    return n


if __name__ == "__main__":
    src_run, dst_run, n_times = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    print(f"{replicate(src_run, dst_run, n_times)} iteration folders x {n_times} -> {dst_run}")
