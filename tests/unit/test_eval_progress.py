"""Evaluation's progress: a whole line each time another tenth of the samples is done (never a carriage
return, so a piped or logged evaluation shows it), from the engine's batches where it reports them."""

from __future__ import annotations

import io

from thinking_seeds.engine.rollout import Generation
from thinking_seeds.evals.evaluation import ProgressLines, _generate


def test_a_line_per_tenth_and_the_last():
    out = io.StringIO()
    lines = ProgressLines("evaluate θ_4 (validation)", 1000, out)
    for done in range(0, 1001, 50):  # 21 calls: 0, 50, ..., 1000
        lines(done)
    got = out.getvalue().splitlines()
    assert len(got) == 10 and "\r" not in out.getvalue()
    assert got[0].startswith("evaluate θ_4 (validation): 100/1000 samples (10%), ")
    assert got[-1].startswith("evaluate θ_4 (validation): 1000/1000 samples (100%), ")
    coarse = io.StringIO()
    few = ProgressLines("e", 1024, coarse)
    for done in (512, 1024):  # two batches: a line each
        few(done)
    assert [ln.split(",")[0] for ln in coarse.getvalue().splitlines()] == [
        "e: 512/1024 samples (50%)",
        "e: 1024/1024 samples (100%)",
    ]


class _Batched:
    def generate(self, contexts, params, max_new=None, progress=None):
        out = []
        for start in range(0, len(contexts), 3):
            out += [Generation([1], [0.0], True) for _ in contexts[start : start + 3]]
            if progress is not None:
                progress(len(out))
        return out


class _Plain:
    def generate(self, contexts, params, max_new=None):
        return [Generation([1], [0.0], True) for _ in contexts]


def test_progress_from_the_engines_batches_or_at_the_end():
    for engine, want in ((_Batched(), [3, 6, 9, 10]), (_Plain(), [10])):
        seen: list[int] = []
        gens = _generate(engine, [[1]] * 10, None, None, seen.append)
        assert len(gens) == 10 and seen == want
