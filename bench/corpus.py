"""`ts sql` over a large prefix corpus: synthetic runs of 1M and 10M prefix rows, every named query.

    python bench/corpus.py [--rows 1000000,10000000] [--rows-per-iteration 4096] [--repeat 3]
                           [--root /tmp/ts-corpus/bench] [--before COMMIT] [--keep] [--reuse] [--skip-report]
    python bench/corpus.py --live --rows 1000000 [--prefixes-per-file 64] [--repeat 3] [--before COMMIT]
    python bench/corpus.py --scaling RUN_1M,RUN_10M --before COMMIT [--repeat 3] [--root DIR]

--scaling (issue 53): every named query end to end on a live 1M-prefix run at 64 per file and a
compacted 10M-row run, before (COMMIT) and after (this checkout), interleaved, with the ratio of the
10M time to the 1M time on each side (the two runs: `build(..., twin=False)` and
bench/corpus_replicate.py, docs/performance.md says how).

Builds, for each size, a run directory with the real contracts and nothing trained (no model, no
GPU), then measures. What a corpus holds:

  prefixes  `rows` prefix rows, `rows-per-iteration` per iteration file (4096 = the issue's real run,
            512 prompts x 8 seeds). Text and token lengths like the project's own runs (the tiny and
            countdown presets: a character tokenizer, chain arithmetic, drafts of 15-75 tokens cut at
            lambda ~ U[0.2, 0.6], so prefixes of ~16 tokens as in the demo run). Seed ages from the
            countdown preset's pool (size 4, theta_0 always in it, a snapshot every 20 iterations).
            Written twice: as the seeds stage writes now (with the derived columns prefix_len,
            prefix_ngram_count, prefix_ngrams) and as older code wrote them (without them; a second
            run dir sharing everything else by symlink).
  rollouts  2 per prefix (on-policy + seeded) with every scalar column set; the token and log-prob
            lists are empty (no named query reads them, and 20M rows of them would not fit the disk).
  metrics   the stage files of every iteration (seeds, continuation, verify: names as the stages
            write them; update: the 44 actor/* metrics), evaluate every 50 iterations.

With --live, only this (issue #25: users query live runs, before any `ts compact`): every named
query end to end on the corpus as a live run leaves it, before (the code at LIVE_BEFORE, which
reads the raw corpus) vs after (this checkout, which reads the seeds stage's per-iteration
aggregates, store/prefix_aggregates.py, and the parts of the finished blocks of iterations the run
compacted behind itself, store/compaction.compact_behind; --no-behind: without those), on the same
files, interleaved. --prefixes-per-file sets the iteration files' size (64: the tiny and game24
presets, ~15,600 files per million prefixes).

Measurements ("before" = the code at BEFORE, before issue #15, run from a `git archive` of it with
this venv, on the files that code wrote; "after" = this checkout on the files it writes; each pair
interleaved: before, after, before, after, ...):

  1. end to end: `ts sql --query NAME --run-id ID -f csv` (a fresh process, as a user runs it: CLI
     start, imports, views, query, output) for every named query, plus `ts sql "select 1"`, on a
     demo-sized run and on each corpus: best wall and CPU (user + system) seconds, peak RSS (MiB).
  2. each change on its own, in one process (imports paid):
       metrics     entropy_accuracy (connect + query) over the per-iteration files vs compacted parts
       views       connect() building every view vs only the one the query reads
       prefix_len  a query on prefix lengths over old files (len(prefix_token_ids)) vs new (stored)
       sql         prefix_diversity's old text (3-gram strings) vs the current one (stored 3-gram
                   codes; checked: the same rows)
       files       the current prefix_diversity over old files vs new ones
       parts       the diversity queries without vs with the compacted ngram_counts parts
  3. the floor of the n-gram queries: count(*) and count(DISTINCT) over every character 3-gram, cut
     from the text and as the stored codes.
  4. the report (`write_report`, what the corpus-report deployment runs) with its step timings.

Every figure depends on the machine's load: run `uptime` next to it (BENCHMARKS.md).

One script past 400 lines on purpose: its modes build the same corpora and time the same queries, and
the before/after sides must share that code to be comparable.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TS = str(Path(sys.executable).with_name("ts"))
POPS = ("on_policy", "continuation", "prefix", "all")
UPDATE_METRICS = [
    f"actor/{m}/{p}"
    for m in (
        "effective_entropy",
        "entropy",
        "grad_tokens",
        "pg_clipfrac",
        "pg_clipfrac_adv",
        "ratio_above_frac",
        "ratio_max",
        "ratio_mean",
    )
    for p in POPS
] + [
    "actor/grad_norm",
    "actor/lr",
    "actor/optimizer_steps",
    "actor/pg_loss",
    "actor/prefix_abs_log_ratio/age=1",
    "actor/prefix_abs_log_ratio/age=2-4",
    "actor/zero_adv_frac",
    "perf/fwd_bwd_s",
    "perf/load_s",
    "perf/num_processes",
    "perf/save_s",
    "time/update/update_total",
]
STAGE_METRICS = {
    "seeds": ["seeds/draft_reward", "seeds/mean_prefix_len", "time/seeds/generation", "time/seeds/io"],
    "continuation": ["rollout/generated_tokens", "rollout/response_len", "time/continuation/generation"],
    "verify": ["advantage/zero_frac", "reward/mean", "reward/on_policy", "reward/seeded", "verify/status_ok"],
}
SNAPSHOT_EVERY, POOL_SIZE, EVAL_EVERY = 20, 4, 50


# ---------------------------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------------------------


def _drafts(rng: np.random.Generator, n: int) -> list[str]:
    """Chain-arithmetic drafts like the tiny model's: 'b 8+3=11,11-4=7. \\boxed{7}', 15-75 characters."""
    out = []
    for _ in range(n):
        v = int(rng.integers(1, 99))
        s = f"{'ab'[rng.integers(2)]} {v}"
        target = int(rng.integers(4, 60))
        while len(s) < target:
            x = int(rng.integers(1, 99))
            nv = v + x if rng.integers(2) else v - x
            s += f"{'+' if nv > v else '-'}{x}={nv},{nv}"
            v = nv
        out.append(s + f". \\boxed{{{v}}}")
    return out


