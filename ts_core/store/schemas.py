"""Arrow schemas of the Parquet contracts (docs/algorithm.md §6): data sets, the prefix corpus, rollouts.

Widths: token ids and per-sample lengths are int32 (vocabularies and sequence lengths fit easily,
and they are the bulk of the bytes); iteration / step counters are int64 (cheap, never overflow,
match Python ints); log-probs, rewards and advantages are float32 (what the trainer computes in,
and half the size of float64). A field marked `nullable=False` must be set on every row;
`thinking_seeds.store.parquet_io.write_table_atomic(table, path, schema=...)` checks it.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "DATASET_OPTIONAL_COLUMNS",
    "DATASET_SCHEMA",
    "DERIVED_PREFIX_SQL",
    "NGRAM",
    "NGRAM_COUNTS_SCHEMA",
    "PER_PROMPT_SCHEMA",
    "PREFIX_DERIVED_FIELDS",
    "PREFIX_FILE_SCHEMA",
    "PREFIX_SCHEMA",
    "ROLLOUT_KINDS",
    "ROLLOUT_OPTIONAL_COLUMNS",
    "ROLLOUT_SCHEMA",
    "len_bucket_sql",
    "ngram_codes",
    "ngram_counts_sql",
    "with_derived_prefix_columns",
]

MESSAGE_TYPE = pa.struct([("role", pa.string()), ("content", pa.string())])

# verl's RL data set layout, plus our `rg_entry` and LUFFY-style `target`.
DATASET_SCHEMA = pa.schema(
    [
        # which task / checker the row belongs to, e.g. 'chain_sum' (a reasoning-gym name when
        # the row comes from reasoning-gym, so its own checker can be looked up by it)
        pa.field("data_source", pa.string(), nullable=False),
        # the chat prompt: [{role: 'user', content: ...}, ...]
        pa.field("prompt", pa.list_(MESSAGE_TYPE), nullable=False),
        # verl's task family label, e.g. 'math'
        pa.field("ability", pa.string()),
        # style 'rule' = verified by a rule-based checker against ground_truth (the answer text)
        pa.field(
            "reward_model",
            pa.struct([("style", pa.string()), ("ground_truth", pa.string())]),
            nullable=False,
        ),
        # split name and row index within the split; rg_entry = the reasoning-gym entry as JSON
        # (question, answer, metadata), null for rows that do not come from reasoning-gym
        pa.field(
            "extra_info",
            pa.struct([("split", pa.string()), ("index", pa.int64()), ("rg_entry", pa.string())]),
        ),
        # a worked solution (off-policy guidance for LUFFY-style methods); null when unknown
        pa.field("target", pa.string()),
    ]
)

# Columns a user's verl Parquet file may lack: load_dataset() fills them with None.
DATASET_OPTIONAL_COLUMNS: tuple[str, ...] = ("ability", "extra_info", "target")

# One row per seed (a cut draft written by a historical checkpoint), docs/algorithm.md §2 step 2.
PREFIX_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        # the training iteration that generated this seed
        pa.field("iteration", pa.int64(), nullable=False),
        # Prompt.prompt_id of the prompt the draft answers
        pa.field("prompt_id", pa.string(), nullable=False),
        # unique id of the seed within the run, so rollouts and reuse can refer to it
        pa.field("seed_id", pa.string(), nullable=False),
        # training step of the historical checkpoint h that wrote the draft
        pa.field("source_step", pa.int64(), nullable=False),
        # how many steps older than the current policy h was when the draft was written
        pa.field("source_age", pa.int64(), nullable=False),
        # lambda: the prefix keeps floor(lambda * draft_len) tokens (or the line-boundary cut)
        pa.field("prefix_ratio", pa.float32(), nullable=False),
        # the prefix's token ids (the draft's first tokens), length L
        pa.field("prefix_token_ids", pa.list_(pa.int32()), nullable=False),
        # log pi_h(z_t) for each prefix token, length L (the denominator of prefix ratios)
        pa.field("behaviour_logprobs", pa.list_(pa.float32()), nullable=False),
        # the decoded prefix, for inspection and n-gram diversity queries
        pa.field("prefix_text", pa.string(), nullable=False),
        # tokens sampled for the draft: the whole uncut draft, or with prefix.ratio_of=budget up to its cut
        pa.field("draft_len", pa.int32(), nullable=False),
        # reward of the whole draft when it was scored; null when it was not
        pa.field("draft_reward", pa.float32()),
    ]
)

# Per-row values derived from the columns above, written once by the seeds stage beside them so
# that queries over large corpora need not recompute them (same schema version: files written
# before they existed lack them, and `ts sql` computes them for those files). The pipeline itself
# never reads them (pipeline/rows.py reads PREFIX_SCHEMA's columns only), so they cannot change what
# a run computes. BENCHMARKS.md ("SQL over the prefix corpus") has the measured effect of each.
PREFIX_DERIVED_FIELDS: tuple[pa.Field, ...] = (
    # len(prefix_token_ids): without it a query on lengths reads (and decodes) every token id
    pa.field("prefix_len", pa.int32(), nullable=False),
    # the character 3-grams of prefix_text: how many (repeats counted, max(len - 2, 0)) ...
    pa.field("prefix_ngram_count", pa.int32(), nullable=False),
    # ... and which, as the sorted distinct codes of ngram_codes(): the diversity queries count
    # distinct integers instead of cutting and hashing every 3-gram string of the corpus again
    pa.field("prefix_ngrams", pa.list_(pa.int64()), nullable=False),
)

# What a prefixes.parquet written now holds: PREFIX_SCHEMA, then the derived columns.
PREFIX_FILE_SCHEMA = pa.schema(list(PREFIX_SCHEMA) + list(PREFIX_DERIVED_FIELDS))

NGRAM = 3  # characters per n-gram of the diversity queries
_CODE_BITS = 21  # a Unicode code point is < 2**21, so three of them pack exactly into an int64


def ngram_codes(text: str) -> list[int]:
    """The distinct character 3-grams of `text` as sorted integers: (a << 42) | (b << 21) | c for
    the code points a, b, c. Exact (one code per 3-gram, no hashing), so counting distinct codes is
    counting distinct 3-grams; store/sql_views.py computes the same codes in SQL for older files."""
    cps = [ord(ch) for ch in text]
    return sorted(
        {(cps[i] << 2 * _CODE_BITS) | (cps[i + 1] << _CODE_BITS) | cps[i + 2] for i in range(len(cps) - NGRAM + 1)}
    )


# The SQL twins of with_derived_prefix_columns, over PREFIX_SCHEMA's columns: `ts sql` computes the
# derived columns of files written before they existed with these (tests check they agree).
DERIVED_PREFIX_SQL = {
    "prefix_len": "CAST(len(prefix_token_ids) AS INTEGER)",
    "prefix_ngram_count": f"CAST(greatest(length(prefix_text) - {NGRAM - 1}, 0) AS INTEGER)",
    "prefix_ngrams": (  # ngram_codes(prefix_text); string positions are 1-based
        "list_sort(list_distinct(list_transform(range(1, length(prefix_text) - 1), lambda i: "
        "(CAST(unicode(prefix_text[i]) AS BIGINT) << 42) | (CAST(unicode(prefix_text[i + 1]) AS BIGINT) << 21) "
        "| unicode(prefix_text[i + 2]))))"
    ),
}
assert NGRAM == 3 and _CODE_BITS == 21  # the prefix_ngrams SQL spells out three characters of 21 bits


def len_bucket_sql(col: str) -> str:
    """Prefix length bucket (tokens) in SQL: 0, 1, 2-3, 4-7, 8-15, ... (powers of two), as the bucket's
    lower bound. log2(L + 0.5) never lands on an integer, so floor is exact."""
    return f"CASE WHEN {col} <= 0 THEN 0 ELSE CAST(pow(2, floor(log2({col} + 0.5))) AS BIGINT) END"


# The view ngram_counts (store/sql_views.py) and the compacted parts it reads (store/compaction.py):
# the 3-grams of the prefix corpus by (run, iteration, source age, length bucket), each row a 3-gram
# code and how many prefixes of that key hold it. A part stores each key's 3-grams once (4.7x fewer
# rows than the corpus's 3-grams on the benchmark corpus); rows the view reads from prefix files not
# compacted yet are one per prefix and 3-gram (prefixes = 1), so a key's 3-gram may appear in
# several rows: count(DISTINCT ngram) and sum(prefixes) are what to take from it.
NGRAM_COUNTS_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string()),
        pa.field("iteration", pa.int64()),
        pa.field("source_age", pa.int64()),
        pa.field("len_lo", pa.int64()),  # len_bucket_sql(prefix_len)
        pa.field("ngram", pa.int64()),  # ngram_codes()
        pa.field("prefixes", pa.int64()),
    ]
)


def ngram_counts_sql(src: str, dedupe: bool) -> str:
    """SQL of NGRAM_COUNTS_SCHEMA's rows from `src`, a relation with the prefixes view's columns:
    each key's 3-grams once (`dedupe`, for a compacted part) or one row per prefix and 3-gram."""
    rows = (
        f"SELECT run_id, iteration, source_age, {len_bucket_sql('prefix_len')} AS len_lo, "
        f"unnest(prefix_ngrams) AS ngram FROM {src}"
    )
    if dedupe:
        return f"SELECT *, count(*) AS prefixes FROM ({rows}) GROUP BY ALL"
    return f"SELECT *, CAST(1 AS BIGINT) AS prefixes FROM ({rows})"


