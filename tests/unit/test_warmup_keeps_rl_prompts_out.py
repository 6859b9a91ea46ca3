"""--rl-train-size: the 24 game's warm-up corpus leaves out the multisets RL trains on (issue #26: the first
base saw all of them and RL's training reward was 0.98 from the start), and by default it does not."""

from __future__ import annotations

import pytest

from thinking_seeds.config.sections import DataConfig
from thinking_seeds.data.builtin_tasks import get_task
from thinking_seeds.data.countdown_data import problem_key
from thinking_seeds.train.warmup import warmup_pairs


def _keys(pairs):
    # "Make 24 from 3,8,8,1."
    return {problem_key([int(x) for x in q.removesuffix(".").split(" from ")[1].split(",")], 24) for q, _ in pairs}


def test_rl_training_multisets_stay_out_of_the_warmup_only_when_asked(tmp_path):
    spec, cfg = get_task("game24"), DataConfig(source="game24", train_size=489)
    splits = spec.build_splits(tmp_path, cfg)
    train, held = spec.held_out_keys(splits["train"]), spec.held_out_keys(splits["validation"])
    held |= spec.held_out_keys(splits["test"])
    assert len(train) == 489 and not train & held
    kept = _keys(warmup_pairs(spec, splits, 4000, 0, cfg, keep_out_train=True))
    plain = _keys(warmup_pairs(spec, splits, 4000, 0, cfg, keep_out_train=False))
    assert not kept & train and not kept & held and len(kept) > 400  # the other 489 multisets
    assert plain & train and not plain & held  # the first base's corpus: RL's prompts included


def test_an_rl_split_that_leaves_no_warmup_multiset_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from thinking_seeds.train import warmup

    for size, says in (("0", "needs at least 1 prompt"), ("5000", "lower --rl-train-size")):
        argv = ["warmup", "--task", "game24", "--rl-train-size", size, "--steps", "1", "--out", str(tmp_path / "m")]
        monkeypatch.setattr("sys.argv", argv)
        with pytest.raises(SystemExit) as e:
            warmup.main()
        err = capsys.readouterr().err.strip().splitlines()
        assert e.value.code == 2 and says in err[-1] and not (tmp_path / "m").exists()
