"""Does the seed decide the outcome? Statistics of a run directory's rollouts and prefix corpus (issue #26).

Thinking Seeds can only act where the continuation matters. On +/- countdown it did not: seeded samples
succeeded as often as the full drafts they were cut from, after a wrong draft's prefix almost no
continuation succeeded, and most of a response's entropy sat in the first tokens (the span a seed
takes). This module measures the same three things on any run, so the 24 game (or any task) can be
checked for the opposite:

    python -m thinking_seeds.experiments.seed_decides runs/<run_id> [--first-tokens 16] [--json]

- **seeded vs draft**: over the seeded samples (a non-empty prefix) whose seed is found in the corpus
  (joined on prompt, source checkpoint and prefix tokens), their mean reward next to the mean reward of
  the full drafts those seeds were cut from. Equal numbers: the seed decides.
- **after a wrong draft**: the seeded samples' success when their draft was wrong (reward < 1) and
  when it was right. For game24 the prefix itself is also classified (`game24.partial_state`): success
  after a *dead* prefix (24 no longer reachable: no continuation can be right, so it must be 0 when the
  verifier and the classifier agree), after a live one and after an *invalid* one (a line that is
  no valid step: wrong arithmetic or a number not available), also by the number of steps the prefix
  holds (after one step the continuation faces a 3-number subproblem; after two, one operation).
  With `prefix.ratio_of=budget` a draft stops at its cut and has no reward: only the prefix-based
  statistics exist then.
- **entropy in the first N tokens**: over on-policy samples, the share of the response's surprisal
  (-log pi_old of the sampled tokens, whose mean is a sample estimate of the entropy; per-token
  entropies are not stored) that falls in its first N tokens, as a ratio of sums and as the mean of
  the per-response shares, beside N / mean length (the share if surprisal were spread evenly).

Reads only what the run wrote (Parquet files and config.yaml); never imports prefect.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from thinking_seeds.yaml_limits import read_bounded

__all__ = ["STATS_FILE", "main", "run_stats", "seed_decides_section", "seed_stats"]

# A finished run's statistics, kept beside its archived result files (archive.py): the rollouts they
# are computed from are not archived, so a report written from the archive reads this file instead.
STATS_FILE = "seed_decides.json"


def _rows(root: Path, pattern: str, columns: list[str]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for p in sorted(root.glob(pattern)):
        out.extend(pq.read_table(p, columns=columns).to_pylist())
    return out


def _mean(xs: list[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _numbers_by_prompt(root: Path) -> dict[str, list[int]]:
    from thinking_seeds.data.sources import load_dataset

    out: dict[str, list[int]] = {}
    for p in sorted((root / "data").glob("*.parquet")):
        for prompt in load_dataset(p):
            if prompt.rg_entry:
                out[prompt.prompt_id] = [int(x) for x in json.loads(prompt.rg_entry)["metadata"]["numbers"]]
    return out


def seed_stats(run_dir: str | Path, first_tokens: int = 16) -> dict[str, Any]:
    """The three statistics (module docstring) of one run directory, as a flat dict."""
    root = Path(run_dir)
    if not (root / "rollouts").is_dir():
        raise ValueError(f"{root}: no rollouts/ folder; pass a run directory (runs/<run_id>)")
    rollouts = _rows(
        root,
        "rollouts/iteration=*/rollouts.parquet",
        ["iteration", "prompt_id", "kind", "source_step", "prefix_len", "token_ids", "old_logprobs", "reward"],
    )
    seeds = _rows(
        root, "corpus/prefixes/iteration=*/prefixes.parquet", ["prompt_id", "source_step", "prefix_token_ids",
        "prefix_text", "draft_reward"]
    )  # fmt: skip
    # The same (prompt, checkpoint, prefix) can come from two drafts: their rewards are averaged.
    by_key: dict[tuple, list[dict]] = defaultdict(list)
    for s in seeds:
        by_key[(s["prompt_id"], s["source_step"], tuple(s["prefix_token_ids"]))].append(s)

    config = read_bounded(root / "config.yaml") if (root / "config.yaml").is_file() else {}  # within YAML limits
    game24 = ((config or {}).get("data") or {}).get("source") == "game24"
    numbers = _numbers_by_prompt(root) if game24 else {}
    if game24:
        from thinking_seeds.data.game24 import partial_state

    scored = [r for r in rollouts if r["reward"] is not None]
    seeded = [r for r in scored if r["kind"] == "seeded" and r["prefix_len"] > 0]
    paired, wrong, right, dead, live, invalid, unmatched, unscored = [], [], [], [], [], [], 0, 0
    # by the number of valid steps the prefix holds: after one step the continuation faces a 3-number
    # subproblem (where it can decide), after two only a single operation is left
    by_steps: dict[int, dict[str, list[float]]] = defaultdict(lambda: {"live": [], "dead": [], "invalid": []})
    for r in seeded:
        match = by_key.get((r["prompt_id"], r["source_step"], tuple(r["token_ids"][: r["prefix_len"]])))
        if not match:
            unmatched += 1
            continue
        # A dead prefix is a property of the prefix alone, so it is read even when the draft has no
        # reward (prefix.ratio_of=budget stops a draft at its cut: it is never finished nor scored).
        if game24 and r["prompt_id"] in numbers:
            state = partial_state(numbers[r["prompt_id"]], match[0]["prefix_text"])
            kind = "live" if state.reachable else ("dead" if state.steps_ok else "invalid")
            {"live": live, "dead": dead, "invalid": invalid}[kind].append(r["reward"])
            by_steps[len(state.steps)][kind].append(r["reward"])
        drafts = [s["draft_reward"] for s in match if s["draft_reward"] is not None]
        if not drafts:
            unscored += 1
            continue
        draft = sum(drafts) / len(drafts)
        paired.append((r["reward"], draft))
        (right if draft >= 1.0 else wrong).append(r["reward"])

    on_policy = [r for r in scored if r["kind"] == "on_policy" and r["token_ids"]]
    head = [-sum(r["old_logprobs"][:first_tokens]) for r in on_policy]
    total = [-sum(r["old_logprobs"]) for r in on_policy]
    shares = [h / t for h, t in zip(head, total, strict=True) if t > 0]
    mean_len = _mean([float(len(r["token_ids"])) for r in on_policy])
    return _group_stats(scored) | {
        "on_policy_samples": len(on_policy),
        "on_policy_success": _mean([r["reward"] for r in on_policy]),
        "seeded_samples": len(seeded),
        "seeded_unmatched": unmatched,
        "seeded_unscored_draft": unscored,
        "seeded_success": _mean([a for a, _ in paired]),
        "draft_success": _mean([d for _, d in paired]),
        "seeded_after_wrong_draft": _mean(wrong),
        "seeded_after_wrong_draft_n": len(wrong),
        "seeded_after_right_draft": _mean(right),
        "seeded_after_right_draft_n": len(right),
        "seeded_after_dead_prefix": _mean(dead) if game24 else None,
        "seeded_after_dead_prefix_n": len(dead) if game24 else None,
        "seeded_after_live_prefix": _mean(live) if game24 else None,
        "seeded_after_live_prefix_n": len(live) if game24 else None,
        "seeded_after_invalid_prefix": _mean(invalid) if game24 else None,
        "seeded_after_invalid_prefix_n": len(invalid) if game24 else None,
        "by_prefix_steps": {  # keyed by the step count as text: the statistics round-trip through JSON
            str(k): {"n": sum(map(len, v.values()))}
            | {f"{kind}_share": len(xs) / sum(map(len, v.values())) for kind, xs in v.items()}
            | {f"success_after_{kind}": _mean(xs) for kind, xs in v.items()}
            for k, v in sorted(by_steps.items())
        },
        "first_tokens": first_tokens,
        "entropy_share_first_tokens": sum(head) / sum(total) if sum(total) > 0 else None,
        "entropy_share_first_tokens_mean": _mean(shares),
        "mean_response_tokens": mean_len,
        "even_share": min(1.0, first_tokens / mean_len) if mean_len else None,
    }


def _group_stats(scored: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the gradient can come from: the share of groups (iteration, prompt) whose rewards are mixed
    (some right, some wrong; an all-equal group has zero advantage), over all groups and over those
    holding a seeded sample; and the share of response tokens the policy did not sample itself
    (seeds' prefixes and whole off-policy drafts), the quantity a sequence-level mixing arm is matched on."""
    groups: dict[tuple, list[dict[str, Any]]] = defaultdict(list)
    for r in scored:
        groups[(r["iteration"], r["prompt_id"])].append(r)

    def mixed(g: list[dict[str, Any]]) -> bool:
        return len({x["reward"] for x in g}) > 1

    with_seed = [g for g in groups.values() if any(x["kind"] == "seeded" and x["prefix_len"] > 0 for x in g)]
    tokens = sum(len(r["token_ids"]) for r in scored)
    off = sum(len(r["token_ids"]) if r["kind"] == "offpolicy_full" else r["prefix_len"] for r in scored)
    return {
        "groups": len(groups),
        "mixed_group_share": _mean([float(mixed(g)) for g in groups.values()]),
        "seeded_groups": len(with_seed),
        "seeded_mixed_group_share": _mean([float(mixed(g)) for g in with_seed]),
        "off_policy_token_share": off / tokens if tokens else None,
    }


