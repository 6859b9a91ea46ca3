"""maj@k: the reward of the majority answer among k samples, answers grouped by math-verify equivalence.

Two steps, kept apart so each is testable on its own:

1. `answer_classes`: per prompt, each sample's parsed answer gets a class id; "1/2", "0.5" and
   "\\frac{1}{2}" are one class. Grouping is greedy by representative: the first answer not yet in
   a class founds one, and every later answer that math-verify finds equal to that founder joins it.
   Equivalence checks are batched over all prompts per round (one verifier call per round, rounds =
   the most classes any prompt has), so it costs about (distinct answers) x (classes) checks, not
   all pairs. A sample without an answer (no `\\boxed{}`) belongs to no class and does not vote.
2. `maj_at_k`: the expected reward of the majority vote over a uniformly drawn k-subset of the n
   samples. verl estimates its maj@N by bootstrap (subsets drawn with replacement, 1000 draws); here
   subsets are drawn *without* replacement (k of the n samples, as pass@k counts them), and exactly —
   every subset enumerated — when there are at most `draws` of them, so maj@n and maj@1 carry no
   sampling noise. Ties go to the class whose first sample in the subset comes first in sample order
   (deterministic, and independent of how the subset was drawn). No vote at all scores 0.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Callable, Sequence

__all__ = ["answer_classes", "maj_at_k", "majority_value"]

# pairs (reference, candidate) -> [is candidate equivalent to reference]
PairCheck = Callable[[list[tuple[str, str]]], list[bool]]


def answer_classes(answers: Sequence[Sequence[str | None]], equal: PairCheck) -> list[list[int | None]]:
    """For each prompt's answers, a class id per sample (None: no answer); equal answers share an id.

    Identical strings (after strip) are one class without asking `equal`; ids are 0, 1, ... in order
    of each class's first sample.
    """
    # per prompt: distinct answer strings in order of first appearance
    uniques = [list(dict.fromkeys(a.strip() for a in row if a is not None and a.strip())) for row in answers]
    cls: list[dict[str, int]] = [{} for _ in answers]
    unassigned = [list(u) for u in uniques]
    while any(unassigned):
        pairs, owners = [], []
        for p, rest in enumerate(unassigned):
            if not rest:
                continue
            founder = rest[0]
            cls[p][founder] = len(set(cls[p].values()))
            for cand in rest[1:]:
                pairs.append((founder, cand))
                owners.append((p, cand))
        verdicts = equal(pairs) if pairs else []
        joined: list[set[str]] = [set() for _ in answers]
        for (p, cand), same in zip(owners, verdicts, strict=True):
            if same:
                cls[p][cand] = cls[p][unassigned[p][0]]
                joined[p].add(cand)
        unassigned = [[a for a in rest[1:] if a not in joined[p]] for p, rest in enumerate(unassigned)]
    return [[None if a is None or not a.strip() else cls[p][a.strip()] for a in row] for p, row in enumerate(answers)]


def majority_value(classes: Sequence[int | None], rewards: Sequence[float], subset: Sequence[int]) -> float:
    """The reward of the majority class among the samples `subset` (indices, any order): the reward of
    that class's first sample in sample order. Ties: the class whose first sample comes first. 0 if no
    sample in the subset has an answer."""
    votes: dict[int, list[int]] = {}
    for i in sorted(subset):
        c = classes[i]
        if c is not None:
            votes.setdefault(c, []).append(i)
    if not votes:
        return 0.0
    winner = max(votes.values(), key=lambda members: (len(members), -members[0]))
    return float(rewards[winner[0]])


def maj_at_k(
    classes: Sequence[int | None], rewards: Sequence[float], k: int, draws: int = 1000, seed: int = 0
) -> float:
    """Expected majority-vote reward of one prompt over k-subsets of its n samples (see module doc):
    exact when C(n, k) <= draws, else the mean over `draws` subsets drawn with Random(seed)."""
    n = len(classes)
    if len(rewards) != n:
        raise ValueError(f"maj_at_k: {n} classes but {len(rewards)} rewards; pass one of each per sample")
    if not 1 <= k <= n:
        raise ValueError(f"maj_at_k needs 1 <= k <= n, got k={k} with n={n} samples")
    if math.comb(n, k) <= draws:
        subsets: Sequence[Sequence[int]] = list(itertools.combinations(range(n), k))
    else:
        rng = random.Random(seed)
        subsets = [rng.sample(range(n), k) for _ in range(draws)]
    return sum(majority_value(classes, rewards, s) for s in subsets) / len(subsets)
