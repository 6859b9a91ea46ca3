"""Adaptive, success-conditioned seeding (prefix.when=on_failure): who gets seeds, decided by the policy's
own samples. Pure functions; the stages that use them are in pipeline/adaptive_seeding.py.

A group whose on-policy samples already solve the prompt has a learning signal of its own; seeding it
spends draft tokens where a seed cannot help (issue #26: only 4-5% of countdown's 8-sample groups failed
completely, yet half of every group was seeded). So θ_k first samples `group_size - seeds_per_group`
on-policy responses per prompt; a prompt is *failing* when none of them is correct (reward >= 1, the
same bar as prefix.filter=correct_draft's), and only failing prompts get drafts, of which only the
correct ones are continued (PrefixRL / QuestA's rule). Every other slot is on-policy, so each group
keeps `group_size` samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

SOLVED = 1.0  # a reward at least this is a correct answer (prefix.filter=correct_draft's bar)


def failed_prompts(prompt_ids: Sequence[str], rewards: Sequence[float]) -> list[str]:
    """The prompts (first-seen order) none of whose samples is correct."""
    solved: dict[str, bool] = {}
    for p, r in zip(prompt_ids, rewards, strict=True):
        solved[p] = solved.get(p, False) or r >= SOLVED
    return [p for p, ok in solved.items() if not ok]


def continued_drafts(prompt_ids: Sequence[str], rewards: Sequence[float | None], slots: int) -> list[int]:
    """Which drafts (indices, in draw order) fill a failing prompt's `slots` seed slots when it has more
    drafts than slots (prefix.failure_drafts > 1): its first correct ones, then its first wrong ones,
    whose slots turn on-policy. With exactly `slots` drafts per prompt that is every draft, in order."""
    correct: dict[str, list[int]] = {}
    wrong: dict[str, list[int]] = {}
    for i, (p, r) in enumerate(zip(prompt_ids, rewards, strict=True)):
        (correct if r is None or r >= SOLVED else wrong).setdefault(p, []).append(i)
    keep = set()
    for p in dict.fromkeys(prompt_ids):
        chosen = correct.get(p, [])[:slots]
        keep.update(chosen + wrong.get(p, [])[: slots - len(chosen)])
    return sorted(keep)


def second_on_policy_slots(prompt_ids: Iterable[str], drafted: set[str], seed_slots: int) -> dict[str, int]:
    """On-policy samples each prompt still needs after the probe: none for a drafted (failing) prompt,
    whose `seed_slots` go to its drafts (a wrong draft's slot turns on-policy where it stands), and
    `seed_slots` for every other prompt."""
    return {p: 0 if p in drafted else seed_slots for p in prompt_ids}


def seeding_metrics(
    n_prompts: int, failed: Sequence[str], drafts: Sequence[tuple[str, float | None, int]], probe_tokens: int
) -> dict[str, float]:
    """seeding/* of one iteration. `drafts`: (prompt_id, draft_reward, draft_len) of every draft written;
    a draft is continued when correct (or unscored: a data-set solution). draft_tokens is the drafting
    cost, to match compute against always-seeded runs (add rollout/generated_tokens for the policy's)."""
    kept = [(p, r) for p, r, _ in drafts if r is None or r >= SOLVED]
    n = max(1, n_prompts)
    return {
        "seeding/failed_prompts_frac": len(failed) / n,
        "seeding/seeded_prompts_frac": len({p for p, _ in kept}) / n,
        "seeding/drafts": float(len(drafts)),
        "seeding/correct_draft_frac": len(kept) / len(drafts) if drafts else float("nan"),
        "seeding/draft_tokens": float(sum(n_tok for *_, n_tok in drafts)),
        "seeding/probe_tokens": float(probe_tokens),
    }
