"""The catalogue of named queries (`ts sql --list`, `run_named`): SQL over the views of
`thinking_seeds.store.sql_views`, one entry per analysis, {name: (description, SQL)}.

Plain text only: the queries run through `sql.query` like any user's SQL (read-only, timed), and
making them fast on large corpora is a matter of this text and of how the views are built.
"""

from __future__ import annotations

from thinking_seeds.store.schemas import len_bucket_sql

__all__ = ["NAMED_QUERIES"]


_len_lo = len_bucket_sql  # prefix length bucket (tokens): 0, 1, 2-3, 4-7, ... (its lower bound)


def _len_label(lo: str) -> str:
    return f"CASE WHEN {lo} <= 1 THEN CAST({lo} AS VARCHAR) ELSE {lo} || '-' || (2 * {lo} - 1) END"


# The diversity queries count distinct character 3-grams over millions of prefixes. They count
# over roll-ups (store/rollups.py), never over the corpus's 3-grams: prefix_diversity over
# ngram_pairs (store/ngram_pairs.py: each (run, source age, 3-gram) and (run, length bucket, 3-gram)
# pair in the first compacted block of 100 iterations that has it, then once per later block or per
# prefix file not compacted yet); prefix_diversity_history over ngram_per_iteration (one row per iteration). Where no
# compacted part stands for a prefix file, both are made from the seeds stage's per-iteration
# aggregates (store/prefix_aggregates.py), else from the prefixes' stored 3-gram codes. The prefix
# counts and lengths come from prefix_groups, the same keys' counts and sums: a live run's
# diversity queries never scan its corpus, and their cost follows its iterations, not its rows.
# BENCHMARKS.md, "SQL over the prefix corpus", and docs/performance.md have the measurements.
_PREFIX_DIVERSITY = """
WITH pc AS (  -- breakdown id: 1 = by source_age, 2 = by prefix length bucket, 3 = all (GROUPING's bit mask)
    SELECT run_id, GROUPING(source_age, len_lo) AS gid, coalesce(source_age, len_lo) AS key,
           CAST(sum(prefixes) AS BIGINT) AS prefixes, sum(prefix_len_sum) / sum(prefixes) AS mean_prefix_len,
           CAST(sum(ngram_count_sum) AS BIGINT) AS ngrams
    FROM prefix_groups GROUP BY GROUPING SETS ((run_id, source_age), (run_id, len_lo), (run_id))
),
d AS (  -- each (run, source age, 3-gram) and (run, length bucket, 3-gram) once: gid 1 and 2
    SELECT DISTINCT run_id, breakdown AS gid, key, ngram FROM ngram_pairs
),
gc AS (
    SELECT run_id, gid, key, count(*) AS distinct_ngrams FROM d GROUP BY ALL
    UNION ALL
    SELECT run_id, 3, NULL, count(DISTINCT ngram) FROM d WHERE gid = 2 GROUP BY ALL
)
SELECT pc.run_id, CASE pc.gid WHEN 1 THEN 'source_age' WHEN 2 THEN 'prefix_len' ELSE 'all' END AS breakdown,
       CASE pc.gid WHEN 3 THEN 'all'
                   WHEN 2 THEN LEN_LABEL
                   ELSE CASE WHEN pc.key < 0 THEN 'dataset' ELSE CAST(pc.key AS VARCHAR) END END AS bucket,
       pc.prefixes, pc.mean_prefix_len, pc.ngrams, coalesce(gc.distinct_ngrams, 0) AS distinct_ngrams,
       gc.distinct_ngrams / nullif(pc.ngrams, 0) AS distinct_ratio
FROM pc LEFT JOIN gc ON pc.run_id = gc.run_id AND pc.gid = gc.gid AND pc.key IS NOT DISTINCT FROM gc.key
ORDER BY pc.run_id, pc.gid, pc.key
""".replace("LEN_LABEL", _len_label("pc.key"))