def run_stats(run_root: str | Path, first_tokens: int = 16) -> dict[str, Any] | None:
    """A run's statistics: its kept STATS_FILE, else computed from its rollouts; None for a run that
    drew no seeds (no prefix corpus) or whose rollouts are gone."""
    root = Path(run_root)
    if (root / STATS_FILE).is_file():
        stats = json.loads((root / STATS_FILE).read_text())
    elif any(root.glob("corpus/prefixes/iteration=*/prefixes.parquet")) and (root / "rollouts").is_dir():
        stats = seed_stats(root, first_tokens)
    else:
        return None
    return stats if stats["seeded_samples"] else None  # e.g. seq_mix: whole drafts, nothing continued


def seed_decides_section(variants: dict[str, dict[str, Path]]) -> list[str]:
    """The report's tables of these statistics: per variant ({variant: {row label: run root}}), one row per
    seeded run and their mean (Markdown lines; none without a seeded run)."""
    tables = {}
    for variant, runs in variants.items():
        stats = {name: st for name, root in runs.items() if (st := run_stats(root)) is not None}
        if stats:
            tables[variant] = stats
    if not tables:
        return []
    first = next(iter(next(iter(tables.values())).values()))["first_tokens"]
    md = [
        "## Does the seed decide? (per seeded run)",
        "",
        "From each run's rollouts and prefix corpus (`python -m thinking_seeds.experiments.seed_decides`): "
        "seeded samples' success next to the success of the drafts they were cut from (a draft stopped at its "
        "cut, `prefix.ratio_of=budget`, has none), success after a wrong draft, the share of live / dead / "
        "invalid prefixes (game24: 24 still reachable, unreachable, or a line that is no valid step) and the "
        f"success after each, and the share of a response's surprisal in its first {first} tokens. Equal "
        "seeded and draft success, with almost no success after a wrong draft, mean the seed decides the outcome.",
        "",
    ]
    for variant, stats in tables.items():
        md += [f"### {variant}", "", markdown_table(stats), ""]
    return md


