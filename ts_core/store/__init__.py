"""store: everything a run keeps on disk, and reading it back (no model, no process of its own but the guard).

    run_dir.py, run_lock.py      the run directory (docs/algorithm.md §6) and who owns it (flock)
    manifest.py, atomic.py       a stage's manifest, and writes a reader sees whole or not at all
    schemas.py, parquet_io.py    the Parquet contracts and their I/O
    checkpoints.py (+ checkpoint_format.py, optimizer_state.py)   policy checkpoints, checked and loaded
    historical_pool.py           the pool H of snapshots that write seeds
    retention.py                 checkpoint.keep_last / keep_every
    run_check.py                 `ts check`
    tracking.py                  experiment trackers
    child_guard.py               children die with their parent, even after a kill -9
    sql*.py                      `ts sql`: DuckDB over the runs, read-only and sealed (sql.py; the views:
                                 sql_views.py, their list: sql_catalog.py, named queries: sql_queries.py)
    prefix_aggregates.py, compaction.py   small per-iteration aggregates, and parts of finished blocks, for it

Resume rests here. Each stage writes its outputs atomically, then its manifest (outputs, hashes, rows,
config hash, upstream digests): the manifests are the only record of what is done, so a rerun skips every
stage whose manifest matches and whose outputs hash as recorded, and a kill -9 anywhere resumes
bit-identically. No stage records a file it did not write or check against its old manifest: a redone
prepare rebuilds a generated split, copies a user's split or θ_0 again, and writes config.yaml again only
as the recorded bytes (`restore_config`); a checkpoint that does not hash as recorded is set aside so its
stage writes its own (`RunDir._outputs_intact`); `ts check` also checks each manifest's upstream digests
(docs/security.md). How θ_k comes back when neither memory nor disk holds it: pipeline/policy_chain.py.
"""
