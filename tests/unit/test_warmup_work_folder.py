"""The warm-up's work folder (data splits, and the candidates when no state_dir keeps them) goes when
the build ends in an error, not only when it finishes."""

import os
import tempfile

import pytest

from thinking_seeds.train import warmup


def test_a_failed_build_leaves_no_work_folder(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # mkdtemp's folder

    def broken(*a, **k):
        raise OSError("no such model")

    monkeypatch.setattr(warmup, "_start_model", broken)  # after the splits are written into the work folder
    with pytest.raises(OSError, match="no such model"):
        warmup.build_tiny_model(tmp_path / "out", task="chain_sum", steps=1, corpus_size=10, eval_prompts=2)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_build_stops_its_verifiers_workers(tmp_path, monkeypatch):
    seen: dict = {}

    def score_then_fail(engine, tok, prompts, verifier, **k):  # θ_0's evaluation starts the worker pool
        verifier.score_batch(["\\boxed{1}"], prompts[:1])
        seen["pids"] = verifier.worker_pids
        raise RuntimeError("the evaluation broke")

    monkeypatch.setattr(warmup, "evaluate_prompts", score_then_fail)
    with pytest.raises(RuntimeError, match="the evaluation broke"):
        warmup.build_tiny_model(
            tmp_path / "out", task="chain_sum", steps=1, corpus_size=10, eval_prompts=2, eval_from=1, eval_every=1
        )
    assert seen["pids"]
    for pid in seen["pids"]:  # reaped by the pool's shutdown, so no zombie answers the signal
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
