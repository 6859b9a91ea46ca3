"""The supervised warm-up that built the bundled tiny model (`thinking_seeds.train.warmup`): a few
steps with evaluations write a model that loads, and a report that names the chosen step."""

import json

from thinking_seeds.engine.models import count_params, load_model


def test_warmup_builds_a_loadable_model(tmp_path):
    from thinking_seeds.train.warmup import build_tiny_model

    out = tmp_path / "m"
    rep = build_tiny_model(out, steps=4, corpus_size=300, eval_from=2, eval_every=2, eval_prompts=4, eval_samples=2)
    assert [c["step"] for c in rep["candidates"]] == [2, 4]
    model, tok = load_model(str(out))
    assert count_params(model) == rep["params"]
    assert json.loads((out / "warmup_report.json").read_text())["chosen_step"] in (2, 4)


def test_a_continued_warmup_reports_the_whole_rebuild_chain(tmp_path):
    """A model built in two phases (`--init`) names both commands in its report, in order; the
    bundled REBUILD constant alone named only the first phases of the countdown base v2."""
    from thinking_seeds.train.warmup import build_tiny_model

    first, second = tmp_path / "a", tmp_path / "b"
    small = dict(steps=2, corpus_size=300, eval_from=2, eval_every=2, eval_prompts=2, eval_samples=2)
    build_tiny_model(first, command="phase-one --out a", **small)
    rep = build_tiny_model(second, init=first, command="phase-two --init a --out b", **small)
    assert rep["rebuild"] == "phase-one --out a && phase-two --init a --out b"
    assert json.loads((second / "warmup_report.json").read_text())["rebuild"] == rep["rebuild"]
