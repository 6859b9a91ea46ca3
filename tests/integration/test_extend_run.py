"""Extending a run (issue #27, item 4): raising `iterations` continues a finished run. Its identity (the
config hash in every manifest, config.yaml's bytes) stays, so no finished stage is redone; the new end
is recorded beside config.yaml. Any other change is refused in one line naming each key, old -> new."""

from __future__ import annotations

import json

import pytest

from thinking_seeds.config import EXTENSION_FILE, load_config, load_saved_config
from thinking_seeds.pipeline.graph import STAGES
from thinking_seeds.pipeline.loop import train
from thinking_seeds.pipeline.resume import continued_config, resume_line
from thinking_seeds.store.run_dir import RunDir


def _manifests(run: RunDir, iterations: int) -> dict[str, bytes]:
    keys = [(0, "prepare"), (-1, "evaluate")] + [(k, s) for k in range(iterations) for s in STAGES]
    return {f"{s}@{k}": run.manifest_path(k, s).read_bytes() for k, s in keys}


def test_raising_iterations_extends_a_finished_run_and_redoes_nothing(tmp_path, tiny_overrides):
    base = [o for o in tiny_overrides if not o.startswith("iterations=")]
    one = load_config("tiny", [*base, "iterations=1"])
    run = train(RunDir.for_run("ext", tmp_path), one)
    before, config_bytes = _manifests(run, 1), run.config_path.read_bytes()

    two = load_config("tiny", [*base, "iterations=2"])
    assert two.config_hash() != one.config_hash()  # on its own, another config (archives keep their hashes)
    assert resume_line(run, continued_config(run, two)).startswith(
        f"extending ext from 1 to 2 iterations: {len(before)} stages done, continuing at iteration 1 (snapshot)"
    )
    seen: list[str] = []
    train(run, two, on_stage=lambda k, stage, m: seen.append(f"{stage}@{k}"))

    after = _manifests(run, 2)
    assert {k: after[k] for k in before} == before  # every finished stage skipped, its manifest untouched
    assert run.config_path.read_bytes() == config_bytes  # the run's identity
    assert json.loads((run.root / EXTENSION_FILE).read_text()) == {"iterations": 2}
    saved = load_saved_config(run.config_path)
    assert (saved.iterations, saved.started_iterations, saved.config_hash()) == (2, 1, one.config_hash())
    assert {json.loads(m)["config_hash"] for m in after.values()} == {one.config_hash()}
    assert (run.policy(2) / "model.safetensors").exists()
    assert run.metrics(1, "evaluate").exists()  # the old end's evaluation stays valid
    # the same extended command again: all done
    assert resume_line(run, continued_config(run, two)).startswith("run ext is complete")
    with pytest.raises(ValueError, match=r"iterations 2 -> 1; a run is extended, never shortened"):
        continued_config(run, one)


def test_any_other_change_is_refused_in_one_line_naming_keys_old_and_new(tmp_path, tiny_overrides):
    run = RunDir.for_run("other", tmp_path)
    run.root.mkdir(parents=True)
    from thinking_seeds.config import save_config

    save_config(load_config("tiny", tiny_overrides), run.config_path)
    changed = load_config("tiny", [*tiny_overrides, "seed=3", "prefix.ratio_max=0.5", "iterations=9"])
    with pytest.raises(ValueError) as e:
        continued_config(run, changed)
    msg = str(e.value)
    assert "\n" not in msg
    assert "was started with another config: iterations 2 -> 9; prefix.ratio_max 0.6 -> 0.5; seed 0 -> 3;" in msg
    # what the hash does not cover (where stages run, how they are scheduled) is no change
    moved = load_config("tiny", [*tiny_overrides, "device=cpu", "pipeline.overlap=false"])
    assert continued_config(run, moved).started_iterations is None
