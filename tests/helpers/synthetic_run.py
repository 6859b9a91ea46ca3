"""A hand-made run directory written with the real contracts (thinking_seeds.store.schemas, RunDir.write_metrics),
small enough that every number a query or report shows can be checked by hand.

Used by unit/test_sql.py, unit/test_report.py, unit/test_cli.py and e2e/test_faults_sql.py.
Expected values are spelled out in those tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa

from thinking_seeds.config import load_config, save_config
from thinking_seeds.store.parquet_io import write_table_atomic
from thinking_seeds.store.run_dir import RunDir
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA

POPS = ("on_policy", "continuation", "prefix", "all")

# (iteration, source_step, prefix_text); token length = len(text) (a character tokenizer)
PREFIXES = [
    (1, 0, "aaaa"),
    (1, 0, "abcd"),
    (2, 0, "xyz"),
    (2, 0, "ab"),
    (2, 1, "abcab"),
    (2, 1, ""),
]

# (iteration, kind, source_step, prefix_len, reward, status)
ROLLOUTS = [
    (1, "on_policy", None, 0, 1.0, "ok"),
    (1, "on_policy", None, 0, 0.0, "wrong"),
    (1, "on_policy", None, 0, 0.0, "wrong"),
    (1, "on_policy", None, 0, 0.0, "no_answer"),
    (1, "seeded", 0, 4, 1.0, "ok"),
    (1, "seeded", 0, 4, 0.0, "wrong"),
    (2, "on_policy", None, 0, 1.0, "ok"),
    (2, "on_policy", None, 0, 1.0, "ok"),
    (2, "on_policy", None, 0, 0.0, "wrong"),
    (2, "on_policy", None, 0, 0.0, "wrong"),
    (2, "seeded", 0, 3, 1.0, "ok"),
    (2, "seeded", 0, 3, 0.5, "wrong"),  # partial credit: counts in mean_reward, not in solve_rate
    (2, "seeded", 1, 5, 0.0, "wrong"),
    (2, "seeded", 1, 5, 1.0, "ok"),
    (2, "offpolicy_full", 1, 10, 1.0, "ok"),
]

ITERATIONS = 3
EVAL = {
    0: {
        "eval/accuracy": 0.2,
        "eval/pass@1": 0.2,
        "eval/pass@2": 0.3,
        "eval/pass@16": 0.6,
        "eval/mean_response_len": 30.0,
    },
    3: {
        "eval/accuracy": 0.35,
        "eval/pass@1": 0.35,
        "eval/pass@2": 0.45,
        "eval/pass@16": 0.62,
        "eval/mean_response_len": 28.0,
    },
}


def entropy(k: int, pop: str) -> float:
    return 2.0 - 0.1 * k - 0.01 * POPS.index(pop)


def clipfrac(k: int, pop: str) -> float:
    return 0.01 * (k + 1) * (POPS.index(pop) + 1)


def prefix_rows(run_id: str) -> list[dict]:
    rows = []
    for j, (k, step, text) in enumerate(PREFIXES):
        L = len(text)
        rows.append(
            {
                "run_id": run_id,
                "iteration": k,
                "prompt_id": f"p{j}",
                "seed_id": f"{k}-p{j}-0",
                "source_step": step,
                "source_age": k - step,
                "prefix_ratio": 0.5,
                "prefix_token_ids": list(range(L)),
                "behaviour_logprobs": [-1.0] * L,
                "prefix_text": text,
                "draft_len": 2 * L,
                "draft_reward": None,
            }
        )
    return rows


def rollout_rows(run_id: str) -> list[dict]:
    rows = []
    for j, (k, kind, step, L, reward, status) in enumerate(ROLLOUTS):
        n = max(L, 3)
        rows.append(
            {
                "run_id": run_id,
                "iteration": k,
                "prompt_id": "q",
                "sample_id": j,
                "kind": kind,
                "source_step": step,
                "prefix_len": L,
                "prompt_token_ids": [1, 2],
                "token_ids": list(range(n)),
                "old_logprobs": [-0.5] * n,
                "behaviour_logprobs": [0.0] * n,
                "response_text": "x",
                "answer": "1",
                "status": status,
                "reward": reward,
                "advantage": 0.0,
            }
        )
    return rows


def make_run(base: Path, run_id: str = "syn", algorithm: str = "thinking_seeds") -> RunDir:
    run = RunDir.for_run(run_id, base)
    run.root.mkdir(parents=True, exist_ok=True)
    save_config(load_config("tiny", [f"algorithm={algorithm}", f"iterations={ITERATIONS}"]), run.config_path)

    pre = prefix_rows(run_id)
    for k in sorted({r["iteration"] for r in pre}):
        write_table_atomic(
            pa.Table.from_pylist([r for r in pre if r["iteration"] == k], schema=PREFIX_SCHEMA),
            run.prefixes(k),
            schema=PREFIX_SCHEMA,
        )
    ro = rollout_rows(run_id)
    for k in sorted({r["iteration"] for r in ro}):
        part = pa.Table.from_pylist([r for r in ro if r["iteration"] == k], schema=ROLLOUT_SCHEMA)
        write_table_atomic(part, run.rollouts(k), schema=ROLLOUT_SCHEMA)
        write_table_atomic(part, run.generated(k), schema=ROLLOUT_SCHEMA)  # must not be counted twice

    for k in range(ITERATIONS):
        m = {"actor/pg_loss": 0.1, "actor/grad_norm": 1.0}
        for p in POPS:
            m[f"actor/entropy/{p}"] = entropy(k, p)
            m[f"actor/effective_entropy/{p}"] = entropy(k, p) - 0.05
            m[f"actor/pg_clipfrac/{p}"] = clipfrac(k, p)
            m[f"actor/pg_clipfrac_adv/{p}"] = clipfrac(k, p) / 2
            m[f"actor/ratio_above_frac/{p}"] = 0.001
            m[f"actor/ratio_max/{p}"] = 1.5
        run.write_metrics(k, "update", m)
        run.write_metrics(k, "verify", {"reward/mean": 0.4, "verify/status_ok": 3.0})
    for step, m in EVAL.items():
        run.write_metrics(step, "evaluate", m)

    for step in (0, 1):
        d = run.pool_root / f"step_{step:06d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "manifest.json").write_text(
            json.dumps(
                {
                    "step": step,
                    "created_at": f"2026-01-0{step + 1}T00:00:00+00:00",
                    "param_count": 1234,
                    "sha256": {},
                    "extra": {},
                }
            )
        )
    return run


def snapshot_files(root: Path) -> dict[str, tuple[int, bytes]]:
    """{relative path: (mtime_ns, bytes)} of every file under root: to prove nothing changed."""
    return {
        str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*")) if p.is_file()
    }