def _fmt(x: Any) -> str:
    return "n/a" if x is None else (f"{x:.3f}" if isinstance(x, float) else str(x))


def _share(s: dict[str, Any], kind: str) -> float | None:
    n = s.get(f"seeded_after_{kind}_prefix_n")
    total = sum(s.get(f"seeded_after_{k}_prefix_n") or 0 for k in ("dead", "live", "invalid"))
    return n / total if n is not None and total else None


# the columns of the several-run table: (header, statistic of one run)
COLUMNS: list[tuple[str, Any]] = [
    ("on-policy success", lambda s: s["on_policy_success"]),
    ("seeded samples", lambda s: s["seeded_samples"]),
    ("seeded success", lambda s: s["seeded_success"]),
    ("its drafts' success", lambda s: s["draft_success"]),
    ("after a wrong draft", lambda s: s["seeded_after_wrong_draft"]),
    ("live / dead / invalid prefixes", lambda s: tuple(_share(s, k) for k in ("live", "dead", "invalid"))),
    (
        "success after live / dead / invalid",
        lambda s: tuple(s.get(f"seeded_after_{k}_prefix") for k in ("live", "dead", "invalid")),
    ),
    ("entropy share, first N tokens", lambda s: s["entropy_share_first_tokens"]),
    # statistics added after game24-main's archives were written: absent (n/a) there
    ("mixed groups: all / seeded", lambda s: (s.get("mixed_group_share"), s.get("seeded_mixed_group_share"))),
    ("off-policy token share", lambda s: s.get("off_policy_token_share")),
]


def _cell(x: Any) -> str:
    return " / ".join(map(_fmt, x)) if isinstance(x, tuple) else _fmt(x)


def _mean_cell(xs: list[Any]) -> Any:
    if xs and isinstance(xs[0], tuple):
        return tuple(_mean_cell([x[i] for x in xs]) for i in range(len(xs[0])))
    vals = [float(x) for x in xs if x is not None]
    return sum(vals) / len(vals) if vals else None


