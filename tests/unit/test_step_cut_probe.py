"""The step-cut probe (`thinking_seeds.studies.step_cut_probe`): where a seed of s steps ends, the
statistics it reports, and a real run on the bundled 24-game base."""

import json

import pytest

from tests.helpers import REPO
from thinking_seeds.algo.seeding import after_steps
from thinking_seeds.studies.step_cut_probe import main, summarize

ANSWER = "8/3=8/3\n3-(8/3)=1/3\n8/(1/3)=24\n\\boxed{8/(3-(8/3))}"


def test_a_cut_ends_after_the_s_th_complete_line_and_never_holds_the_answer():
    pieces = list(ANSWER)  # a character vocabulary: one token per character
    assert "".join(pieces[: after_steps(pieces, 1)]) == "8/3=8/3\n"
    assert "".join(pieces[: after_steps(pieces, 3)]) == "8/3=8/3\n3-(8/3)=1/3\n8/(1/3)=24\n"
    assert after_steps(pieces, 4) is None  # the fourth line is the answer
    assert after_steps(list("8+4=12\n12*2"), 2) is None  # an unfinished line is no step
    assert after_steps(["8+4=12\n", "12*2=24\n"], 2) == 2  # multi-character tokens


def test_the_statistics_separate_what_the_seed_carries_from_what_the_continuation_adds():
    records = [
        # a wrong draft whose first step is still live: its continuations succeed half the time
        {"prompt_id": "p", "draft_index": 0, "draft_reward": 0.0, "kind": "live", "rewards": [1.0, 0.0]},
        {"prompt_id": "p", "draft_index": 1, "draft_reward": 0.0, "kind": "dead", "rewards": [0.0, 0.0]},
        {"prompt_id": "q", "draft_index": 0, "draft_reward": 1.0, "kind": "live", "rewards": [1.0, 1.0]},
        {"prompt_id": "q", "draft_index": 1, "draft_reward": 0.0, "kind": "invalid", "rewards": [0.0, 0.0]},
    ]
    drafts = {"p": [0.0, 0.0, 1.0], "q": [1.0, 0.0]}
    s = summarize(records, drafts)
    assert s["prefixes"] == 4 and s["continuations"] == 8
    assert s["share"] == {"live": 0.5, "dead": 0.25, "invalid": 0.25}
    assert s["draft_success"] == 0.25 and s["seeded_success"] == 3 / 8
    assert s["after_wrong_draft"] == 1 / 6 and s["after_wrong_draft_n"] == 3
    assert s["after_right_draft"] == 1.0 and s["after_right_draft_n"] == 1
    # the wrong drafts' prompts without the draft itself: p's others 0,1 (0.5) twice, q's other 1.0
    assert s["wrong_drafts_prompt_own_rate"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert s["after"] == {"live": 0.75, "dead": 0.0, "invalid": 0.0}
    assert s["live_outcomes"] == {"all_right": 0.5, "all_wrong": 0.0, "mixed": 0.5}


def test_a_probe_of_the_bundled_base_model(tmp_path, capsys):
    out = tmp_path / "probe.json"
    model = REPO / "data" / "models" / "tiny-game24-v2"
    main([str(model), "--prompts", "3", "--drafts", "3", "--continuations", "2", "--steps", "1,2", "--out", str(out)])
    res = json.loads(out.read_text())
    assert res["prompts"] == 3 and set(res["by_steps"]) == {"1", "2"}
    for b in res["by_steps"].values():
        assert b["continuations"] == 2 * b["prefixes"] and b["prefixes"] <= 9
        assert sum(v for v in b["share"].values() if v is not None) == pytest.approx(1.0)
        assert b["after_wrong_draft_n"] + b["after_right_draft_n"] == b["prefixes"]
        # seeded success is the share-weighted success after live, dead and invalid prefixes
        parts = [b["share"][k] * b["after"][k] for k in b["share"] if b["share"][k]]
        assert sum(parts) == pytest.approx(b["seeded_success"])
    assert "cut after 1 step(s)" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--steps", "0"], "--steps"), (["--steps", "x"], "--steps"), (["--drafts", "0"], "at least 1")],
)
def test_bad_input_is_one_line_and_exit_2(args, message, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(REPO / "data" / "models" / "tiny-game24-v2"), *args])
    err = capsys.readouterr().err
    assert e.value.code == 2 and message in err and err.count("\n") == 1


def test_a_folder_without_a_model_is_refused(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main([str(tmp_path)])
    assert e.value.code == 2 and "not a model folder" in capsys.readouterr().err