def _members(k: int) -> list[int]:
    """Pool steps the seeds of iteration k are drawn from (theta_0 + the newest snapshots)."""
    snaps = [s for s in range(SNAPSHOT_EVERY, k, SNAPSHOT_EVERY)]
    return [0] + snaps[-(POOL_SIZE - 1) :] if k > 0 else [0]


def build(base: Path, run_id: str, rows: int, per_iter: int, seed: int = 0, twin: bool = True) -> tuple[Path, Path]:
    """Write the corpus; returns (run dir, its twin with prefixes in the old format; not written
    without `twin`)."""
    from thinking_seeds.config import load_config, save_config
    from thinking_seeds.store.manifest import Manifest
    from thinking_seeds.store.parquet_io import write_table_atomic
    from thinking_seeds.store.prefix_aggregates import write_prefix_aggregates
    from thinking_seeds.store.run_dir import RunDir
    from thinking_seeds.store.schemas import (
        PREFIX_FILE_SCHEMA,
        PREFIX_SCHEMA,
        ROLLOUT_SCHEMA,
        with_derived_prefix_columns,
    )

    rng = np.random.default_rng(seed)
    run, old = RunDir.for_run(run_id, base), RunDir.for_run(f"{run_id}-v1", base)
    iters = -(-rows // per_iter)
    for r in (run, old):
        shutil.rmtree(r.root, ignore_errors=True)
        r.root.mkdir(parents=True)
    cfg = load_config("tiny", [f"iterations={iters}", f"pool.snapshot_every={SNAPSHOT_EVERY}"])
    save_config(cfg, run.config_path)
    cfg_hash = cfg.config_hash()
    pool = _drafts(rng, 1 << 16)
    chars = sorted(set("".join(pool)))
    char_id = np.zeros(256, np.int32)
    char_id[[ord(c) for c in chars]] = np.arange(3, 3 + len(chars), dtype=np.int32)
    blob = np.frombuffer("".join(pool).encode(), np.uint8)
    draft_len = np.array([len(s) for s in pool], np.int64)
    draft_at = np.concatenate([[0], np.cumsum(draft_len)])
    done = 0
    for k in range(iters):
        n = min(per_iter, rows - done)
        done += n
        members = np.array(_members(k))
        steps = members[rng.integers(len(members), size=n)]
        d = rng.integers(len(pool), size=n)
        lam = rng.uniform(0.2, 0.6, size=n).astype(np.float32)
        L = np.floor(lam * draft_len[d]).astype(np.int64)
        offsets = np.concatenate([[0], np.cumsum(L)]).astype(np.int32)
        idx = np.repeat(draft_at[d], L) + (np.arange(offsets[-1]) - np.repeat(offsets[:-1], L))
        pids = rng.integers(2000, size=n)
        prompt_ids = pa.array([f"train-{p}" for p in pids])
        t = pa.table(
            {
                "run_id": pa.array([run_id] * n),
                "iteration": pa.array(np.full(n, k, np.int64)),
                "prompt_id": prompt_ids,
                "seed_id": pa.array([f"{k}-train-{p}-{j % 8}" for j, p in enumerate(pids)]),
                "source_step": pa.array(steps.astype(np.int64)),
                "source_age": pa.array((k - steps).astype(np.int64)),
                "prefix_ratio": pa.array(lam),
                "prefix_token_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(char_id[blob[idx]])),
                "behaviour_logprobs": pa.ListArray.from_arrays(
                    pa.array(offsets), pa.array(-rng.exponential(0.3, offsets[-1]).astype(np.float32))
                ),
                "prefix_text": pa.StringArray.from_buffers(n, pa.py_buffer(offsets), pa.py_buffer(blob[idx].tobytes())),
                "draft_len": pa.array(draft_len[d].astype(np.int32)),
                "draft_reward": pa.array((rng.random(n) < 0.3).astype(np.float32)),
            },
            schema=PREFIX_SCHEMA,
        )
        for r in (run, old) if twin else (run,):
            r.prefixes(k).parent.mkdir(parents=True, exist_ok=True)
        write_table_atomic(with_derived_prefix_columns(t), run.prefixes(k), schema=PREFIX_FILE_SCHEMA)
        write_prefix_aggregates(run.prefixes(k))  # as the seeds stage does (issue #25), beside its file
        if twin:  # as written before the derived columns existed
            write_table_atomic(t, old.prefixes(k), schema=PREFIX_SCHEMA)

        m = 2 * n  # per prompt group: on-policy samples, then the seeded continuations
        seeded = np.arange(m) % 2 == 1
        source = np.where(seeded, np.repeat(steps, 2), -1)
        ok = rng.random(m) < np.where(seeded, 0.35, 0.3)
        no_ints = pa.ListArray.from_arrays(pa.array(np.zeros(m + 1, np.int32)), pa.array([], pa.int32()))
        no_floats = pa.ListArray.from_arrays(pa.array(np.zeros(m + 1, np.int32)), pa.array([], pa.float32()))
        answers = rng.integers(-50, 150, size=m)
        r = pa.table(
            {
                "run_id": pa.array([run_id] * m),
                "iteration": pa.array(np.full(m, k, np.int64)),
                "prompt_id": pa.array(np.repeat(prompt_ids.to_numpy(zero_copy_only=False), 2)),
                "sample_id": pa.array((np.arange(m) % 16).astype(np.int32)),
                "kind": pa.array(np.where(seeded, "seeded", "on_policy")),
                "source_step": pa.array(source, mask=source < 0),
                "prefix_len": pa.array(np.where(seeded, np.repeat(L, 2), 0).astype(np.int32)),
                "prompt_token_ids": no_ints,
                "token_ids": no_ints,
                "old_logprobs": no_floats,
                "behaviour_logprobs": no_floats,
                "response_text": pa.array([""] * m),
                "answer": pa.array([str(a) for a in answers]),
                "status": pa.array(np.where(ok, "ok", "wrong")),
                "reward": pa.array(ok.astype(np.float32)),
                "advantage": pa.array(rng.normal(0, 1, m).astype(np.float32)),
                "truncated": pa.array(np.zeros(m, bool)),
                "policy_version": pa.array(np.full(m, k, np.int64)),
            },
            schema=ROLLOUT_SCHEMA,
        )
        run.rollouts(k).parent.mkdir(parents=True, exist_ok=True)
        write_table_atomic(r, run.rollouts(k), schema=ROLLOUT_SCHEMA)
        vals = rng.random(len(UPDATE_METRICS))
        run.write_metrics(k, "update", dict(zip(UPDATE_METRICS, vals.tolist(), strict=True)))
        for stage, names in STAGE_METRICS.items():
            run.write_metrics(k, stage, {n: float(v) for n, v in zip(names, rng.random(len(names)), strict=True)})
        # the last stage's manifest: what tells `ts compact` an iteration is over (no other reader here)
        run.write_manifest(Manifest("evaluate", k, cfg_hash))
        if (k + 1) % EVAL_EVERY == 0 or k == iters - 1:
            acc = float(rng.random())
            run.write_metrics(k + 1, "evaluate", {"eval/accuracy": acc, "eval/pass@1": acc, "eval/pass@16": 0.9})
    for step in sorted(set(_members(iters))):
        d = run.pool_root / f"step_{step:06d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "manifest.json").write_text(
            json.dumps({"step": step, "created_at": "2026-01-01T00:00:00+00:00", "param_count": 859_904})
        )
    if not twin:
        shutil.rmtree(old.root)
    shared = ("config.yaml", "rollouts", "metrics", "checkpoints") if twin else ()
    for name in shared:  # the twin shares all but prefixes
        (old.root / name).symlink_to(run.root / name)
    return run.root, old.root


