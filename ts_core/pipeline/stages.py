"""The stages of one Thinking Seeds iteration (SPEC §2), as plain functions over a run directory.

    prepare          config.yaml, data splits, θ_0                      (once per run)
    snapshot     k   θ_k enters the historical pool H every `pool.snapshot_every` iterations
    seeds        k   pool checkpoints write drafts; cut at λ·|z|; prefixes.parquet
    continuation k   θ_k samples on-policy responses and continues every seed; generated.parquet
    verify       k   math-verify rewards, statuses, group advantages; rollouts.parquet
    update       k   loss of SPEC §3 on the rollouts -> θ_{k+1}
    evaluate     k   held-out accuracy / pass@k of θ_{k+1} (every `eval.every` iterations)

Each stage reads only the run directory, writes atomically, and returns a Manifest. The plain loop
(`thinking_seeds.pipeline.loop`) and the Prefect flow (`flows/train.py`) call exactly these functions.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import torch

from thinking_seeds.algo.advantages import get_adv_estimator
from thinking_seeds.data.chain_sum import strategy_of
from thinking_seeds.store.checkpoints import list_checkpoints, save_checkpoint, snapshot_checkpoint, verify_checkpoint
from thinking_seeds.store.historical_pool import HistoricalPool
from thinking_seeds.config import RunConfig, load_saved_config, save_config
from thinking_seeds.data.builtin_tasks import BUILTIN_TASKS, build_splits
from thinking_seeds.data.sources import Prompt, check_user_data, load_dataset
from thinking_seeds.evals.evaluation import evaluate_prompts
from thinking_seeds.engine.models import encode_prompt, load_model, resolve_device, resolve_model_path
from thinking_seeds.store.parquet_io import read_table, write_table_atomic
from thinking_seeds.data.rewards import Verifier, check_reward_fn, count_statuses, shared_verifier
from thinking_seeds.engine.rollout import HFEngine, SamplingParams
from thinking_seeds.store.run_dir import Manifest, RunDir
from thinking_seeds.store.schemas import PREFIX_SCHEMA, ROLLOUT_SCHEMA
from thinking_seeds.algo.seeding import cut_length, draw_ratio

STAGES = ("snapshot", "seeds", "continuation", "verify", "update", "evaluate")


def policy_writer(step: int) -> tuple[str, int]:
    """The stage that wrote θ_step: prepare for θ_0, the update of iteration step-1 otherwise."""
    return ("prepare", 0) if step == 0 else ("update", step - 1)


def upstream_of(stage: str, k: int) -> list[tuple[str, int]]:
    """The (stage, iteration) whose outputs stage k reads: the dependency edges of SPEC §2.

    Recorded in each manifest (as digests) and part of the Prefect cache key, so a stage whose
    inputs were recomputed differently is redone. Digests chain (see Manifest.digest), so θ_k's
    writer also stands for everything before it (earlier pool snapshots, the data splits).
    """
    if stage == "prepare":
        return []
    policy = policy_writer(k)
    return {
        "snapshot": [policy],
        "seeds": [policy, ("snapshot", k)],
        "continuation": [policy, ("seeds", k)],
        "verify": [("continuation", k)],
        "update": [policy, ("verify", k)],
        "evaluate": [policy_writer(k + 1)],  # θ_{k+1}; k = -1 evaluates θ_0
    }[stage]


def stage_seed(cfg: RunConfig, k: int, stage: str) -> int:
    """A sampling seed per (run seed, iteration, stage): reruns reproduce, stages differ."""
    h = hashlib.sha256(f"{cfg.seed}/{k}/{stage}".encode()).digest()
    return int.from_bytes(h[:4], "little")


@dataclass
class Timer:
    seconds: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def __call__(self, name: str):
        t = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t


_ENGINES: dict[tuple, object] = {}
_TRACKERS: dict[str, object] = {}


def close_trackers() -> None:
    """Flush and close every tracker of this process (at exit, or when a run ends)."""
    for t in list(_TRACKERS.values()):
        t.close()
    _TRACKERS.clear()


class Session:
    """Shared, lazily loaded state for the stages of one process: config, prompts, engine, verifier.

    A Prefect task builds a fresh Session per stage (one model load per stage); the plain loop
    keeps one for the whole run (one load per run, weights swapped in place).
    """

    def __init__(self, run: RunDir, cfg: RunConfig | None = None):
        self.run = run
        self.cfg = cfg or load_saved_config(run.config_path)
        self._engine: HFEngine | None = None
        self._tokenizer = None
        self._prompts: dict[str, list[Prompt]] = {}

    # -- lazily built resources -----------------------------------------------------------
    @property
    def tokenizer(self):
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            self._tokenizer = AutoTokenizer.from_pretrained(self.run.policy(0), local_files_only=True)
            self._tokenizer.padding_side = "left"
        return self._tokenizer

    def engine(self, timer: Timer | None = None):
        if self._engine is None:
            # One engine per (run, engine kind, dtype) and process: the stages of a Prefect flow
            # run as tasks in one process, and each only swaps the weights it needs.
            key = (str(self.run.root.resolve()), self.cfg.rollout.engine, self.cfg.engine_dtype, self.cfg.device,
                   self.cfg.rollout.batch_size)
            self._engine = _ENGINES.get(key)
            if self._engine is None:
                with (timer or Timer())("model_load"):
                    if self.cfg.rollout.engine == "vllm":
                        from thinking_seeds.engine.vllm_engine import VLLMEngine  # optional extra

                        self._engine = VLLMEngine(self.run.policy(0), self.cfg)
                    else:
                        # On cfg.device, in bf16 whenever bf16 is in play (cfg.engine_dtype).
                        model, tok = load_model(self.run.policy(0), self.cfg.engine_dtype, device=self.cfg.device)
                        self._engine = HFEngine(model, tok, batch_size=self.cfg.rollout.batch_size)
                for old in _ENGINES.values():  # keep one: a process moving on to another run frees the last
                    if hasattr(old, "close"):
                        old.close()  # vLLM holds its KV cache until closed
                _ENGINES.clear()
                _ENGINES[key] = self._engine
        return self._engine

    def use_weights(self, ckpt: Path, timer: Timer | None = None) -> None:
        eng = self.engine(timer)
        with (timer or Timer())("weight_swap"):
            eng.load_weights(ckpt)

    @property
    def verifier(self) -> "Verifier":
        # One pool per process, shared by every stage and session (see shared_verifier).
        r = self.cfg.reward
        return shared_verifier(r.backend, r.partial_credit, r.fn, r.timeout_s)

    def label(self):
        """The task's solution label for diversity metrics (None: chain_sum's strategy share)."""
        src = self.cfg.data.source
        return BUILTIN_TASKS[src].label if src in BUILTIN_TASKS and src != "chain_sum" else None

    def prompts(self, split: str) -> list[Prompt]:
        if split not in self._prompts:
            self._prompts[split] = load_dataset(self.run.data_dir / f"{split}.parquet")
        return self._prompts[split]

    def iteration_prompts(self, k: int) -> list[Prompt]:
        """The prompts of iteration k: a seeded draw without replacement, same for every method."""
        train = self.prompts("train")
        n = min(self.cfg.rollout.prompts_per_iteration, len(train))
        rng = random.Random(f"{self.cfg.data.seed}/{self.cfg.seed}/prompts/{k}")
        return rng.sample(train, n)

    @property
    def tracker(self):
        """The run's experiment trackers (`logger`), one per run and process (None: console only)."""
        if self.cfg.logger == ["console"] or not self.cfg.logger:
            return None
        key = str(self.run.root.resolve())
        if key not in _TRACKERS:
            from thinking_seeds.store.tracking import Tracker

            _TRACKERS[key] = Tracker(self.cfg.logger, self.run.root, self.run.run_id, self.cfg.model_dump(mode="json"))
            if len(_TRACKERS) == 1:
                import atexit

                atexit.register(close_trackers)
        return _TRACKERS[key]

    def close(self) -> None:
        self._engine = None  # the engine stays in the process cache for the next stage


