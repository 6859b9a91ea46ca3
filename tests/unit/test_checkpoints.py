import hashlib
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from thinking_seeds.store.checkpoints import (
    MANIFEST_NAME,
    OPTIMIZER_NAME,
    CheckpointError,
    CheckpointInfo,
    list_checkpoints,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from thinking_seeds.store.historical_pool import HistoricalPool
from thinking_seeds.store.optimizer_state import load_optimizer_state, save_optimizer_state

torch.set_num_threads(1)

CHARS = list("0123456789+-=> ab")


def tiny_tokenizer():
    """Character-level tokenizer built locally (no hub)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(["<pad>", "<eos>", *CHARS])}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>")


def tiny_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(cfg)


@pytest.fixture(scope="module")
def model_and_tokenizer():
    return tiny_model(), tiny_tokenizer()


@pytest.fixture
def saved(tmp_path, model_and_tokenizer):
    model, tok = model_and_tokenizer
    return save_checkpoint(model, tok, tmp_path / "checkpoints", step=7, extra={"config_hash": "abc"})


def flip_byte(path: Path, offset_from_end: int = 5) -> None:
    data = bytearray(path.read_bytes())
    data[-offset_from_end] ^= 0xFF
    path.write_bytes(bytes(data))


# --- save / load ------------------------------------------------------------


def test_round_trip_gives_identical_weights_and_tokenizer(saved, model_and_tokenizer):
    model, tok = model_and_tokenizer
    assert saved.name == "step_000007"
    loaded, loaded_tok = load_checkpoint(saved)
    ref = model.state_dict()
    got = loaded.state_dict()
    assert ref.keys() == got.keys()
    assert all(torch.equal(ref[k], got[k]) for k in ref)
    assert loaded_tok("12+3>").input_ids == tok("12+3>").input_ids == [3, 4, 12, 5, 15]  # "1" "2" "+" "3" ">"


def test_manifest_records_step_hashes_param_count_and_extra(saved, model_and_tokenizer):
    model, _ = model_and_tokenizer
    manifest = json.loads((saved / MANIFEST_NAME).read_text())
    assert manifest["step"] == 7
    assert manifest["extra"] == {"config_hash": "abc"}
    assert manifest["param_count"] == sum(p.numel() for p in model.parameters())
    weights = saved / "model.safetensors"
    assert manifest["sha256"]["model.safetensors"] == hashlib.sha256(weights.read_bytes()).hexdigest()
    assert {"config.json", "tokenizer.json"} <= manifest["sha256"].keys()
    info = verify_checkpoint(saved)
    assert (info.step, info.path, dict(info.extra)) == (7, saved, {"config_hash": "abc"})


def test_save_leaves_no_temp_dirs_and_refuses_to_overwrite(saved, model_and_tokenizer):
    model, tok = model_and_tokenizer
    root = saved.parent
    assert [p.name for p in root.iterdir()] == ["step_000007"]
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_checkpoint(model, tok, root, step=7)
    other = tiny_model(seed=1)
    save_checkpoint(other, tok, root, step=7, overwrite=True)
    assert [p.name for p in root.iterdir()] == ["step_000007"]
    reloaded, _ = load_checkpoint(saved)
    assert torch.equal(reloaded.lm_head.weight, other.lm_head.weight)
    assert not torch.equal(reloaded.lm_head.weight, model.lm_head.weight)


def test_failed_save_leaves_nothing_behind(tmp_path, model_and_tokenizer):
    model, _ = model_and_tokenizer

    class BrokenTokenizer:
        def save_pretrained(self, path):
            raise OSError("disk full")

    root = tmp_path / "checkpoints"
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(model, BrokenTokenizer(), root, step=3)
    assert list(root.iterdir()) == []


def test_extra_must_be_json(tmp_path, model_and_tokenizer):
    model, tok = model_and_tokenizer
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_checkpoint(model, tok, tmp_path, step=1, extra={"bad": object()})


# --- verification -----------------------------------------------------------


def test_corrupt_weights_raise_naming_the_file(saved):
    flip_byte(saved / "model.safetensors")
    with pytest.raises(CheckpointError, match=r"is corrupt: model\.safetensors sha256 [0-9a-f]{64} != manifest") as e:
        verify_checkpoint(saved)
    assert "re-run the stage that writes it" in str(e.value)  # not in a run directory: no `ts train` hint
    assert isinstance(e.value, ValueError)
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(saved)


def test_missing_file_is_reported(saved):
    (saved / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match=r"incomplete: tokenizer\.json .* is missing"):
        verify_checkpoint(saved)


def test_pickled_weights_are_refused(saved):
    (saved / "pytorch_model.bin").write_bytes(b"not really a pickle")
    with pytest.raises(CheckpointError, match=r"pickled files \['pytorch_model\.bin'\]"):
        load_checkpoint(saved)


def test_unlisted_safetensors_are_refused(saved):
    (saved / "model-extra.safetensors").write_bytes(b"x")
    with pytest.raises(CheckpointError, match=r"not in its manifest \['model-extra\.safetensors'\]"):
        verify_checkpoint(saved)


def test_missing_checkpoint_dir(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        verify_checkpoint(tmp_path / "step_000001")


# --- listing ----------------------------------------------------------------


def test_list_checkpoints_sorted_ignoring_temp_dirs(tmp_path, model_and_tokenizer):
    model, tok = model_and_tokenizer
    root = tmp_path / "ck"
    assert list_checkpoints(root) == []
    for step in (20, 0, 10):
        save_checkpoint(model, tok, root, step=step)
    (root / ".tmp_step_000030_xyz").mkdir()  # a crashed save
    (root / "notes.txt").write_text("hi")
    assert [c.step for c in list_checkpoints(root)] == [0, 10, 20]
    (root / "step_000040").mkdir()  # hand-made, no manifest
    with pytest.raises(CheckpointError, match=r"step_000040 has no manifest\.json"):
        list_checkpoints(root)


# --- optimizer state --------------------------------------------------------


def _train_step(model, opt, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(8, 4, generator=g)
    opt.zero_grad()
    model(x).pow(2).mean().backward()
    opt.step()


def _linear_and_adamw(weights=None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 1))
    if weights is not None:
        model.load_state_dict(weights)
    opt = torch.optim.AdamW(
        [{"params": model[0].parameters()}, {"params": model[1].parameters(), "lr": 0.05}],
        lr=0.1,
        betas=(0.8, 0.9),
        weight_decay=0.1,
    )
    return model, opt


def test_optimizer_state_round_trip_gives_identical_next_step(tmp_path):
    model, opt = _linear_and_adamw()
    for s in range(3):
        _train_step(model, opt, seed=s)
    path = tmp_path / OPTIMIZER_NAME
    save_optimizer_state(opt, path)
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    resumed, resumed_opt = _linear_and_adamw(weights)
    load_optimizer_state(resumed_opt, path)
    fresh, fresh_opt = _linear_and_adamw(weights)  # control: same weights, no moments

    for m, o in ((model, opt), (resumed, resumed_opt), (fresh, fresh_opt)):
        _train_step(m, o, seed=99)
    for a, b in zip(model.parameters(), resumed.parameters(), strict=True):
        assert torch.equal(a, b)
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), fresh.parameters(), strict=True))
    assert resumed_opt.param_groups[0]["betas"] == (0.8, 0.9)
    assert resumed_opt.param_groups[1]["lr"] == 0.05
    assert resumed_opt.state[resumed[0].weight]["step"].item() == 4.0


def test_optimizer_saved_inside_checkpoint_is_hashed_and_resumes(tmp_path, model_and_tokenizer):
    _, tok = model_and_tokenizer
    model = tiny_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    ids = torch.tensor([[3, 4, 12, 5, 14]])
    for _ in range(2):
        opt.zero_grad()
        model(input_ids=ids, labels=ids).loss.backward()
        opt.step()
    path = save_checkpoint(model, tok, tmp_path, step=2, optimizer=opt)
    assert OPTIMIZER_NAME in json.loads((path / MANIFEST_NAME).read_text())["sha256"]

    resumed, _ = load_checkpoint(path)
    resumed_opt = torch.optim.AdamW(resumed.parameters(), lr=1e-2)
    load_optimizer_state(resumed_opt, path / OPTIMIZER_NAME)
    for m, o in ((model, opt), (resumed, resumed_opt)):
        o.zero_grad()
        m(input_ids=ids, labels=ids).loss.backward()
        o.step()
    ref, got = model.state_dict(), resumed.state_dict()
    assert all(torch.equal(ref[k], got[k]) for k in ref)

    flip_byte(path / OPTIMIZER_NAME)
    with pytest.raises(CheckpointError, match=r"corrupt: optimizer\.safetensors"):
        verify_checkpoint(path)


def test_optimizer_state_for_other_parameters_is_refused(tmp_path):
    model, opt = _linear_and_adamw()
    _train_step(model, opt, seed=0)
    save_optimizer_state(opt, tmp_path / "opt.safetensors")
    other = torch.optim.AdamW(torch.nn.Linear(4, 3).parameters())
    with pytest.raises(CheckpointError, match=r"param groups of sizes \[2, 2\] but the optimizer has \[2\]"):
        load_optimizer_state(other, tmp_path / "opt.safetensors")
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(CheckpointError, match="holds AdamW state but the optimizer is SGD"):
        load_optimizer_state(sgd, tmp_path / "opt.safetensors")


def test_optimizer_file_is_not_a_pickle(tmp_path):
    model, opt = _linear_and_adamw()
    _train_step(model, opt, seed=0)
    path = tmp_path / "opt.safetensors"
    save_optimizer_state(opt, path)
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
    assert {"state.0.exp_avg", "state.0.exp_avg_sq", "state.0.step", "state.3.exp_avg"} <= keys


# --- historical pool --------------------------------------------------------


def infos(*steps):
    return [CheckpointInfo(Path(f"/ck/step_{s:06d}"), s, "t", 1, {}) for s in steps]


def steps_of(checkpoints):
    return [c.step for c in checkpoints]


def test_pool_keeps_last_size_strictly_older_than_current():
    ck = infos(0, 10, 20, 30, 40)
    pool = HistoricalPool(size=2, include_initial=False, pick="uniform")
    assert steps_of(pool.members(ck, current_step=40)) == [20, 30]  # 40 is the current policy
    assert steps_of(pool.members(ck, current_step=25)) == [10, 20]  # 30, 40 are not its history
    assert pool.members(ck, current_step=0) == []


def test_pool_include_initial_adds_step_zero_once():
    ck = infos(30, 0, 10, 20, 40)
    assert steps_of(HistoricalPool(2, True).members(ck, 40)) == [0, 20, 30]
    assert steps_of(HistoricalPool(5, True).members(ck, 40)) == [0, 10, 20, 30]
    assert steps_of(HistoricalPool(0, True).members(ck, 40)) == [0]
    assert HistoricalPool(2, True).members(ck, 0) == []  # step 0 is then the current policy
    with pytest.raises(ValueError, match="no step-0 checkpoint"):
        HistoricalPool(2, True).members(infos(10, 20), 30)


def test_pool_pick_rules():
    members = infos(20, 0, 10)
    assert HistoricalPool(3, pick="recent").pick(members, random.Random(0)).step == 20
    assert HistoricalPool(3, pick="oldest").pick(members, random.Random(0)).step == 0
    uniform = HistoricalPool(3, pick="uniform")
    rng = random.Random(0)
    picks = [uniform.pick(members, rng).step for _ in range(300)]
    assert {s: picks.count(s) for s in (0, 10, 20)} == pytest.approx({0: 100, 10: 100, 20: 100}, abs=30)
    gen_picks = [uniform.pick(members, np.random.default_rng(5)).step for _ in range(3)]
    assert len(set(gen_picks)) == 1  # same seed, same pick
    shuffled = [uniform.pick(list(reversed(members)), random.Random(1)).step]
    assert shuffled == [uniform.pick(members, random.Random(1)).step]  # input order does not matter
    with pytest.raises(TypeError, match="rng must be"):
        uniform.pick(members, 3)


def test_empty_pool_says_how_to_fix_it():
    pool = HistoricalPool(2, pick="uniform")
    with pytest.raises(ValueError, match=r"pool is empty.*pool\.include_initial.*pool\.snapshot_every"):
        pool.pick([], random.Random(0))
    with pytest.raises(ValueError, match=r"empty at step 0 \(checkpoints at steps \[0\]\)"):
        pool.select(infos(0), 0, random.Random(0))
    assert pool.select(infos(0, 10), 20, random.Random(0)).step in (0, 10)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"size": 2, "pick": "newest"}, "pool.pick must be one of"),
        ({"size": -1}, "pool.size must be an int >= 0"),
        ({"size": 0, "include_initial": False}, "could never hold a checkpoint"),
    ],
)
def test_pool_config_is_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HistoricalPool(**kwargs)


def test_duplicate_steps_are_refused():
    with pytest.raises(ValueError, match="duplicate checkpoint steps"):
        HistoricalPool(2).members(infos(0, 10, 10), 20)


def test_snapshot_links_model_files_without_optimizer(tmp_path, model_and_tokenizer):
    from thinking_seeds.store.checkpoints import snapshot_checkpoint

    model, tok = model_and_tokenizer
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    src = save_checkpoint(model, tok, tmp_path / "policy", 3, optimizer=opt)
    dst = snapshot_checkpoint(src, tmp_path / "pool", 3, extra={"iteration": 3})
    info = verify_checkpoint(dst)
    assert info.step == 3 and info.extra == {"iteration": 3}
    assert not (dst / "optimizer.safetensors").exists()
    assert (dst / "model.safetensors").read_bytes() == (src / "model.safetensors").read_bytes()
    loaded, _ = load_checkpoint(dst)
    for (n, a), (_, b) in zip(model.state_dict().items(), loaded.state_dict().items(), strict=True):
        assert torch.equal(a, b), n
    flip_byte(src / "model.safetensors")  # a corrupt source is refused, never copied
    with pytest.raises(CheckpointError, match="model.safetensors"):
        snapshot_checkpoint(src, tmp_path / "pool", 4)