# ---------------------------------------------------------------------------------------------
# the named queries as they were before issue #15 (commit BEFORE), for the in-process ratios
# ---------------------------------------------------------------------------------------------

from thinking_seeds.store.sql_queries import _len_label, _len_lo  # noqa: E402

_OLD_PREFIX_DIVERSITY = f"""
WITH p AS (
    SELECT run_id, source_age, prefix_len AS L, {_len_lo("prefix_len")} AS len_lo, prefix_text
    FROM prefixes
),
g0 AS (  -- one row per character position that starts a 3-gram
    SELECT run_id, source_age, len_lo, prefix_text,
           unnest(generate_series(1, length(prefix_text) - 2)) AS pos
    FROM p
),
g AS (SELECT run_id, source_age, len_lo, substring(prefix_text, pos, 3) AS gram FROM g0),
pc AS (
    SELECT run_id, 'source_age' AS breakdown, source_age AS key, count(*) AS prefixes, avg(L) AS mean_prefix_len
    FROM p GROUP BY ALL
    UNION ALL
    SELECT run_id, 'prefix_len', len_lo, count(*), avg(L) FROM p GROUP BY ALL
    UNION ALL
    SELECT run_id, 'all', NULL, count(*), avg(L) FROM p GROUP BY ALL
),
gc AS (
    SELECT run_id, 'source_age' AS breakdown, source_age AS key, count(*) AS ngrams,
           count(DISTINCT gram) AS distinct_ngrams
    FROM g GROUP BY ALL
    UNION ALL
    SELECT run_id, 'prefix_len', len_lo, count(*), count(DISTINCT gram) FROM g GROUP BY ALL
    UNION ALL
    SELECT run_id, 'all', NULL, count(*), count(DISTINCT gram) FROM g GROUP BY ALL
)
SELECT pc.run_id, pc.breakdown,
       CASE pc.breakdown WHEN 'all' THEN 'all'
                  WHEN 'prefix_len' THEN {_len_label("pc.key")}
                  ELSE CASE WHEN pc.key < 0 THEN 'dataset' ELSE CAST(pc.key AS VARCHAR) END END AS bucket,
       pc.prefixes, pc.mean_prefix_len,
       coalesce(gc.ngrams, 0) AS ngrams, coalesce(gc.distinct_ngrams, 0) AS distinct_ngrams,
       gc.distinct_ngrams / nullif(gc.ngrams, 0) AS distinct_ratio
FROM pc LEFT JOIN gc ON pc.run_id = gc.run_id AND pc.breakdown = gc.breakdown AND pc.key IS NOT DISTINCT FROM gc.key
ORDER BY pc.run_id, CASE pc.breakdown WHEN 'source_age' THEN 0 WHEN 'prefix_len' THEN 1 ELSE 2 END, pc.key
"""