# ---------------------------------------------------------------------------------------------
# prepare
# ---------------------------------------------------------------------------------------------


def prepare(run: RunDir, cfg: RunConfig) -> Manifest:
    """Write config.yaml, the data splits and θ_0 (a verified copy of the base model)."""
    check_user_data(cfg.data)  # a user's bad Parquet is refused before anything is written
    run.root.mkdir(parents=True, exist_ok=True)
    if run.config_path.exists():
        old = load_saved_config(run.config_path)
        if old.config_hash() != cfg.config_hash():
            raise ValueError(
                f"run {run.root} was started with another config (hash {old.config_hash()} != {cfg.config_hash()}); "
                "resume it with the same preset and --set values, or choose a new --run-id"
            )
    else:
        tmp = run.config_path.with_suffix(".yaml.tmp")
        save_config(cfg, tmp)
        tmp.replace(run.config_path)
    t = Timer()
    with t("data"):
        if cfg.data.source != "parquet":  # generated: a built-in task or a reasoning-gym mixture
            if not all((run.data_dir / f"{s}.parquet").exists() for s in ("train", "validation", "test")):
                build_splits(run.data_dir, cfg.data)
        else:
            run.data_dir.mkdir(parents=True, exist_ok=True)
            for split, src in (("train", cfg.data.train_path), ("validation", cfg.data.val_path)):
                load_dataset(src)  # validates columns and ground truths, naming the file
                shutil.copyfile(src, run.data_dir / f"{split}.parquet")
    if cfg.reward.fn:  # the user's function on a real row, before any model is loaded
        check_reward_fn(cfg.reward.fn, load_dataset(run.data_dir / "validation.parquet")[0])
    with t("model_load"):
        if not (run.policy(0) / "manifest.json").exists():
            model, tok = load_model(resolve_model_path(cfg.model.path), cfg.model.dtype)
            save_checkpoint(model, tok, run.policy_root, 0, extra={"source": cfg.model.path})
        verify_checkpoint(run.policy(0))
    m = Manifest("prepare", 0, cfg.config_hash(), seconds=t.seconds)
    for name, p in [("config", run.config_path), ("policy", run.policy(0))] + [
        (s, run.data_dir / f"{s}.parquet") for s in ("train", "validation")
    ]:
        m.outputs[name] = run.rel(p)
        m.hashes[name] = run.file_hash(p)
    return m