def markdown_table(stats: dict[str, dict[str, Any]]) -> str:
    """One row per run and the mean over the runs (of each run's statistic: every run weighs the same)."""
    md = ["| run | " + " | ".join(h for h, _ in COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for run, s in stats.items():
        md.append(f"| {run} | " + " | ".join(_cell(f(s)) for _, f in COLUMNS) + " |")
    means = [_cell(_mean_cell([f(s) for s in stats.values()])) for _, f in COLUMNS]
    md.append(f"| mean of {len(stats)} runs | " + " | ".join(means) + " |")
    return "\n".join(md)


def _name(path: Path) -> str:
    return path.stem if path.suffix == ".json" else path.name


def _load(path: Path, first_tokens: int) -> dict[str, Any]:
    """A run directory's statistics, or those saved from one (`--json` of a single run)."""
    if path.suffix != ".json":
        return seed_stats(path, first_tokens)
    try:
        stats = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file of one run's statistics ({e})") from None
    if not isinstance(stats, dict) or "on_policy_success" not in stats:
        raise ValueError(f"{path}: not one run's statistics; save `seed_decides RUN_DIR --json` for a single run")
    return stats


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "run_dir",
        type=Path,
        nargs="+",
        help="one run directory, or several: then a Markdown table; also a run's `--json` output saved as "
        "NAME.json (run folders do not outlive a session, their statistics do)",
    )
    ap.add_argument("--first-tokens", type=int, default=16, help="N: the span whose entropy share is reported")
    ap.add_argument("--json", action="store_true", help="print the statistics as JSON (one object per run)")
    a = ap.parse_args(argv)
    try:
        stats = {_name(d): _load(d, a.first_tokens) for d in a.run_dir}
    except ValueError as e:
        print(f"seed_decides: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    if a.json:
        print(json.dumps(stats if len(stats) > 1 else next(iter(stats.values())), indent=2))
    elif len(stats) > 1:
        print(markdown_table(stats))
    else:
        _print_one(next(iter(stats.values())))


def _print_one(s: dict[str, Any]) -> None:
    print(f"on-policy success            {_fmt(s['on_policy_success'])}  (n={s['on_policy_samples']})")
    print(
        f"seeded success / its drafts  {_fmt(s['seeded_success'])} / {_fmt(s['draft_success'])}  "
        f"(n={s['seeded_samples'] - s['seeded_unmatched'] - s['seeded_unscored_draft']}, "
        f"{s['seeded_unmatched']} seeds not in the corpus, {s['seeded_unscored_draft']} whose draft stopped at "
        "its cut and has no reward: prefix.ratio_of=budget)"
    )
    print(
        f"after a wrong / right draft  {_fmt(s['seeded_after_wrong_draft'])} (n={s['seeded_after_wrong_draft_n']})"
        f" / {_fmt(s['seeded_after_right_draft'])} (n={s['seeded_after_right_draft_n']})"
    )
    if s["seeded_after_dead_prefix_n"] is not None:
        print(
            f"after a dead / live prefix   {_fmt(s['seeded_after_dead_prefix'])} (n={s['seeded_after_dead_prefix_n']})"
            f" / {_fmt(s['seeded_after_live_prefix'])} (n={s['seeded_after_live_prefix_n']})"
        )
        print(
            f"after an invalid step         {_fmt(s['seeded_after_invalid_prefix'])} "
            f"(n={s['seeded_after_invalid_prefix_n']}; a line that is no valid step: wrong arithmetic, a number "
            "not available)"
        )
        print("by the valid steps before the continuation (share of seeds; success after it):")
        for k, b in s["by_prefix_steps"].items():
            print(
                f"  {k} step(s), n={b['n']:<6} "
                + ", ".join(
                    f"{kind} {_fmt(b[f'{kind}_share'])} ({_fmt(b[f'success_after_{kind}'])})"
                    for kind in ("live", "dead", "invalid")
                )  # fmt: skip
            )
    print(
        f"entropy in first {s['first_tokens']} tokens   {_fmt(s['entropy_share_first_tokens'])} of the total "
        f"(mean per response {_fmt(s['entropy_share_first_tokens_mean'])}; even spread "
        f"{_fmt(s['even_share'])} at {_fmt(s['mean_response_tokens'])} tokens)"
    )


if __name__ == "__main__":
    main()