_OLD_SEEDED_SOLVE_RATE = f"""
WITH r AS (
    SELECT run_id, iteration, kind, source_step,
           CASE WHEN source_step IS NULL OR source_step < 0 THEN NULL ELSE iteration - source_step END AS source_age,
           {_len_lo("prefix_len")} AS len_lo,
           CAST(status = 'ok' AS DOUBLE) AS solved, reward
    FROM rollouts
    WHERE reward IS NOT NULL
),
onp AS (  -- on-policy solve rate per iteration: the baseline, weighted like each group's samples
    SELECT run_id, iteration, avg(solved) AS on_rate FROM r WHERE kind = 'on_policy' GROUP BY ALL
),
rj AS (SELECT r.*, onp.on_rate FROM r LEFT JOIN onp USING (run_id, iteration)),
s AS (
    SELECT run_id, kind, 'all' AS breakdown, NULL::BIGINT AS key, count(*) AS samples, avg(solved) AS solve_rate,
           avg(reward) AS mean_reward, avg(on_rate) AS on_policy_solve_rate
    FROM rj GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_step', source_step, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_age', source_age, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'prefix_len', len_lo, count(*), avg(solved), avg(reward), avg(on_rate)
    FROM rj WHERE kind <> 'on_policy' GROUP BY ALL
)
SELECT run_id, kind, breakdown,
       CASE breakdown WHEN 'all' THEN 'all'
               WHEN 'prefix_len' THEN {_len_label("key")}
               ELSE CASE WHEN key IS NULL OR key < 0 THEN 'dataset' ELSE CAST(key AS VARCHAR) END END AS bucket,
       samples, solve_rate, mean_reward, on_policy_solve_rate,
       solve_rate - on_policy_solve_rate AS vs_on_policy
FROM s
ORDER BY run_id,
         CASE kind WHEN 'on_policy' THEN 0 WHEN 'seeded' THEN 1 ELSE 2 END,
         CASE breakdown WHEN 'all' THEN 0 WHEN 'source_step' THEN 1 WHEN 'source_age' THEN 2 ELSE 3 END,
         key
"""

BEFORE_QUERIES = {"prefix_diversity": _OLD_PREFIX_DIVERSITY, "seeded_solve_rate": _OLD_SEEDED_SOLVE_RATE}


# ---------------------------------------------------------------------------------------------
# measurements
# ---------------------------------------------------------------------------------------------

BEFORE = "4c409d2"  # the code before issue #15's changes: its CLI is the "before" of the end-to-end ratios
# Runs `ts` from another source tree with this venv: the editable install maps thinking_seeds to the
# repository's folders, so point that map at the tree instead.
_LAUNCHER = (
    "import sys, __editable___thinking_seeds_0_1_0_finder as f; root, here = sys.argv.pop(1), sys.argv.pop(1); "
    "f.MAPPING.update({k: v.replace(here, root, 1) for k, v in f.MAPPING.items()}); "
    "sys.argv[0] = 'ts'; from thinking_seeds.flows.cli import app; app()"
)


def _uptime() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def before_tree(root: Path, commit: str) -> Path:
    """The project's code at `commit`, extracted under `root` (bench/_code_at.py: git archive)."""
    from _code_at import code_at

    return code_at(commit, root)


