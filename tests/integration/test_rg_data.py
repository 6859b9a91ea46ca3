"""reasoning-gym data sets by name and weighted mixtures (`data.source: reasoning_gym`), scored by
reasoning-gym's own checkers through the verifier (real library, no mocks)."""

import json
from collections import Counter
from itertools import permutations, product

import pytest

from thinking_seeds.config import ConfigError, load_config
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.rg_data import INSTRUCTION, build_reasoning_gym_splits
from thinking_seeds.data.sources import load_dataset

TASKS = (
    "data.tasks=[{name: countdown, weight: 3, config: {min_numbers: 3, max_numbers: 3}}, "
    "{name: basic_arithmetic, weight: 1}]"
)


def test_mixture_splits_weights_and_checker(tmp_path):
    cfg = load_config("tiny", ["data.source=reasoning_gym", "reward=reasoning_gym", TASKS])
    d = cfg.data
    paths = build_reasoning_gym_splits(tmp_path, d.tasks, 120, 20, 20, d.seed)
    rows = {s: load_dataset(p) for s, p in paths.items()}
    assert [len(rows[s]) for s in ("train", "validation", "test")] == [120, 20, 20]
    qs = {s: {p.user_text for p in r} for s, r in rows.items()}
    assert not (qs["train"] & qs["test"]) and not (qs["train"] & qs["validation"])
    mix = Counter(p.data_source for p in rows["train"])
    assert set(mix) == {"countdown", "basic_arithmetic"} and mix["countdown"] > 2 * mix["basic_arithmetic"]
    assert all(p.user_text.endswith(INSTRUCTION) for p in rows["train"])
    # Held-out splits do not move with train_size (a smaller one: countdown's generator is the test's cost).
    again = build_reasoning_gym_splits(tmp_path / "again", d.tasks, 40, 20, 20, d.seed)
    assert len(load_dataset(again["train"])) == 40
    assert again["test"].read_bytes() == paths["test"].read_bytes()
    assert again["validation"].read_bytes() == paths["validation"].read_bytes()
    prompts = rows["test"]
    # The task's own checker, not the reference string: another valid countdown expression scores 1.
    others = [(p, _other_solution(p)) for p in prompts if p.data_source == "countdown"]
    others = [(p, a) for p, a in others if a is not None]
    assert len(others) >= 5
    with Verifier(backend="reasoning_gym", partial_credit=False) as v:  # one worker pool for the three batches
        right = v.score_batch([p.target for p in prompts], prompts)
        wrong = v.score_batch(["\\boxed{-123456}"] * len(prompts), prompts)
        verdicts = v.score_batch([f"\\boxed{{{a}}}" for _, a in others], [p for p, _ in others])
    assert all(x.reward == 1.0 and x.status == "ok" for x in right)
    assert all(x.reward == 0.0 for x in wrong)
    assert all(x.reward == 1.0 and x.status == "ok" for x in verdicts)


def _other_solution(prompt):
    """An expression over the prompt's numbers (each once) that reaches its target but is not its reference."""
    md = json.loads(prompt.rg_entry)["metadata"]
    reference = json.loads(prompt.rg_entry)["answer"].replace(" ", "")
    for a, b, c in permutations(md["numbers"]):
        for o1, o2 in product("+-*", repeat=2):
            expr = f"{a}{o1}{b}{o2}{c}"
            if expr != reference and eval(expr) == md["target"]:  # noqa: S307 - digits and +-* only
                return expr
    return None


def test_bad_mixtures_are_refused_with_the_key():
    with pytest.raises(ConfigError, match="unknown reasoning-gym data set 'cuntdown'; did you mean countdown"):
        load_config("tiny", ["data.source=reasoning_gym", "reward=reasoning_gym", "data.tasks=[{name: cuntdown}]"])
    with pytest.raises(ConfigError, match="needs data.tasks"):
        load_config("tiny", ["data.source=reasoning_gym", "reward=reasoning_gym"])
    with pytest.raises(ConfigError, match="set reward=reasoning_gym"):
        load_config("tiny", ["data.source=reasoning_gym", TASKS])
    with pytest.raises(ConfigError, match="weight"):
        load_config(
            "tiny", ["data.source=reasoning_gym", "reward=reasoning_gym", "data.tasks=[{name: countdown, weight: 0}]"]
        )
    with pytest.raises(ConfigError, match="only for|is for data.source=reasoning_gym"):
        load_config("tiny", [TASKS])