# ---------------------------------------------------------------------------------------------
# snapshot
# ---------------------------------------------------------------------------------------------


def snapshot(s: Session, k: int) -> Manifest:
    """Every `pool.snapshot_every` iterations θ_k joins the pool H (it is historical from k+1 on)."""
    cfg, run = s.cfg, s.run
    m = Manifest("snapshot", k, cfg.config_hash())
    t = Timer()
    if k % cfg.pool.snapshot_every == 0:
        dst = run.pool_root / f"step_{k:06d}"
        if not (dst / "manifest.json").exists():
            with t("io"):
                snapshot_checkpoint(run.policy(k), run.pool_root, k, extra={"iteration": k})
        verify_checkpoint(dst)
        m.outputs["checkpoint"] = run.rel(dst)
        m.hashes["checkpoint"] = run.file_hash(dst)
    m.seconds = t.seconds
    return m


# ---------------------------------------------------------------------------------------------
# seeds
# ---------------------------------------------------------------------------------------------


def _pool_members(s: Session, k: int):
    cfg = s.cfg
    pool = HistoricalPool(cfg.pool.size, cfg.pool.include_initial, cfg.pool.pick)
    members = pool.members(list_checkpoints(s.run.pool_root), current_step=k)
    return pool, members


def seeds(s: Session, k: int) -> Manifest:
    """Offline prefix generation: historical checkpoints write drafts, cut at λ·|z| (SPEC §2.2)."""
    cfg, run = s.cfg, s.run
    m = Manifest("seeds", k, cfg.config_hash())
    t = Timer()
    if not cfg.seeded:
        m.seconds = t.seconds
        return m  # on-policy methods have no seeds
    prompts = s.iteration_prompts(k)
    rng = random.Random(stage_seed(cfg, k, "seeds"))
    tok = s.tokenizer
    rows: list[dict] = []

    # Each draft is continued `continuations_per_seed` times by the continuation stage.
    n_drafts = cfg.rollout.seeds_per_group // cfg.rollout.continuations_per_seed
    if cfg.prefix.source == "dataset":
        # LUFFY guidance: the data set's worked solution is the whole off-policy response. Its
        # behaviour log-prob is 0 (a deterministic guide), as LUFFY assumes π_φ = 1.
        for p in prompts:
            if not p.target:
                raise ValueError(f"prompt {p.prompt_id} has no `target` solution; prefix.source=dataset needs one per prompt")
            ids = tok(p.target, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
            for j in range(n_drafts):
                rows.append(_prefix_row(run, k, p, j, -1, -1, 1.0, ids, [0.0] * len(ids), tok, len(ids), None))
    else:
        pool, members = _pool_members(s, k)
        # Before the first snapshot is historical (iteration 0), θ_0 itself writes the seeds:
        # its ratio π_θ/π_h is exactly 1 there, so the group keeps its shape for every method.
        sources = {c.step: c.path for c in members} or {k: run.policy(k)}
        plan = []  # (prompt, seed index, source step, λ)
        for p in prompts:
            for j in range(n_drafts):
                step = pool.pick(members, rng).step if members else k
                plan.append((p, j, step, draw_ratio(rng, cfg.prefix.ratio_min, cfg.prefix.ratio_max)))
        by_source: dict[int, list[int]] = defaultdict(list)
        for i, (_, _, step, _) in enumerate(plan):
            by_source[step].append(i)
        drafts: dict[int, object] = {}
        for step, idx in sorted(by_source.items()):
            s.use_weights(sources[step], t)
            ctx = [encode_prompt(tok, plan[i][0].chat()) for i in idx]
            params = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, cfg.rollout.max_new_tokens,
                                    seed=stage_seed(cfg, k, f"seeds/{step}"))
            with t("generation"):
                for i, g in zip(idx, s.engine(t).generate(ctx, params)):
                    drafts[i] = g
        texts = [tok.decode(drafts[i].token_ids, skip_special_tokens=True) for i in range(len(plan))]
        with t("verification"):
            verdicts = s.verifier.score_batch(texts, [p for p, *_ in plan])
        for i, (p, j, step, lam) in enumerate(plan):
            g = drafts[i]
            piece_texts = [tok.decode([x]) for x in g.token_ids] if cfg.prefix.cut == "line" else None
            L = cut_length(g.token_ids, lam, cfg.prefix.cut, piece_texts)
            rows.append(_prefix_row(run, k, p, j, step, k - step, lam, g.token_ids[:L], g.logprobs[:L], tok,
                                    len(g.token_ids), verdicts[i].reward))
    with t("io"):
        table = pa.Table.from_pylist(rows, schema=PREFIX_SCHEMA)
        path = write_table_atomic(table, run.prefixes(k), schema=PREFIX_SCHEMA)
    m.outputs["prefixes"], m.hashes["prefixes"], m.rows["prefixes"] = run.rel(path), run.file_hash(path), len(rows)
    lens = [len(r["prefix_token_ids"]) for r in rows]
    m.metrics = {"seeds/mean_prefix_len": sum(lens) / max(1, len(lens)),
                 "seeds/draft_reward": _mean([r["draft_reward"] for r in rows if r["draft_reward"] is not None])}
    m.seconds = t.seconds
    return m