_PREFIX_DIVERSITY_HISTORY = """
WITH pc AS (
    SELECT run_id, iteration, CAST(sum(prefixes) AS BIGINT) AS prefixes,
           sum(prefix_len_sum) / sum(prefixes) AS mean_prefix_len,
           sum(source_age * prefixes) FILTER (WHERE source_age >= 0)
               / sum(prefixes) FILTER (WHERE source_age >= 0) AS mean_source_age,
           CAST(sum(ngram_count_sum) AS BIGINT) AS ngrams
    FROM prefix_groups GROUP BY ALL
),
gc AS (SELECT run_id, iteration, sum(distinct_ngrams) AS distinct_ngrams FROM ngram_per_iteration GROUP BY ALL)
SELECT pc.run_id, pc.iteration, pc.prefixes, pc.mean_prefix_len, pc.mean_source_age, pc.ngrams,
       coalesce(gc.distinct_ngrams, 0) AS distinct_ngrams, gc.distinct_ngrams / nullif(pc.ngrams, 0) AS distinct_ratio
FROM pc LEFT JOIN gc USING (run_id, iteration)
ORDER BY pc.run_id, pc.iteration
"""

# Samples are first counted per iteration and key (thousands of rows on a 10M-prefix run, not
# 20M), and only those counts are joined with the iteration's on-policy rate and summed up: the
# join and the four breakdowns over every sample took 12 s and 1.9 GB there (BENCHMARKS.md).
_SEEDED_SOLVE_RATE = f"""
WITH c AS (  -- rollout_groups: the samples already counted per iteration and key (store/rollups.py)
    SELECT run_id, iteration, kind, source_step, source_age, len_lo,
           CAST(sum(samples) AS BIGINT) AS n, sum(solved) AS solved, sum(reward) AS reward
    FROM rollout_groups GROUP BY ALL
),
onp AS (  -- on-policy solve rate per iteration: the baseline, weighted like each group's samples
    SELECT run_id, iteration, sum(solved) / sum(n) AS on_rate FROM c WHERE kind = 'on_policy' GROUP BY ALL
),
cj AS (
    SELECT c.*, onp.on_rate * c.n AS on_sum, CASE WHEN onp.on_rate IS NULL THEN 0 ELSE c.n END AS on_n
    FROM c LEFT JOIN onp USING (run_id, iteration)
),
s AS (
    SELECT run_id, kind, 'all' AS breakdown, NULL::BIGINT AS key, sum(n) AS samples, sum(solved) / sum(n) AS solve_rate,
           sum(reward) / sum(n) AS mean_reward, sum(on_sum) / nullif(sum(on_n), 0) AS on_policy_solve_rate
    FROM cj GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_step', source_step, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'source_age', source_age, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
    UNION ALL
    SELECT run_id, kind, 'prefix_len', len_lo, sum(n), sum(solved) / sum(n), sum(reward) / sum(n),
           sum(on_sum) / nullif(sum(on_n), 0)
    FROM cj WHERE kind <> 'on_policy' GROUP BY ALL
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

_POPS = ("on_policy", "continuation", "prefix", "all")


def _pop_cols(metric: str, alias: str) -> str:
    return ",\n       ".join(f"max(value) FILTER (WHERE name = 'actor/{metric}/{p}') AS {alias}_{p}" for p in _POPS)


_ENTROPY_ACCURACY = f"""
SELECT run_id, iteration,
       {_pop_cols("entropy", "entropy")},
       {_pop_cols("effective_entropy", "eff_entropy")},
       max(value) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS accuracy,
       map_from_entries(
           list({{'k': TRY_CAST(regexp_extract(name, '@([0-9]+)$', 1) AS INTEGER), 'v': value}}
                ORDER BY TRY_CAST(regexp_extract(name, '@([0-9]+)$', 1) AS INTEGER))
           FILTER (WHERE stage = 'evaluate' AND starts_with(name, 'eval/pass@'))
       ) AS pass_at_k
FROM metrics
WHERE starts_with(name, 'actor/entropy/') OR starts_with(name, 'actor/effective_entropy/')
   OR (stage = 'evaluate' AND (name = 'eval/accuracy' OR starts_with(name, 'eval/pass@')))
GROUP BY run_id, iteration
ORDER BY run_id, iteration
"""

_CLIP_FRACTION = """
WITH m AS (
    SELECT run_id, iteration, split_part(name, '/', 2) AS metric, split_part(name, '/', 3) AS population, value
    FROM metrics
    WHERE starts_with(name, 'actor/pg_clipfrac/') OR starts_with(name, 'actor/pg_clipfrac_adv/')
       OR starts_with(name, 'actor/ratio_above_frac/') OR starts_with(name, 'actor/ratio_max/')
)
SELECT run_id, iteration, population,
       max(value) FILTER (WHERE metric = 'pg_clipfrac') AS clipfrac,
       max(value) FILTER (WHERE metric = 'pg_clipfrac_adv') AS clipfrac_adv,
       max(value) FILTER (WHERE metric = 'ratio_above_frac') AS ratio_above_frac,
       max(value) FILTER (WHERE metric = 'ratio_max') AS ratio_max
