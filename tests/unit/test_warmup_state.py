"""The warm-up's resumable state (thinking_seeds.train.warmup_state): after a save, training on from
a fresh model restored from it gives the same weights as training on without the interruption."""

import pytest
import torch

from thinking_seeds.engine.models import char_tokenizer, tiny_llama
from thinking_seeds.train.sft import encode_corpus, sft_optimizer, sft_step
from thinking_seeds.train.warmup_state import corpus_digest, load_state, restore, save_state


def _setup():
    tok = char_tokenizer("0123456789+=")
    model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, hidden=32, layers=1, heads=2, intermediate=64)
    ids, labels, _ = encode_corpus(tok, [(f"{a}+{b}", str(a + b)) for a in range(10) for b in range(10)])
    opt, sched = sft_optimizer(model, 1e-2, 2, total_steps=10)
    return tok, model, ids, labels, opt, sched, torch.Generator().manual_seed(0)


def _train(parts, n):
    tok, model, ids, labels, opt, sched, gen = parts
    return [sft_step(model, opt, sched, ids, labels, 8, gen, tok.pad_token_id) for _ in range(n)]


def test_restore_continues_bit_exactly(tmp_path):
    a = _setup()
    _train(a, 3)
    digest = corpus_digest(a[2], a[3])
    save_state(tmp_path, step=3, model=a[1], opt=a[4], sched=a[5], gen=a[6], extra={
        "settings": {"lr": 1e-2}, "corpus_digest": digest})  # fmt: skip
    losses_a = _train(a, 4)

    b = _setup()  # a fresh process: new weights, optimizer, schedule, generator
    state = load_state(tmp_path, settings={"lr": 1e-2}, digest=digest)
    assert restore(state, model=b[1], opt=b[4], sched=b[5], gen=b[6]) == 4
    assert _train(b, 4) == losses_a
    sa, sb = a[1].state_dict(), b[1].state_dict()
    assert all(sa[k].equal(sb[k]) for k in sa)
    assert a[5].get_last_lr() == b[5].get_last_lr()


def test_load_refuses_other_settings_or_another_corpus(tmp_path):
    a = _setup()
    save_state(tmp_path, step=1, model=a[1], opt=a[4], sched=a[5], gen=a[6], extra={
        "settings": {"lr": 1e-2}, "corpus_digest": "abc"})  # fmt: skip
    with pytest.raises(ValueError, match="other settings"):
        load_state(tmp_path, settings={"lr": 2e-2}, digest="abc")
    with pytest.raises(ValueError, match="corpus differs"):
        load_state(tmp_path, settings={"lr": 1e-2}, digest="xyz")
    with pytest.raises(ValueError, match="no state.pt"):
        load_state(tmp_path / "none", settings={}, digest="abc")


def test_a_resume_without_a_saved_state_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    import sys

    from thinking_seeds.train import warmup

    monkeypatch.setattr(sys, "argv", ["warmup", "--out", str(tmp_path / "m"), "--state-dir", str(tmp_path), "--resume"])
    with pytest.raises(SystemExit) as e:
        warmup.main()
    assert e.value.code == 2 and "no state.pt in" in capsys.readouterr().err