def _mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def _prefix_row(run, k, p, j, step, age, lam, ids, logps, tok, draft_len, draft_reward) -> dict:
    return {
        "run_id": run.run_id, "iteration": k, "prompt_id": p.prompt_id, "seed_id": f"{k}-{p.prompt_id}-{j}",
        "source_step": step, "source_age": age, "prefix_ratio": lam, "prefix_token_ids": list(ids),
        "behaviour_logprobs": list(logps), "prefix_text": tok.decode(list(ids), skip_special_tokens=True),
        "draft_len": draft_len, "draft_reward": draft_reward,
    }


# ---------------------------------------------------------------------------------------------
# continuation
# ---------------------------------------------------------------------------------------------


def continuation(s: Session, k: int) -> Manifest:
    """θ_k samples the on-policy responses and continues every seed to the end (SPEC §2.3)."""
    cfg, run = s.cfg, s.run
    m = Manifest("continuation", k, cfg.config_hash())
    t = Timer()
    prompts = s.iteration_prompts(k)
    tok = s.tokenizer
    with t("io"):
        pre = read_table(run.prefixes(k), PREFIX_SCHEMA).to_pylist() if cfg.seeded else []
    seeds_of: dict[str, list[dict]] = defaultdict(list)
    for r in pre:
        seeds_of[r["prompt_id"]].append(r)
    n_on = cfg.rollout.group_size - cfg.rollout.seeds_per_group
    T = cfg.rollout.max_new_tokens
    rows, ctx, caps, gen_rows = [], [], [], []
    for p in prompts:
        pids = encode_prompt(tok, p.chat())
        group = [(None, [], [], None)] * n_on + [
            (r, r["prefix_token_ids"], r["behaviour_logprobs"], r["source_step"]) if _keep_seed(cfg, r)
            else (None, [], [], None)  # prefix.filter: a wrong draft's slot goes to an on-policy sample
            for r in seeds_of[p.prompt_id] for _ in range(cfg.rollout.continuations_per_seed)
        ]
        for j, (r, prefix, blp, step) in enumerate(group):
            full = r is not None and r["prefix_ratio"] >= 1.0
            kind = "on_policy" if r is None else ("offpolicy_full" if full else "seeded")
            rows.append({"run_id": run.run_id, "iteration": k, "prompt_id": p.prompt_id, "sample_id": j,
                         "kind": kind, "source_step": step, "prefix_len": len(prefix), "prompt_token_ids": pids,
                         "token_ids": list(prefix), "old_logprobs": [0.0] * len(prefix),
                         "behaviour_logprobs": list(blp), "response_text": "", "answer": None,
                         "status": "pending", "reward": None, "advantage": None})
            if not full:
                ctx.append(pids + list(prefix))
                caps.append(max(0, T - len(prefix)))
                gen_rows.append(len(rows) - 1)
    s.use_weights(run.policy(k), t)
    params = SamplingParams(cfg.rollout.temperature, cfg.rollout.top_p, T, seed=stage_seed(cfg, k, "continuation"))
    with t("generation"):
        gens = s.engine(t).generate(ctx, params, max_new=caps) if ctx else []
    for i, g in zip(gen_rows, gens):
        r = rows[i]
        r["token_ids"] = r["token_ids"] + g.token_ids
        r["old_logprobs"] = r["old_logprobs"] + g.logprobs
        r["behaviour_logprobs"] = r["behaviour_logprobs"] + [0.0] * len(g.token_ids)
    for r in rows:
        r["response_text"] = tok.decode(r["token_ids"], skip_special_tokens=True)
    with t("io"):
        path = write_table_atomic(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA), run.generated(k), schema=ROLLOUT_SCHEMA)
    m.outputs["generated"], m.hashes["generated"], m.rows["generated"] = run.rel(path), run.file_hash(path), len(rows)
    m.metrics = {"rollout/generated_tokens": float(sum(len(g.token_ids) for g in gens)),
                 "rollout/response_len": _mean(len(r["token_ids"]) for r in rows)}
    m.seconds = t.seconds
    return m