FROM m
GROUP BY run_id, iteration, population
ORDER BY run_id,
         CASE population WHEN 'on_policy' THEN 0 WHEN 'continuation' THEN 1 WHEN 'prefix' THEN 2
                         WHEN 'all' THEN 3 ELSE 4 END,
         population, iteration
"""

_RUNS = """
WITH m AS (
    SELECT run_id,
           count(DISTINCT iteration) FILTER (WHERE stage = 'update') AS iterations_done,
           max(iteration) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS last_eval_step,
           arg_max(value, iteration) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS last_accuracy,
           max(value) FILTER (WHERE stage = 'evaluate' AND name = 'eval/accuracy') AS best_accuracy
    FROM metrics GROUP BY run_id
),
-- m's run ids are the metrics' own: one scan of the metrics, not two
ids AS (SELECT run_id FROM configs UNION SELECT run_id FROM m),
-- row counts from the files' footers (corpus_files), not by scanning 10M rows of the corpus
p AS (SELECT run_id, CAST(sum(rows) AS BIGINT) AS prefixes FROM corpus_files WHERE view = 'prefixes' GROUP BY run_id),
r AS (SELECT run_id, CAST(sum(rows) AS BIGINT) AS rollouts FROM corpus_files WHERE view = 'rollouts' GROUP BY run_id),
c AS (SELECT run_id, count(*) AS pool_checkpoints FROM checkpoints GROUP BY run_id)
SELECT ids.run_id, configs.algorithm, configs.iterations,
       coalesce(m.iterations_done, 0) AS iterations_done,
       m.last_eval_step, m.last_accuracy, m.best_accuracy,
       coalesce(p.prefixes, 0) AS prefixes, coalesce(r.rollouts, 0) AS rollouts,
       coalesce(c.pool_checkpoints, 0) AS pool_checkpoints,
       configs.created_at
FROM ids
LEFT JOIN configs USING (run_id) LEFT JOIN m USING (run_id) LEFT JOIN p USING (run_id)
LEFT JOIN r USING (run_id) LEFT JOIN c USING (run_id)
ORDER BY configs.created_at NULLS LAST, ids.run_id
"""

NAMED_QUERIES: dict[str, tuple[str, str]] = {
    "runs": (
        "One row per run: algorithm, iterations configured / done, last and best held-out accuracy "
        "(eval/accuracy at the last evaluated policy step), rows in the corpus and rollouts, pool size, created.",
        _RUNS,
    ),
    "prefix_diversity": (
        "Prefix corpus diversity: distinct character 3-grams / all 3-grams of prefix_text, by seed "
        "checkpoint age (source_age, 'dataset' for data-set guidance), by prefix length bucket "
        "(tokens: 0, 1, 2-3, 4-7, ...) and over the whole run ('all').",
        _PREFIX_DIVERSITY,
    ),
    "prefix_diversity_history": (
        "Prefix corpus diversity over the run's history: per iteration, distinct character 3-grams / "
        "all 3-grams of the prefixes its seeds stage wrote, with their mean length and mean seed "
        "checkpoint age (data-set guidance left out of the mean).",
        _PREFIX_DIVERSITY_HISTORY,
    ),
    "seeded_solve_rate": (
        "Solve rate (status = 'ok') and mean reward of seeded and offpolicy_full samples by seed "
        "source step, source age (iteration - source_step) and prefix length bucket, next to the "
        "on-policy solve rate of the same iterations (weighted like the group's samples) and the difference.",
        _SEEDED_SOLVE_RATE,
    ),
    "entropy_accuracy": (
        "Per run and iteration k (= policy step θ_k): actor/entropy and actor/effective_entropy by "
        "population, measured by update k on θ_k, next to eval/accuracy and eval/pass@k of θ_k "
        "(pass_at_k maps k to pass@k).",
        _ENTROPY_ACCURACY,
    ),
    "clip_fraction": (
        "Gradient lost to clipping by population over iterations: actor/pg_clipfrac (tokens), "
        "actor/pg_clipfrac_adv (|A|-weighted), share of ratios above 1+ε_high, max ratio.",
        _CLIP_FRACTION,
    ),
}
