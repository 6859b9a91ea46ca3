"""`make demo`'s preset learns visibly (issue #27, item 1): the run `ts train --preset demo` makes, on
the plain loop, raises held-out accuracy from θ_0 to θ_20 by more than the evaluation's sampling noise.

docs/results/demo/README.md gives θ_0 0.435 -> θ_20 0.480 on this machine class (seed 0; the numbers
are deterministic on one CPU but may move in the last digits elsewhere). The check is the rise, with a
margin: at least 0.03, about twice the sampling sd of a difference of two evaluations of 128 prompts x
16 samples (<= 0.016). Slow: 20 iterations of the countdown preset, about 2 minutes on 2 cores.
"""

from __future__ import annotations

import pytest

from thinking_seeds.config import load_config
from thinking_seeds.pipeline.loop import train
from thinking_seeds.store.parquet_io import read_table
from thinking_seeds.store.run_dir import RunDir

pytestmark = pytest.mark.slow


def _accuracy(run: RunDir, step: int) -> float:
    t = read_table(run.metrics(step, "evaluate")).to_pydict()
    return dict(zip(t["name"], t["value"], strict=True))["eval/accuracy"]


def test_the_demo_preset_raises_held_out_accuracy_beyond_noise(tmp_path):
    cfg = load_config("demo")
    assert cfg.iterations == 20 and cfg.eval.every == 10
    run = train(RunDir.for_run("demo", tmp_path), cfg)
    acc = [_accuracy(run, step) for step in (0, 10, 20)]
    assert acc[2] - acc[0] >= 0.03, acc
    assert acc[1] - acc[0] >= 0.03, acc  # the rise is there by θ_10 already, not a last-step fluke