def _keep_seed(cfg: RunConfig, seed_row: dict) -> bool:
    """prefix.filter=correct_draft keeps only seeds whose whole draft was verified correct (data-set
    solutions have no draft reward and are kept)."""
    if cfg.prefix.filter == "none" or seed_row["draft_reward"] is None:
        return True
    return seed_row["draft_reward"] >= 1.0


# ---------------------------------------------------------------------------------------------
# verify (+ advantages: the trainer never sees rewards)
# ---------------------------------------------------------------------------------------------


def verify(s: Session, k: int) -> Manifest:
    cfg, run = s.cfg, s.run
    m = Manifest("verify", k, cfg.config_hash())
    t = Timer()
    with t("io"):
        rows = read_table(run.generated(k), ROLLOUT_SCHEMA).to_pylist()
    by_id = {p.prompt_id: p for p in s.prompts("train")}
    with t("verification"):
        verdicts = s.verifier.score_batch([r["response_text"] for r in rows], [by_id[r["prompt_id"]] for r in rows])
    for r, v in zip(rows, verdicts):
        r["reward"], r["status"], r["answer"] = v.reward, v.status, v.answer
    keys = [baseline_group(cfg, r) for r in rows]
    group_of = {key: i for i, key in enumerate(dict.fromkeys(keys))}
    rewards = torch.tensor([r["reward"] for r in rows], dtype=torch.float32)
    groups = torch.tensor([group_of[key] for key in keys])
    on_policy = torch.tensor([r["kind"] == "on_policy" for r in rows])
    baseline = on_policy if cfg.advantage.baseline == "on_policy" else torch.ones_like(on_policy)
    adv = get_adv_estimator(cfg.advantage.estimator)(rewards, groups, baseline)
    for r, a in zip(rows, adv.tolist()):
        r["advantage"] = a
    with t("io"):
        path = write_table_atomic(pa.Table.from_pylist(rows, schema=ROLLOUT_SCHEMA), run.rollouts(k), schema=ROLLOUT_SCHEMA)
    m.outputs["rollouts"], m.hashes["rollouts"], m.rows["rollouts"] = run.rel(path), run.file_hash(path), len(rows)
    metrics = {f"verify/status_{st}": float(c) for st, c in count_statuses(verdicts).items()}
    metrics["reward/mean"] = float(rewards.mean())
    for kind in ("on_policy", "seeded", "offpolicy_full"):
        rs = [r["reward"] for r in rows if r["kind"] == kind]
        if rs:
            metrics[f"reward/{kind}"] = _mean(rs)
    if s.label() is None:
        strategies = [strategy_of(r["response_text"]) for r in rows if r["kind"] == "on_policy"]
        for st in ("a", "b", "other"):
            if strategies:
                metrics[f"rollout/strategy_{st}"] = strategies.count(st) / len(strategies)
    metrics["advantage/zero_frac"] = float((adv == 0).float().mean())
    m.metrics = metrics
    m.seconds = t.seconds
    return m


