"""A warm-up killed after a state save and resumed (`--state-dir`, `--resume`) ends with the same
weights and evaluations, bit for bit, as one that ran through: the long game24 base build outlives a
session and must continue exactly where it stopped (`thinking_seeds.train.warmup_state`). Slow
(tests/e2e): ~45 s of CPU for three tiny builds; tests/unit/test_warmup_state.py checks the state
itself in a second."""

import json

import pytest
from safetensors.torch import load_file


def _weights(path):
    return load_file(str(path / "model.safetensors"))


def test_a_resumed_warmup_is_bit_exact(tmp_path):
    from thinking_seeds.config import DataConfig
    from thinking_seeds.train.warmup import build_tiny_model

    small = dict(
        data_cfg=DataConfig(train_size=20, val_size=4, test_size=4),
        steps=6, corpus_size=300, eval_from=2, eval_every=2, eval_prompts=3, eval_samples=2, schedule="cosine",
        target=None, warmup_steps=2, max_new_tokens=24,
    )  # fmt: skip
    straight = build_tiny_model(tmp_path / "a", state_dir=tmp_path / "sa", **small)
    assert build_tiny_model(tmp_path / "b", state_dir=tmp_path / "sb", stop_after=3, **small) == {"stopped_at": 3}
    assert not (tmp_path / "b").exists()
    resumed = build_tiny_model(tmp_path / "b", state_dir=tmp_path / "sb", resume=True, **small)

    wa, wb = _weights(tmp_path / "a"), _weights(tmp_path / "b")
    assert wa.keys() == wb.keys() and all(wa[k].equal(wb[k]) for k in wa)
    strip = lambda rep: [{k: c[k] for k in ("step", "pass@1", "loss", "lr")} for c in rep["candidates"]]  # noqa: E731
    assert strip(straight) == strip(resumed) and [c["step"] for c in resumed["candidates"]] == [2, 4, 6]
    assert json.loads((tmp_path / "b" / "warmup_report.json").read_text())["final_lr"] == straight["final_lr"]


def test_a_resume_with_other_settings_is_refused(tmp_path):
    from thinking_seeds.config import DataConfig
    from thinking_seeds.train.warmup import build_tiny_model

    small = dict(
        data_cfg=DataConfig(train_size=20, val_size=4, test_size=4),
        steps=4,
        corpus_size=200,
        eval_from=2,
        eval_every=2,
        eval_prompts=2,
        eval_samples=2,
        max_new_tokens=16,
    )
    build_tiny_model(tmp_path / "m", state_dir=tmp_path / "s", stop_after=2, **small)
    with pytest.raises(ValueError, match="other settings"):
        build_tiny_model(tmp_path / "m", state_dir=tmp_path / "s", resume=True, **{**small, "lr": 1e-3})
