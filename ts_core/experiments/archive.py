"""A comparison's committed archive: the small result files of its finished runs, kept in git.

A comparison can outlast the working session that runs it (countdown-main: ~6 h on 2 cores, a
session: 3 h), and runs/ is not kept between sessions. `ts compare ... --archive` therefore copies
every run that has finished into the report folder, which is committed:

    docs/results/<id>/runs/<run_id>/
        archive.json                                      what was archived: config hash, final test, files
        compare.json, config.yaml, control.json           the marker, the config, an SFT control's state
        metrics/iteration=all/metrics.parquet             every metrics file of the run, as one table
        corpus/prefixes/iteration=all/prefixes.parquet    the prefix corpus without token ids, log-probs, text
        evals/final-test/step_XXXXXX.parquet              per-prompt final test (θ_0's too, in the run that has it)
        evals/final-test-equal-iterations/step_XXXXXX.parquet   per-prompt test of the checkpoint at the other
                                                          arms' iteration count (equal_iterations.py), if tested
        seed_decides.json                                 a seeded run's does-the-seed-decide statistics
                                                          (seed_decides.py), computed from its rollouts

That is everything the report reads (collect's SQL over metrics, prefixes and configs; the claims'
per-prompt files; the age table's metrics) and nothing it does not: no checkpoints, no rollouts,
no manifests. The archive is itself a runs folder, so resuming is `restore`: an archived run whose
config hash is the planned config's is copied back into runs/<run_id>/ (archive.json included:
that marks the copy), and from there every reader treats it as a finished run of this session
(members.is_complete, sft_control.control_complete, the SQL views, claims). A restored copy can be
reported on, not trained further or evaluated again; a stale one (its config no longer planned) is
removed before the run trains afresh. Never imports prefect.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from thinking_seeds.experiments.members import ARCHIVE_FILE, archive_record, discard_restored
from thinking_seeds.experiments.run_spec import MARKER
from thinking_seeds.experiments.seed_decides import STATS_FILE, run_stats
from thinking_seeds.pipeline.checkpoint_eval import EQUAL_ITERATIONS_STAGE
from thinking_seeds.store.parquet_io import write_table_atomic

__all__ = ["ARCHIVED_METRICS", "ARCHIVE_FILE", "PREFIX_COLUMNS", "archive_run", "restore"]

# The prefix corpus's columns an archive keeps: what the budget table sums (draft_len where
# source_step >= 0) and the cheap numbers beside it; the token lists and texts are most of its size.
PREFIX_COLUMNS = ("run_id", "iteration", "source_step", "source_age", "prefix_ratio", "draft_len", "draft_reward")
_COPIED = (MARKER, "config.yaml", "control.json")
ARCHIVED_METRICS = "metrics/iteration=all/metrics.parquet"
_PREFIXES = "corpus/prefixes/iteration=all/prefixes.parquet"


def _by_iteration(files: list[Path]) -> list[Path]:
    """In the order the SQL views read a run's files (iteration as a number, then name), so sums
    over the archived table add in the same order as over the live files."""

    def key(f: Path) -> tuple[int, str]:
        k = next((p.split("=", 1)[1] for p in reversed(f.parts) if p.startswith("iteration=")), "")
        return (int(k) if k.isdigit() else -1), f.name

    return sorted(files, key=key)


def _sources(root: Path) -> dict[str, list[Path]]:
    """The files of a live run that go into its archive, by kind."""
    return {
        "copy": [root / n for n in _COPIED if (root / n).is_file()],
        "metrics": _by_iteration(list(root.glob("metrics/iteration=*/*.parquet"))),
        "prefixes": _by_iteration(list(root.glob("corpus/prefixes/iteration=*/prefixes.parquet"))),
        # the final test's per-prompt files, and those of an earlier checkpoint tested for the equal-iterations
        # reading (`final-test-equal-iterations`): its hard-prompt row reads them, as the final test's does
        "final_test": sorted(root.glob("evals/final-test/step_*.parquet"))
        + sorted(root.glob(f"evals/{EQUAL_ITERATIONS_STAGE}/step_*.parquet")),
    }


def _fingerprint(root: Path, sources: dict[str, list[Path]]) -> str:
    """Names, sizes and mtimes of the source files: an unchanged run is not archived again."""
    items = sorted(
        f"{p.relative_to(root)}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for ps in sources.values() for p in ps
    )
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def _concat(files: list[Path], columns: tuple[str, ...] | None = None) -> pa.Table:
    """The files as one table (each read on its own: no hive partition column from iteration=K)."""
    tables = []
    for f in files:
        pf = pq.ParquetFile(f)
        cols = None if columns is None else [c for c in columns if c in pf.schema_arrow.names]
        tables.append(pf.read(columns=cols))
    return pa.concat_tables(tables, promote_options="default")


def archive_run(root: Path, dest_root: Path, config_hash: str, final_test: bool) -> bool:
    """Archive the finished run at `root` into `dest_root/<run_id>/`, replacing an older copy.

    `config_hash` is the hash of the config it finished with (what `restore` matches); `final_test`
    whether its final-test files are complete. Returns False when the archive already holds the
    run as it is now (nothing written).
    """
    root, dest_root = Path(root), Path(dest_root)
    dest = dest_root / root.name
    src = _sources(root)
    fp = _fingerprint(root, src)
    old = archive_record(dest)
    if old is not None and (old.get("source_fingerprint"), old.get("config_hash"), old.get("final_test")) == (
        fp,
        config_hash,
        final_test,
    ):
        return False
    dest_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest_root, prefix=f".{root.name}.", suffix=".tmp"))
    try:
        for p in src["copy"]:
            shutil.copy2(p, tmp / p.name)
        for rel, files, cols in (
            (ARCHIVED_METRICS, src["metrics"], None),
            (_PREFIXES, src["prefixes"], PREFIX_COLUMNS),
        ):
            if files:
                (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
                write_table_atomic(_concat(files, cols), tmp / rel)
        for p in src["final_test"]:
            (tmp / p.relative_to(root)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, tmp / p.relative_to(root))
        stats = run_stats(root)  # its rollouts stay behind: keep what the report reads of them
        if stats is not None:
            (tmp / STATS_FILE).write_text(json.dumps(stats, indent=2, sort_keys=True) + "\n")
        files = {str(p.relative_to(tmp)): p.stat().st_size for p in sorted(tmp.rglob("*")) if p.is_file()}
        record = {
            "run_id": root.name,
            "config_hash": config_hash,
            "final_test": final_test,
            "source_fingerprint": fp,
            "archived_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "archive": str(dest_root),
            "files": files,
            "bytes": sum(files.values()),
        }
        (tmp / ARCHIVE_FILE).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")
        for p in [tmp, *tmp.rglob("*")]:
            p.chmod(0o755 if p.is_dir() else 0o644)  # mkdtemp makes 0700; the archive is committed
        aside = dest.with_name(f".{dest.name}.old")
        if dest.exists():
            shutil.rmtree(aside, ignore_errors=True)
            dest.rename(aside)
        tmp.rename(dest)
        shutil.rmtree(aside, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def restore(archive_root: Path, runs_dir: Path, expected: dict[str, str], final_test: bool = True) -> list[str]:
    """Copy each archived run whose config hash is `expected[run_id]` into `runs_dir` (complete, and
    with its final test when `final_test`); returns the ids that are restored copies now.

    A run directory trained here (it has a config.yaml and no archive.json) is never touched: the
    live run wins. A restored copy that no longer matches is removed, so the run trains afresh.
    """
    archive_root, runs_dir = Path(archive_root), Path(runs_dir)
    out = []
    for run_id, h in expected.items():
        rec = archive_record(archive_root / run_id)
        live = runs_dir / run_id
        ok = rec is not None and rec.get("config_hash") == h and (rec.get("final_test") or not final_test)
        mine = archive_record(live)
        if mine is not None and not (ok and mine == rec):
            discard_restored(live)
            mine = None
        if not ok or (mine is None and (live / "config.yaml").exists()):
            continue
        if mine is None:
            shutil.copytree(archive_root / run_id, live, dirs_exist_ok=True)  # over a marker-only folder, if any
        out.append(run_id)
    return out