def baseline_group(cfg: RunConfig, row: dict) -> tuple:
    """The group whose statistics form a sample's advantage baseline.

    Normally the prompt. With advantage.baseline=same_seed, a seeded sample's group is the
    continuations of its own seed (the continuation stage lays a group out as n_on on-policy
    samples, then each seed `continuations_per_seed` times in a row), and on-policy samples form
    their own group: a continuation of a draft that already went wrong is no longer judged
    against samples that never saw it.
    """
    if cfg.advantage.baseline != "same_seed" or row["kind"] == "on_policy":
        return (row["prompt_id"], "all" if cfg.advantage.baseline != "same_seed" else "on_policy")
    n_on = cfg.rollout.group_size - cfg.rollout.seeds_per_group
    return (row["prompt_id"], "seed", (row["sample_id"] - n_on) // cfg.rollout.continuations_per_seed)


# ---------------------------------------------------------------------------------------------
# update
# ---------------------------------------------------------------------------------------------


def update(s: Session, k: int) -> Manifest:
    """θ_k + rollouts -> θ_{k+1}, in process or through `accelerate launch` (same function)."""
    cfg, run = s.cfg, s.run
    m = Manifest("update", k, cfg.config_hash())
    t = Timer()
    ref = run.policy(0) if cfg.loss.kl_coef > 0 else None
    if cfg.update.launcher == "in_process":
        from thinking_seeds.train.trainer import run_update

        with t("update_total"):
            metrics = run_update(run.policy(k), run.rollouts(k), run.policy_root, k + 1, cfg, ref_dir=ref)
    else:
        metrics_path = run.root / "manifests" / f"iteration={k}" / "update_metrics.json"
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        with t("update_total"):
            metrics = launch_update(run, cfg, k, metrics_path, ref)
    out = run.policy(k + 1)
    verify_checkpoint(out)
    m.outputs["policy"], m.hashes["policy"] = run.rel(out), run.file_hash(out)
    if cfg.checkpoint.keep_last is not None:  # after θ_{k+1} is safe: older steps may go
        from thinking_seeds.store.retention import prune_policies

        pruned = prune_policies(run.policy_root, k + 1, cfg.checkpoint.keep_last, cfg.checkpoint.keep_every, run.file_hash)
        metrics["checkpoint/pruned"] = float(len(pruned))
    m.metrics = metrics
    m.seconds = t.seconds
    return m


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def accelerate_command(run: RunDir, cfg: RunConfig, k: int, metrics_path: Path, ref: Path | None) -> list[str]:
    n = cfg.update.num_processes
    precision = cfg.update.mixed_precision  # accelerate's own words: no | bf16
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(n), "--num_machines", "1",
           "--mixed_precision", precision, "--dynamo_backend", "no"]
    device = resolve_device(cfg.device)  # a device this machine lacks fails here, in one line
    if device.type == "cuda" and device.index and n == 1:
        cmd += ["--gpu_ids", str(device.index)]  # device=cuda:N: the worker sees that GPU as cuda:0
    if n > 1:
        # With Accelerator(cpu=True) this means gloo DDP on CPU (SPEC §7). A free rendezvous port
        # per launch: the default 29500 can still be held by a run killed a moment ago.
        cmd += ["--multi_gpu", "--main_process_port", str(_free_port())]
    cmd += ["-m", "thinking_seeds.train.trainer", "--policy", str(run.policy(k)), "--rollouts", str(run.rollouts(k)),
            "--out-root", str(run.policy_root), "--step", str(k + 1), "--config", str(run.config_path),
            "--metrics-out", str(metrics_path)]
    if ref is not None:
        cmd += ["--ref", str(ref)]
    if device.type == "cpu":
        cmd += ["--cpu"]  # device=cpu, or auto without a GPU
    return cmd


