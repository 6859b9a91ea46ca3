"""Does the continuation decide after a seed of exactly s chain steps? A probe of one model (issue #26, item 1).

`seed_decides` reads what an RL run's seeds did, at the cuts the run drew (20-60% of a draft, at a
line): there most seeds already hold the step that decides, so they carry their draft's fate. This
probe asks the question the 24 game was chosen for, under control: cut every draft after exactly `s`
complete step lines (s = 1 leaves a real 3-number subproblem, s = 2 a single operation), continue
each such prefix `continuations` times with the same model, and compare.

    python -m thinking_seeds.studies.step_cut_probe MODEL [--split validation] [--prompts 128] \\
        [--drafts 8] [--continuations 8] [--steps 1,2] [--out probe.json]

For each s it reports, over the drafts that have s complete steps before any answer line:
- **seeded vs draft**: the continuations' mean success next to the success of the drafts they were cut
  from. Equal numbers with "after a wrong draft" near 0 mean the seed decides.
- **after a wrong / a right draft**, and as the reference the same prompts' **own** success rate (the
  prompt's other drafts): after a wrong draft the continuation succeeds between 0 (the seed decides)
  and that rate (the seed carries nothing).
- **after a live / dead / invalid prefix** (`game24.partial_state`: 24 still reachable, unreachable, or
  a line that is no valid step). The checker scores only the boxed expression, so an answer may
  still be right after a dead or invalid prefix (it ignores its own steps); on θ_0 that is rare.
- **live prefixes by outcome**: the share whose `continuations` samples all succeed, all fail, or are
  mixed: mixed means the continuation, not the prefix, decided.

Drafts use sampling seed `seed`, continuations `seed + 1`, both at `temperature`; a continuation is
capped so that prefix + continuation stay within `max_new_tokens` (as seeded samples are in training).
Game24 only: the live/dead classification needs the task's partial state. Never imports prefect.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from thinking_seeds.algo.seeding import after_steps
from thinking_seeds.experiments.seed_decides import _fmt, _mean

__all__ = ["main", "step_cut_probe", "summarize"]


def summarize(records: Sequence[dict[str, Any]], draft_rewards: dict[str, list[float]]) -> dict[str, Any]:
    """The statistics of one cut depth from its prefix records: each {prompt_id, draft_index,
    draft_reward, kind ('live' | 'dead' | 'invalid'), rewards (its continuations')}.
    `draft_rewards[prompt_id]`: the rewards of every draft of that prompt (the prompt's own success
    rate, leaving the record's own draft out, is the reference for 'after a wrong draft')."""
    cont = [r for rec in records for r in rec["rewards"]]
    wrong = [rec for rec in records if rec["draft_reward"] < 1.0]
    right = [rec for rec in records if rec["draft_reward"] >= 1.0]

    def own_rate(rec: dict[str, Any]) -> float | None:
        others = [x for j, x in enumerate(draft_rewards[rec["prompt_id"]]) if j != rec["draft_index"]]
        return _mean(others)

    by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for rec in records:
        by_kind[rec["kind"]].append(rec)
    live = by_kind["live"]
    outcome = {"all_right": 0, "all_wrong": 0, "mixed": 0}
    for rec in live:
        s = sum(1 for r in rec["rewards"] if r >= 1.0)
        outcome["all_right" if s == len(rec["rewards"]) else "all_wrong" if s == 0 else "mixed"] += 1
    n = len(records)
    return {
        "prefixes": n,
        "continuations": len(cont),
        "share": {k: len(by_kind[k]) / n if n else None for k in ("live", "dead", "invalid")},
        "draft_success": _mean([rec["draft_reward"] for rec in records]),
        "seeded_success": _mean(cont),
        "after_wrong_draft": _mean([r for rec in wrong for r in rec["rewards"]]),
        "after_wrong_draft_n": len(wrong),
        "wrong_drafts_prompt_own_rate": _mean([x for rec in wrong if (x := own_rate(rec)) is not None]),
        "after_right_draft": _mean([r for rec in right for r in rec["rewards"]]),
        "after_right_draft_n": len(right),
        "after": {k: _mean([r for rec in by_kind[k] for r in rec["rewards"]]) for k in ("live", "dead", "invalid")},
        "live_outcomes": {k: v / len(live) if live else None for k, v in outcome.items()},
    }


def step_cut_probe(
    model_dir: str | Path,
    *,
    split: str = "validation",
    train_size: int | None = None,
    prompts: int | None = 128,
    drafts: int = 8,
    continuations: int = 8,
    steps: Sequence[int] = (1, 2),
    max_new_tokens: int = 80,
    temperature: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """Draft, cut after s steps, continue, score (module docstring); a JSON-ready dict."""
    from thinking_seeds.config import DataConfig
    from thinking_seeds.data.builtin_tasks import get_task
    from thinking_seeds.data.game24 import partial_state
    from thinking_seeds.data.rewards import Verifier
    from thinking_seeds.data.sources import load_dataset
    from thinking_seeds.engine.models import encode_prompt, load_model
    from thinking_seeds.engine.rollout import HFEngine, SamplingParams

    spec = get_task("game24")
    with tempfile.TemporaryDirectory(prefix="ts-probe-") as work:
        sizes = {} if train_size is None else {"train_size": train_size}
        rows = load_dataset(spec.build_splits(Path(work), DataConfig(source="game24", **sizes))[split], limit=prompts)
    model, tok = load_model(model_dir)
    model.eval()
    engine = HFEngine(model, tok, batch_size=256)
    prompt_ids = [encode_prompt(tok, p.chat()) for p in rows]
    numbers = [[int(x) for x in json.loads(p.rg_entry)["metadata"]["numbers"]] for p in rows]
    owners = [(i, j) for i in range(len(rows)) for j in range(drafts)]
    with Verifier(backend=spec.reward, partial_credit=False) as verifier:
        gens = engine.generate(
            [prompt_ids[i] for i, _ in owners],
            SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed),
        )
        texts = [tok.decode(g.token_ids, skip_special_tokens=True) for g in gens]
        verdicts = verifier.score_batch(texts, [rows[i] for i, _ in owners])
        draft_rewards: dict[str, list[float]] = defaultdict(list)
        for (i, _), v in zip(owners, verdicts, strict=True):
            draft_rewards[rows[i].prompt_id].append(v.reward)
        out: dict[str, Any] = {
            "model": str(model_dir),
            "split": split,
            "prompts": len(rows),
            "drafts_per_prompt": drafts,
            "continuations_per_prefix": continuations,
            "draft_success": _mean([v.reward for v in verdicts]),
            "by_steps": {},
        }
        for s in steps:
            cuts = []  # (owner index, prefix token ids)
            for k, g in enumerate(gens):
                L = after_steps([tok.decode([x]) for x in g.token_ids], s)
                if L is not None:
                    cuts.append((k, list(g.token_ids[:L])))
            rep = [(k, pre) for k, pre in cuts for _ in range(continuations)]  # each prefix, once per continuation
            conts = engine.generate(
                [prompt_ids[owners[k][0]] + pre for k, pre in rep],
                SamplingParams(temperature, max_new_tokens=max_new_tokens, seed=seed + 1, feed_context=True),
                max_new=[max(0, max_new_tokens - len(pre)) for _, pre in rep],
            )
            c_texts = [
                tok.decode(pre + c.token_ids, skip_special_tokens=True) for (_, pre), c in zip(rep, conts, strict=True)
            ]
            c_rewards = [v.reward for v in verifier.score_batch(c_texts, [rows[owners[k][0]] for k, _ in rep])]
            records = []
            for n, (k, pre) in enumerate(cuts):
                i, j = owners[k]
                state = partial_state(numbers[i], tok.decode(pre, skip_special_tokens=True))
                kind = "live" if state.reachable else ("dead" if state.steps_ok else "invalid")
                records.append({
                    "prompt_id": rows[i].prompt_id, "draft_index": j, "draft_reward": verdicts[k].reward, "kind": kind,
                    "rewards": c_rewards[n * continuations : (n + 1) * continuations],
                })  # fmt: skip
            out["by_steps"][str(s)] = {"drafts_with_steps": len(cuts) / len(gens) if gens else None} | summarize(
                records, draft_rewards
            )
    return out


def print_table(res: dict[str, Any]) -> None:
    print(
        f"{res['model']}: {res['prompts']} {res['split']} prompts x {res['drafts_per_prompt']} drafts "
        f"(success {_fmt(res['draft_success'])}), {res['continuations_per_prefix']} continuations per prefix"
    )
    for s, b in res["by_steps"].items():
        sh, af, lo = b["share"], b["after"], b["live_outcomes"]
        print(f"cut after {s} step(s): {b['prefixes']} prefixes ({_fmt(b['drafts_with_steps'])} of the drafts)")
        print(f"  seeded success / its drafts'   {_fmt(b['seeded_success'])} / {_fmt(b['draft_success'])}")
        print(
            f"  after a wrong draft            {_fmt(b['after_wrong_draft'])} (n={b['after_wrong_draft_n']}; "
            f"those prompts' own success {_fmt(b['wrong_drafts_prompt_own_rate'])})"
        )
        print(f"  after a right draft            {_fmt(b['after_right_draft'])} (n={b['after_right_draft_n']})")
        print(
            "  live / dead / invalid prefixes "
            + " / ".join(_fmt(sh[k]) for k in ("live", "dead", "invalid"))
            + "; success after them "
            + " / ".join(_fmt(af[k]) for k in ("live", "dead", "invalid"))
        )
        print(
            f"  live prefixes' continuations   all right {_fmt(lo['all_right'])}, all wrong {_fmt(lo['all_wrong'])}, "
            f"mixed {_fmt(lo['mixed'])}"
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", type=Path, help="a game24 model folder (e.g. data/models/tiny-game24-v2)")
    ap.add_argument("--split", default="validation", choices=["validation", "test", "train"])
    ap.add_argument("--train-size", type=int, default=None, help="data.train_size of the RL split (game24 preset: 489)")
    ap.add_argument("--prompts", type=int, default=128, help="the split's first N prompts")
    ap.add_argument("--drafts", type=int, default=8, help="drafts per prompt")
    ap.add_argument("--continuations", type=int, default=8, help="continuations per prefix")
    ap.add_argument("--steps", default="1,2", help="cut depths in complete step lines, comma-separated")
    ap.add_argument("--max-new-tokens", type=int, default=80)
    ap.add_argument("--temperature", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0, help="drafts' sampling seed (continuations: seed + 1)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON instead of the table")
    ap.add_argument("--out", type=Path, default=None, help="also write the result as JSON here")
    a = ap.parse_args(argv)

    def refuse(msg: str) -> None:
        print(f"step_cut_probe: {msg}", file=sys.stderr)
        raise SystemExit(2)

    if not (a.model / "config.json").is_file():
        refuse(f"{a.model} is not a model folder (no config.json); pass a game24 model's folder")
    try:
        steps = [int(x) for x in a.steps.split(",")]
    except ValueError:
        steps = []
    if not steps or min(steps) < 1:
        refuse(f"--steps {a.steps!r}: give positive integers, comma-separated (e.g. 1,2)")
    if min(a.prompts, a.drafts, a.continuations, a.max_new_tokens) < 1:
        refuse("--prompts, --drafts, --continuations and --max-new-tokens must be at least 1")
    res = step_cut_probe(
        a.model, split=a.split, train_size=a.train_size, prompts=a.prompts, drafts=a.drafts,
        continuations=a.continuations, steps=steps, max_new_tokens=a.max_new_tokens,
        temperature=a.temperature, seed=a.seed,
    )  # fmt: skip
    if a.out:
        a.out.write_text(json.dumps(res, indent=2) + "\n")
    if a.json:
        print(json.dumps(res, indent=2))
    else:
        print_table(res)


if __name__ == "__main__":
    main()