def with_derived_prefix_columns(table: pa.Table) -> pa.Table:
    """`table` (PREFIX_SCHEMA's columns) with PREFIX_DERIVED_FIELDS appended, computed from it."""
    import pyarrow.compute as pc

    texts = table.column("prefix_text").to_pylist()
    derived = {
        "prefix_len": pc.list_value_length(table.column("prefix_token_ids")).cast(pa.int32()),
        "prefix_ngram_count": pa.array([max(len(t) - NGRAM + 1, 0) for t in texts], pa.int32()),
        "prefix_ngrams": pa.array([ngram_codes(t) for t in texts], pa.list_(pa.int64())),
    }
    for fld in PREFIX_DERIVED_FIELDS:
        table = table.append_column(fld, derived[fld.name])
    return table


ROLLOUT_KINDS: tuple[str, ...] = ("on_policy", "seeded", "offpolicy_full")

# One row per sampled response, docs/algorithm.md §2 steps 3-5.
ROLLOUT_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("iteration", pa.int64(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        # index of the sample within its prompt's group
        pa.field("sample_id", pa.int32(), nullable=False),
        # one of ROLLOUT_KINDS
        pa.field("kind", pa.string(), nullable=False),
        # training step of the checkpoint that wrote the prefix; null for on-policy samples
        pa.field("source_step", pa.int64()),
        # how many of token_ids were written by the historical checkpoint (0 for on-policy,
        # len(token_ids) for offpolicy_full)
        pa.field("prefix_len", pa.int32(), nullable=False),
        # the chat-templated prompt the response answers (the update re-scores prompt + response)
        pa.field("prompt_token_ids", pa.list_(pa.int32()), nullable=False),
        # the whole response: prefix followed by continuation
        pa.field("token_ids", pa.list_(pa.int32()), nullable=False),
        # log pi_theta_old(token) under the rollout policy, same length as token_ids
        pa.field("old_logprobs", pa.list_(pa.float32()), nullable=False),
        # log pi_h(token) under the prefix's source policy, same length as token_ids, 0 past the
        # prefix (and everywhere for on-policy samples)
        pa.field("behaviour_logprobs", pa.list_(pa.float32()), nullable=False),
        pa.field("response_text", pa.string(), nullable=False),
        # the extracted final answer (last \boxed{...}); null when there is none
        pa.field("answer", pa.string()),
        # verifier status: ok | wrong | no_answer | timeout | error (thinking_seeds.data.rewards.STATUSES),
        # or 'pending' in rows written before the verify stage
        pa.field("status", pa.string(), nullable=False),
        # null until the verify stage has scored the response (status 'pending' before that)
        pa.field("reward", pa.float32()),
        # group-relative advantage (filled by the update stage; null before it runs)
        pa.field("advantage", pa.float32()),
        # the response hit rollout.max_new_tokens without ending (reward.overlong); null in rows
        # written before the column existed (ROLLOUT_OPTIONAL_COLUMNS: such files still read)
        pa.field("truncated", pa.bool_()),
        # the step k' of the policy θ_k' whose engine wrote the row's generated tokens: the iteration itself,
        # or k - pipeline.max_staleness (bounded staleness); null for a whole off-policy trajectory, and in
        # rows written before the column existed
        pa.field("policy_version", pa.int64()),
    ]
)
# Columns added to ROLLOUT_SCHEMA after runs existed: a file without them reads them as null.
ROLLOUT_OPTIONAL_COLUMNS: tuple[str, ...] = ("truncated", "policy_version")

# One row per (prompt, mode) of an evaluation (evals/<stage>/step_XXXXXX.parquet): the raw material
# of pass@k on a subset of prompts (the comparison's hard subset) and of the explorable space.
PER_PROMPT_SCHEMA = pa.schema(
    [
        pa.field("step", pa.int64(), nullable=False),
        pa.field("mode", pa.string(), nullable=False),
        pa.field("prompt_id", pa.string(), nullable=False),
        pa.field("n", pa.int64(), nullable=False),
        pa.field("correct", pa.int64(), nullable=False),
        pa.field("distinct_labels", pa.int64()),
        pa.field("label_entropy", pa.float64()),
    ]
)