def _die_with_parent() -> None:
    """In the launcher child: get SIGTERM when the parent dies (Linux PR_SET_PDEATHSIG).

    Without it a `kill -9` of a run leaves `accelerate launch` and its workers training on, racing
    the resumed run for the same θ_{k+1}; on SIGTERM the launcher stops its workers too.
    """
    try:
        import ctypes
        import signal

        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # not Linux: no such guard


def launch_update(run: RunDir, cfg: RunConfig, k: int, metrics_path: Path, ref: Path | None) -> dict:
    import json
    import os

    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("ACCELERATE_DISABLE_RICH", "1")
    cmd = accelerate_command(run, cfg, k, metrics_path, ref)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, preexec_fn=_die_with_parent)
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"accelerate update of iteration {k} failed (exit {proc.returncode}):\n{tail}\ncommand: {' '.join(cmd)}")
    return json.loads(metrics_path.read_text())


# ---------------------------------------------------------------------------------------------
# evaluate
# ---------------------------------------------------------------------------------------------


def eval_due(cfg: RunConfig, k: int) -> bool:
    """Evaluate θ_{k+1} after iteration k; k = -1 evaluates θ_0 (the starting point)."""
    return k == -1 or (k + 1) % cfg.eval.every == 0 or k == cfg.iterations - 1


def evaluate_policy(s: Session, step: int, t: Timer | None = None, seeded: bool = False,
                    per_prompt_out: Path | None = None) -> dict[str, float]:
    """Held-out avg@n and pass@k of θ_step (the metrics are labelled with the policy step).

    `per_prompt_out`: also write one row per prompt (correct count, distinct solution labels,
    their entropy; plain and, with `seeded`, seeded) to that Parquet file — what the comparison's
    hard-subset and explorable-space measures are computed from.
    """
    cfg = s.cfg
    t = t or Timer()
    s.use_weights(s.run.policy(step), t)
    prompts = s.prompts(cfg.eval.split)[: cfg.eval.prompts]
    with t("generation"):
        res = evaluate_prompts(s.engine(t), s.tokenizer, prompts, s.verifier, n=cfg.eval.samples,
                               temperature=cfg.eval.temperature, max_new_tokens=cfg.rollout.max_new_tokens,
                               seed=stage_seed(cfg, step, "evaluate"), label=s.label())
    metrics = res.flat("eval")
    rows = [dict(r, mode="plain") for r in res.per_prompt]
    if seeded:
        seeded_metrics, seeded_rows = _seeded_eval(s, step, prompts, t)
        metrics.update(seeded_metrics)
        rows += [dict(r, mode="seeded") for r in seeded_rows]
    if per_prompt_out is not None:
        write_table_atomic(pa.Table.from_pylist([dict(r, step=step) for r in rows], schema=PER_PROMPT_SCHEMA),
                           per_prompt_out, schema=PER_PROMPT_SCHEMA)
    return metrics