def measured(base: Path, args: list[str], tree: Path | None = None) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak RSS (MiB) of `ts args` (this checkout's,
    or the one in `tree`), measured by a small parent process of its own (so the RSS is this
    command's, not the largest of every command so far). On a loaded machine the CPU time is the
    steadier figure: the wall time adds the wait for a core."""
    env = dict(os.environ, TS_RUNS_DIR=str(base), OMP_NUM_THREADS="1")
    # as an installed package runs, with its modules' bytecode cached (pip compiles it at install): this
    # box sets PYTHONDONTWRITEBYTECODE, under which every start compiles the project anew (+0.08 s); the
    # first of the repeats writes the cache, and the best of them is reported
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    cmd = [TS, *args] if tree is None else [sys.executable, "-c", _LAUNCHER, str(tree), str(ROOT), *args]
    probe = (
        "import os,resource,subprocess,sys,time,json;t=time.perf_counter();"
        "p=subprocess.run(sys.argv[1:],stdout=subprocess.DEVNULL,stderr=subprocess.PIPE,text=True);"
        "w=time.perf_counter()-t;u=resource.getrusage(resource.RUSAGE_CHILDREN);"
        "print(json.dumps([p.returncode,w,u.ru_utime+u.ru_stime,u.ru_maxrss/1024,p.stderr[-400:]]))"
    )
    out = subprocess.run([sys.executable, "-c", probe, *cmd], env=env, capture_output=True, text=True, check=True)
    rc, wall, cpu, rss, err = json.loads(out.stdout)
    if rc:  # reported on its line (e.g. the old code out of DuckDB's memory on 10M rows), not fatal
        print(f"      FAILED: ts {' '.join(args)}: {' '.join(err.split())[-300:]}", flush=True)
        return float("nan"), float("nan"), rss
    return wall, cpu, rss


def _header() -> None:
    print(
        f"    {'':40s} {'before: wall':>12s} {'CPU':>6s} {'RSS':>5s}   {'after: wall':>11s} {'CPU':>6s} {'RSS':>5s}"
        f"   {'CPU ratio':>9s}"
    )


def _pair(label: str, before: list[tuple], after: list[tuple]) -> None:
    """One line: best wall and CPU seconds and peak RSS (MiB) of each side; wall s, CPU s, RSS."""

    def best(xs):  # a failed measurement is nan: best of the others, nan if all failed
        ok = [x for x in xs if x[0] == x[0]] or xs
        return min(x[0] for x in ok), min(x[1] for x in ok), max(x[2] for x in ok)

    bw, bc, br = best(before) if before else (float("nan"),) * 3
    aw, ac, ar = best(after)
    print(
        f"    {label:40s} {bw:12.2f} {bc:6.2f} {br:5.0f}   {aw:11.2f} {ac:6.2f} {ar:5.0f}   {bc / ac:8.2f}x",
        flush=True,
    )


def end_to_end(base: Path, run_id: str, repeat: int, tree: Path) -> None:
    """Every named query as a user runs it, before (the old CLI on the files old code wrote) and
    after (this CLI on the files the seeds stage writes now), interleaved."""
    from thinking_seeds.store.sql_queries import NAMED_QUERIES

    print(f"  end to end, `ts sql ... --run-id ID -f csv`, best of {repeat} (load {_uptime()}):")
    _header()
    # --timeout 0: no limit (the default 60 s would stop the n-gram queries on 10M rows here)
    cmds = [("select 1", ["sql", "select 1"])] + [(n, ["sql", "--query", n, "--timeout", "0"]) for n in NAMED_QUERIES]
    for label, args in cmds:
        before, after = [], []
        for _ in range(repeat):
            if label in BEFORE_NAMED:
                before.append(measured(base, [*args, "--run-id", f"{run_id}-v1", "-f", "csv"], tree))
            after.append(measured(base, [*args, "--run-id", run_id, "-f", "csv"]))
        _pair(label, before, after)
    print(f"    (load {_uptime()})")


# the named queries the code before had (prefix_diversity_history is new)
BEFORE_NAMED = ("select 1", "runs", "prefix_diversity", "seeded_solve_rate", "entropy_accuracy", "clip_fraction")


def _timed(fn) -> tuple[float, float, object]:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - t, time.process_time() - c, out


def _same(a, b) -> bool:
    if a.columns != b.columns or len(a.rows) != len(b.rows):
        return False
    for ra, rb in zip(a.rows, b.rows, strict=True):
        for x, y in zip(ra, rb, strict=True):
            if isinstance(x, float) and isinstance(y, float):
                if abs(x - y) > 1e-9 * max(1.0, abs(x)):
                    return False
            elif x != y:
                return False
    return True


def ablations(base: Path, run_id: str, repeat: int) -> None:
    """Each change on its own, before vs after, interleaved, in this process (imports paid)."""
    from thinking_seeds.store.sql import NAMED_QUERIES, connect, query, views_in

    print(f"  each change on its own, in one process, best of {repeat} (load {_uptime()}):")
    print(f"    {'':44s} {'before: wall':>12s} {'CPU':>6s}   {'after: wall':>11s} {'CPU':>6s}   {'CPU ratio':>9s}")

    def line(label: str, b: list, a: list, note: str = "") -> None:
        bw, bc = min(x[0] for x in b), min(x[1] for x in b)
        aw, ac = min(x[0] for x in a), min(x[1] for x in a)
        print(f"    {label:44s} {bw:12.2f} {bc:6.2f}   {aw:11.2f} {ac:6.2f}   {bc / ac:8.2f}x {note}", flush=True)

    def con_timed(rid: str, views=None):
        wall, cpu, con = _timed(lambda: connect(rid, base, views=views))
        con.close()
        return wall, cpu

    b = [con_timed(run_id) for _ in range(repeat)]
    a = [con_timed(run_id, {"prefixes"}) for _ in range(repeat)]
    line("views: connect() all -> only prefixes", b, a)

    def named(rid: str, name: str):  # connect + query: the per-file cost is in both
        def go():
            con = connect(rid, base, views=views_in(NAMED_QUERIES[name][1]))
            try:
                return query(con, NAMED_QUERIES[name][1], None)
            finally:
                con.close()

        return _timed(go)

    runs = {"before": [], "after": []}
    for _ in range(repeat):  # the twin shares the metrics files but has no compacted parts
        runs["before"].append(named(f"{run_id}-v1", "entropy_accuracy"))
        runs["after"].append(named(run_id, "entropy_accuracy"))
    same = _same(runs["before"][-1][2], runs["after"][-1][2])
    line("metrics: per-iteration files -> compacted", runs["before"], runs["after"], "same rows" if same else "DIFFER")

    def q(rid: str, sql: str, views=None):
        con = connect(rid, base, views=views)
        try:
            return _timed(lambda: query(con, sql, None))
        finally:
            con.close()

    runs = {"before": [], "after": []}
    lens = "SELECT avg(prefix_len), max(prefix_len) FROM prefixes"
    for _ in range(repeat):
        runs["before"].append(q(f"{run_id}-v1", lens, {"prefixes"}))
        runs["after"].append(q(run_id, lens, {"prefixes"}))
    same = _same(runs["before"][-1][2], runs["after"][-1][2])
    line("prefix_len: computed (old files) -> stored", runs["before"], runs["after"], "same rows" if same else "DIFFER")
    for name, old_sql in BEFORE_QUERIES.items():
        runs = {"before": [], "after": []}
        views = views_in(old_sql) | views_in(NAMED_QUERIES[name][1])
        for _ in range(repeat):
            runs["before"].append(q(run_id, old_sql, views))
            runs["after"].append(q(run_id, NAMED_QUERIES[name][1], views))
        same = _same(runs["before"][-1][2], runs["after"][-1][2])
        line(f"{name}: old SQL -> new", runs["before"], runs["after"], "same rows" if same else "DIFFER")
    new_sql = NAMED_QUERIES["prefix_diversity"][1]
    parts_dir = base / run_id / "compacted" / "ngram_counts"
    off = parts_dir.with_name("ngram_counts.off")
    for name in ("prefix_diversity", "prefix_diversity_history"):
        runs = {"before": [], "after": []}
        sql = NAMED_QUERIES[name][1]
        for _ in range(repeat):  # the same files and SQL, without and with the compacted ngram_counts parts
            parts_dir.rename(off)
            try:
                runs["before"].append(q(run_id, sql, views_in(sql)))
            finally:
                off.rename(parts_dir)
            runs["after"].append(q(run_id, sql, views_in(sql)))
        same = _same(runs["before"][-1][2], runs["after"][-1][2])
        line(f"{name}: no parts -> ngram parts", runs["before"], runs["after"], "same rows" if same else "DIFFER")
    runs = {"before": [], "after": []}
    for _ in range(repeat):
        runs["before"].append(q(f"{run_id}-v1", new_sql, views_in(new_sql)))
        runs["after"].append(q(run_id, new_sql, views_in(new_sql)))
    same = _same(runs["before"][-1][2], runs["after"][-1][2])
    line("prefix_diversity: old files -> new", runs["before"], runs["after"], "same rows" if same else "DIFFER")
    grams = (
        "SELECT substring(prefix_text, pos, 3) AS g FROM "
        "(SELECT prefix_text, unnest(generate_series(1, length(prefix_text) - 2)) AS pos FROM prefixes)"
    )
    codes = "SELECT unnest(prefix_ngrams) AS g FROM prefixes"
    for label, sql in (
        ("floor: every 3-gram string, count(*)", f"SELECT count(*) FROM ({grams})"),
        ("floor: every 3-gram string, count(DISTINCT)", f"SELECT count(DISTINCT g) FROM ({grams})"),
        ("floor: every stored 3-gram code, count(*)", f"SELECT count(*) FROM ({codes})"),
        ("floor: every stored 3-gram code, count(DISTINCT)", f"SELECT count(DISTINCT g) FROM ({codes})"),
    ):
        t = [q(run_id, sql, {"prefixes"}) for _ in range(repeat)]
        n = t[-1][2].rows[0][0]
        print(f"    {label:44s} {'':12s} {'':6s}   {min(x[0] for x in t):11.2f} {min(x[1] for x in t):6.2f}   ({n:,})")


LIVE_BEFORE = "f61febf"  # the code before issue #25 item 7: no per-iteration aggregates, metrics via a dataset


def live(base: Path, run_id: str, repeat: int, tree: Path, label: str, behind: bool = True) -> None:
    """Every named query on a live run (issue #25: users query live runs; never hand-compacted), as a
    user runs it, on the same files: before = the code at --before (it reads the raw corpus; the
    aggregates beside it are files it does not know), after = this checkout, interleaved.

    A run of this checkout compacts each finished block of iterations behind itself as it goes
    (store/compaction.compact_behind): with `behind` the after side reads the parts that leaves --
    those of every finished block, written here by the same code (compact over the finished blocks)
    -- and the before side does not (the parts are moved aside for it: its runs had none); without
    `behind`, neither side has parts (the comparison of the seeds stage's aggregates alone)."""
    from thinking_seeds.store.compaction import compact
    from thinking_seeds.store.sql_queries import NAMED_QUERIES

    parts = base / run_id / "compacted"
    aside = parts.with_name("compacted.live-aside")
    if behind and not parts.exists():
        if aside.exists():
            aside.rename(parts)
        t, c, written = _timed(lambda: compact(base / run_id))
        print(f"  the parts the run compacted behind itself: {len(written)} written in {t:.1f} s ({c:.1f} s CPU)")
    if parts.exists():
        parts.rename(aside)

    def with_parts(on: bool) -> None:
        if on and aside.exists():
            aside.rename(parts)
        elif not on and parts.exists():
            parts.rename(aside)

    try:
        what = "compacted behind itself, as a run does" if behind else "never compacted"
        print(f"  live run ({what}), `ts sql ... --run-id ID -f csv`, best of {repeat} (load {_uptime()}):")
        print(f"    before = the code at {label}, no parts; after = this checkout")
        _header()
        cmds = [("select 1", ["sql", "select 1"])]
        cmds += [(n, ["sql", "--query", n, "--timeout", "0"]) for n in NAMED_QUERIES]
        for name, args in cmds:
            before, after = [], []
            for _ in range(repeat):
                with_parts(False)
                before.append(measured(base, [*args, "--run-id", run_id, "-f", "csv"], tree))
                with_parts(behind)
                after.append(measured(base, [*args, "--run-id", run_id, "-f", "csv"]))
            _pair(name, before, after)
        print(f"    (load {_uptime()})")
    finally:
        with_parts(True)


def scaling(runs: list[Path], repeat: int, tree: Path, label: str) -> None:
    """Issue 53: every named query end to end (`ts sql --query NAME --run-id ID -f csv`, a fresh process)
    on each run of `runs` (a live 1M-prefix run at 64 per file, a compacted 10M-row run), before (the
    code at `label`) and after (this checkout), interleaved on the same files, then each side's ratio
    of the second run's time to the first's. Each run is compacted first by this checkout (as a run
    compacts behind itself, or `ts compact`): it writes the parts the code before reads too, and the
    roll-ups only this checkout reads."""
    from thinking_seeds.store.compaction import compact
    from thinking_seeds.store.sql_queries import NAMED_QUERIES

    for run in runs:
        t, c, written = _timed(lambda r=run: compact(r))
        files = sum(1 for _ in (run / "corpus/prefixes").glob("iteration=*"))
        print(
            f"  {run.name}: {files} iteration folders; parts written now: {len(written)} in {t:.1f} s ({c:.1f} s CPU)"
        )
    cmds = [("select 1", ["sql", "select 1"])]
    cmds += [(n, ["sql", "--query", n, "--timeout", "0"]) for n in NAMED_QUERIES]
    print(f"  end to end, best of {repeat} (wall s / CPU s), before = the code at {label}, after = this checkout")
    print(f"  (load {_uptime()})")
    head = "".join(f"{r.name + ' ' + side:>22s}" for r in runs for side in ("before", "after"))
    print(f"    {'':26s}{head}   {'after/before':>14s}   {'ratio ' + runs[-1].name + '/' + runs[0].name:>24s}")
    for name, args in cmds:
        best: dict[tuple[str, str], tuple[float, float]] = {}
        for _ in range(repeat):
            for run in runs:
                for side in ("before", "after"):
                    got = measured(
                        run.parent, [*args, "--run-id", run.name, "-f", "csv"], tree if side == "before" else None
                    )
                    old = best.get((run.name, side), (float("inf"), float("inf")))
                    best[(run.name, side)] = (min(old[0], got[0]), min(old[1], got[1]))
        cells = "".join(
            f"{best[(r.name, side)][0]:>13.2f} / {best[(r.name, side)][1]:5.2f}"
            for r in runs
            for side in ("before", "after")
        )
        speed = " ".join(f"{best[(r.name, 'after')][0] / best[(r.name, 'before')][0]:.2f}x" for r in runs)
        grow = "  ".join(
            f"{side} {best[(runs[-1].name, side)][0] / best[(runs[0].name, side)][0]:.2f}x"
            for side in ("before", "after")
        )
        print(f"    {name:26s}{cells}   {speed:>14s}   {grow:>24s}", flush=True)
    print(f"  (load {_uptime()})")


def report(base: Path, run_id: str) -> None:
    """write_report in a fresh process (what the corpus-report deployment runs), with its steps."""
    probe = (
        "import json,resource,sys,time;from pathlib import Path;"
        "from thinking_seeds.evals.report import write_report;t=time.perf_counter();c=time.process_time();tm={};"
        "write_report(sys.argv[1],Path(sys.argv[2]),timings=tm);"
        "print(json.dumps([time.perf_counter()-t,time.process_time()-c,tm,"
        "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss/1024]))"
    )
    env = dict(os.environ, OMP_NUM_THREADS="1")
    print(f"  report (write_report, what the corpus-report flow runs; load {_uptime()}):", flush=True)
    out = subprocess.run([sys.executable, "-c", probe, run_id, str(base)], env=env, capture_output=True, text=True)
    if out.returncode:
        print(f"    FAILED: {out.stderr.strip()[-600:]}")
        return
    total, cpu, steps, rss = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"    {total:.1f} s wall, {cpu:.1f} s CPU, peak RSS {rss:.0f} MiB; steps (wall s): ", end="")
    print(", ".join(f"{k} {v:.1f}" for k, v in steps.items()), f"(load {_uptime()})", flush=True)


def demo_start(base: Path, repeat: int, tree: Path) -> None:
    """`ts sql` on a demo-sized run (8 iterations x 64 prefixes): the CLI's start."""
    run, old = build(base, "demo-size", 512, 64)
    print(f"demo-sized run (512 prefix rows, 8 iterations), best of {repeat} (load {_uptime()}):")
    _header()
    for sql in ("select 1", "select count(*), avg(prefix_len) from prefixes"):
        before, after = [], []
        for _ in range(repeat):
            before.append(measured(base, ["sql", sql, "--run-id", old.name, "-f", "csv"], tree))
            after.append(measured(base, ["sql", sql, "--run-id", run.name, "-f", "csv"]))
        _pair(f"ts sql {sql!r}", before, after)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", default="1000000,10000000")
    ap.add_argument(
        "--rows-per-iteration",
        "--prefixes-per-file",
        type=int,
        default=4096,
        help="prefixes per iteration file (the seeds stage writes one per iteration: 64 in the tiny and game24 "
        "presets, 4096 at 512 prompts x 8 seeds)",
    )
    ap.add_argument(
        "--no-behind",
        action="store_true",
        help="with --live: no compacted parts on the after side either (the run's own compaction left out)",
    )
    ap.add_argument("--root", type=Path, default=Path("/tmp/ts-corpus/bench"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--before", default=None, help=f"commit whose CLI is the 'before' (default: {BEFORE})")
    ap.add_argument("--keep", action="store_true", help="keep the corpora (default: delete each after use)")
    ap.add_argument("--reuse", action="store_true", help="reuse corpora already built under --root")
    ap.add_argument("--skip-report", action="store_true")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument(
        "--live",
        action="store_true",
        help=f"only the live-run comparison (never compacted; --before defaults to {LIVE_BEFORE} with it)",
    )
    ap.add_argument(
        "--scaling",
        default=None,
        metavar="RUN_DIR,RUN_DIR",
        help="only issue 53's comparison: every named query on these runs (a live 1M run at 64 per file, a "
        "compacted 10M one: built with bench/corpus_replicate.py and --keep), before (--before) and after, "
        "and the ratio of the second's time to the first's",
    )
    args = ap.parse_args()
    args.before = args.before or (LIVE_BEFORE if args.live else BEFORE)
    import duckdb

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
        f"duckdb {duckdb.__version__}, pyarrow {pa.__version__}, OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, "
        f"load {_uptime()}; before = the code at {args.before}",
        flush=True,
    )
    args.root.mkdir(parents=True, exist_ok=True)
    tree = before_tree(args.root, args.before)
    if args.scaling:
        scaling([Path(p) for p in args.scaling.split(",")], args.repeat, tree, args.before)
        return
    if not args.skip_demo and not args.live:
        demo_start(args.root, max(args.repeat, 5), tree)
    for rows in (int(x) for x in args.rows.split(",")):
        run_id = f"c{rows // 1000}k"
        run = args.root / run_id
        if args.reuse and run.is_dir():
            built = "reused"
        else:
            t, _, _ = _timed(lambda r=rows, i=run_id: build(args.root, i, r, args.rows_per_iteration))
            built = f"built in {t:.0f} s"
        files = sum(1 for _ in run.glob("corpus/prefixes/iteration=*/prefixes.parquet"))
        mib = sum(f.stat().st_size for f in run.rglob("*.parquet")) / 2**20
        old_mib = sum(f.stat().st_size for f in (args.root / f"{run_id}-v1" / "corpus").rglob("*.parquet")) / 2**20
        new_mib = sum(f.stat().st_size for f in (run / "corpus").rglob("prefixes.parquet")) / 2**20
        agg_mib = sum(f.stat().st_size for f in (run / "corpus").rglob("aggregates.parquet")) / 2**20
        print(
            f"\n{rows:,} prefix rows in {files} iteration files ({args.rows_per_iteration} per iteration), {built}; "
            f"Parquet {mib:.0f} MiB (prefixes {new_mib:.1f} MiB; {old_mib:.1f} MiB without the derived columns; "
            f"the seeds stage's aggregates {agg_mib:.1f} MiB)",
            flush=True,
        )
        if args.live:
            live(args.root, run_id, args.repeat, tree, args.before, behind=not args.no_behind)
            continue
        from thinking_seeds.store.compaction import compact

        t, c, written = _timed(lambda r=run: compact(r))
        again, _, _ = _timed(lambda r=run: compact(r))
        parts_mib = sum(f.stat().st_size for f in written) / 2**20
        print(
            f"  ts compact (the corpus-report flow's first step): {len(written)} parts ({parts_mib:.1f} MiB) "
            f"in {t:.1f} s ({c:.1f} s CPU); run again, up to date: {again:.2f} s (load {_uptime()})",
            flush=True,
        )
        end_to_end(args.root, run_id, args.repeat, tree)
        ablations(args.root, run_id, args.repeat)
        if not args.skip_report:
            report(args.root, run_id)
        if not args.keep:
            shutil.rmtree(run, ignore_errors=True)
            shutil.rmtree(args.root / f"{run_id}-v1", ignore_errors=True)
    if not args.keep:
        for name in ("demo-size", "demo-size-v1", f"code-{args.before}"):
            shutil.rmtree(args.root / name, ignore_errors=True)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
