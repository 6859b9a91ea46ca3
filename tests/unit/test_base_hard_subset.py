"""The hard subset of θ_0 (`thinking_seeds.studies.base_hard_subset`), on a random-weights game24
model that solves nothing: every prompt is hard, and the fresh samples' pass@k (0) keeps the bar."""

import json

import pytest

from thinking_seeds.data import game24
from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.studies.base_hard_subset import main


@pytest.fixture
def random_model(tmp_path):
    tok = char_tokenizer(game24.CHARSET)
    m = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=16, layers=1, heads=2, intermediate=32)
    m.save_pretrained(tmp_path / "m")
    tok.save_pretrained(tmp_path / "m")
    return tmp_path / "m"


def test_the_subset_is_what_theta0_rarely_solves_and_its_pass_k_is_measured_afresh(random_model, tmp_path, capsys):
    out = tmp_path / "hard.json"
    main([str(random_model), "--prompts", "3", "--samples", "2", "--max-new-tokens", "8", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["prompt_ids"] == ["validation-0", "validation-1", "validation-2"]
    assert res["selection"]["pass@1"] == 0.0 and res["fresh"] == {"pass@1": 0.0, "pass@2": 0.0}
    assert res["bar"] == {"min_size": 10, "holds": False}  # pass@2 < 1, but 3 prompts < 10
    assert json.loads(capsys.readouterr().out) == res


def test_a_folder_without_a_model_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2 and "not a model folder" in capsys.readouterr().err


def test_the_train_split_reads_the_rl_prompts(random_model, tmp_path):
    out = tmp_path / "train.json"
    main([str(random_model), "--split", "train", "--train-size", "489", "--prompts", "2", "--samples", "1",
          "--max-new-tokens", "4", "--out", str(out)])  # fmt: skip
    assert json.loads(out.read_text())["prompt_ids"] == ["train-0", "train-1"]