# One row per (prompt, mode) of an evaluation: the raw material of pass@k on a subset of prompts.
PER_PROMPT_SCHEMA = pa.schema([
    pa.field("step", pa.int64(), nullable=False), pa.field("mode", pa.string(), nullable=False),
    pa.field("prompt_id", pa.string(), nullable=False), pa.field("n", pa.int64(), nullable=False),
    pa.field("correct", pa.int64(), nullable=False), pa.field("distinct_labels", pa.int64()),
    pa.field("label_entropy", pa.float64()),
])


def _seeded_eval(s: Session, step: int, prompts: list[Prompt], t: Timer) -> tuple[dict[str, float], list[dict]]:
    """Explorable solution space (SPEC §5): θ_step continuing seeds from its historical pool.

    Same prompts and sample count as the plain evaluation, so the two pass@k curves compare
    directly. Uses the method's λ range, or U[0.2, 0.6] for methods without prefixes.
    """
    cfg = s.cfg
    pool, members = _pool_members(s, step)
    if not members:
        return {}, []
    lo, hi = (cfg.prefix.ratio_min, cfg.prefix.ratio_max) if cfg.prefix.ratio_max < 1.0 else (0.2, 0.6)
    rng = random.Random(stage_seed(cfg, step, "evaluate/seeded"))
    n = cfg.eval.samples
    plan = [(i, pool.pick(members, rng).step, draw_ratio(rng, lo, hi)) for i in range(len(prompts)) for _ in range(n)]
    ctx = [encode_prompt(s.tokenizer, p.chat()) for p in prompts]
    drafts: dict[int, list[int]] = {}
    for src in sorted({st for _, st, _ in plan}):
        idx = [j for j, (_, st, _) in enumerate(plan) if st == src]
        s.use_weights(next(c.path for c in members if c.step == src), t)
        params = SamplingParams(cfg.eval.temperature, 1.0, cfg.rollout.max_new_tokens, seed=stage_seed(cfg, step, f"evaluate/seeded/{src}"))
        with t("generation"):
            for j, g in zip(idx, s.engine(t).generate([ctx[plan[j][0]] for j in idx], params)):
                pieces = [s.tokenizer.decode([x]) for x in g.token_ids] if cfg.prefix.cut == "line" else None
                drafts[j] = g.token_ids[: cut_length(g.token_ids, plan[j][2], cfg.prefix.cut, pieces)]
    s.use_weights(s.run.policy(step), t)
    with t("generation"):
        res = evaluate_prompts(s.engine(t), s.tokenizer, prompts, s.verifier, n=n, temperature=cfg.eval.temperature,
                               max_new_tokens=cfg.rollout.max_new_tokens, seed=stage_seed(cfg, step, "evaluate/cont"),
                               prefixes=[drafts[j] for j in range(len(plan))], label=s.label())
    return res.flat("eval_seeded"), res.per_prompt


def evaluate(s: Session, k: int) -> Manifest:
    m = Manifest("evaluate", k, s.cfg.config_hash())
    t = Timer()
    if eval_due(s.cfg, k):
        # The seeded (explorable-space) evaluation doubles the cost: only for the final policy.
        metrics = evaluate_policy(s, k + 1, t, seeded=s.cfg.eval.seeded and k == s.cfg.iterations - 1)
        path = s.run.write_metrics(k + 1, "evaluate", metrics)
        m.outputs["metrics"], m.hashes["metrics"] = s.run.rel(path), s.run.file_hash(path)
        m.metrics = metrics
    m.seconds = t.seconds
    return m


STAGE_FUNCS = {"snapshot": snapshot, "seeds": seeds, "continuation": continuation, "verify": verify,
               "update": update, "evaluate": evaluate}
