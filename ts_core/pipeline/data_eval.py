"""Evaluate one policy checkpoint of a run on the user's own benchmark (`ts eval RUN --data FILE.parquet`).

The file is a verl-schema data set (thinking_seeds.store.schemas.DATASET_SCHEMA: data_source, prompt,
ability, reward_model {style, ground_truth}, extra_info {split, index}), read by the same
`load_dataset` a run's own data goes through. Each prompt is sampled n times with the run's eval
settings (temperature, sampling seed), scored with the run's reward or `reward` (the syntax of
`reward.fn`: package.module:function, or a backend name: math_verify, reasoning_gym), and reported
per data source: avg@n, pass@k and maj@k (thinking_seeds.evals.benchmark).

The weights come from the run's checkpoints (`policy_step`, `RunDir.policy`), like every other
evaluation. Results: `runs/<id>/evals/data-<file stem>/step_<step>.json` (the returned object) and
the numbers in `metrics/iteration=<step>/evaluate-data-<file stem>.parquet` for `ts sql`.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from thinking_seeds.config import load_saved_config
from thinking_seeds.config.sections import RewardConfig
from thinking_seeds.config.sections_loop import MAX_EVAL_SEQUENCES
from thinking_seeds.data.sources import Prompt, load_dataset
from thinking_seeds.evals.benchmark import ScoredSample, benchmark_metrics, math_verify_pairs
from thinking_seeds.evals.evaluation import evaluate_prompts
from thinking_seeds.pipeline.graph import stage_seed
from thinking_seeds.pipeline.policy_steps import policy_step
from thinking_seeds.pipeline.session import Session, Timer, run_verifier
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.parquet_io import DataError
from thinking_seeds.store.run_dir import RunDir

__all__ = ["data_stage", "evaluate_checkpoint_on_data", "flat_metrics", "reward_config"]


def reward_config(spec: str | None, base: RewardConfig) -> RewardConfig:
    """The run's reward (`spec` None), or `spec` with the run's time limit and workers: a
    package.module:function (custom, as reward.fn) or a backend name (math_verify, reasoning_gym)."""
    if spec is None:
        return base
    keep = base.model_dump(exclude={"backend", "fn"})
    return RewardConfig.model_validate({**keep, **({"fn": spec} if ":" in spec else {"backend": spec})})


def data_stage(data_path: str | os.PathLike[str]) -> str:
    """The metrics stage (and evals/ folder) of an evaluation on a file: evaluate-data-<file stem>."""
    return f"evaluate-data-{Path(data_path).stem}"


def _max_positions(checkpoint: Path) -> int | None:
    """The model's max_position_embeddings, from the checkpoint's config.json (None: it does not say)."""
    try:
        value = json.loads((checkpoint / "config.json").read_text()).get("max_position_embeddings")
    except (OSError, ValueError, AttributeError):
        return None
    return int(value) if isinstance(value, int) and value > 0 else None


def _check_lengths(prompts: list[Prompt], tokenizer: Any, max_positions: int | None, budget: int, path: Path) -> None:
    """Refuse, in one line and before the model is loaded, a file with rows whose prompt plus the response
    budget need more positions than the model has (a 1 MB prompt was sampled for minutes, in gigabytes).
    A prompt of more characters than positions x 64 is refused without being tokenized."""
    if max_positions is None:
        return
    from thinking_seeds.engine.models import encode_prompt

    too_long: list[tuple[int, str]] = []  # (row, why)
    for i, p in enumerate(prompts):
        chars = sum(len(m["content"]) for m in p.chat())
        if chars > 64 * max_positions:
            too_long.append((i, f"has a prompt of {chars} characters (not tokenized: over 64 per position)"))
            continue
        n = len(encode_prompt(tokenizer, p.chat()))
        if n + budget > max_positions:
            too_long.append((i, f"has a prompt of {n} tokens + {budget} new tokens = {n + budget} positions"))
    if too_long:
        i, why = too_long[0]
        raise DataError(
            f"{path}: {len(too_long)} row(s) do not fit the model: row {i} ({prompts[i].prompt_id}) {why}, more "
            f"than its max_position_embeddings={max_positions}; shorten or leave out those prompts, or lower "
            "--max-new-tokens"
        )


def _check_reward_fits(reward: RewardConfig, prompts: list[Prompt], path: Path) -> None:
    if reward.backend == "reasoning_gym" and any(p.rg_entry is None for p in prompts):
        raise DataError(
            f"{path}: the run's reward is reasoning-gym's checker, which needs extra_info.rg_entry, and these rows "
            "have none; pass --reward math_verify (or --reward package.module:function)"
        )


def evaluate_checkpoint_on_data(
    run_dir: str | os.PathLike[str],
    data_path: str | os.PathLike[str],
    step: int | None = None,
    reward: str | None = None,
    samples: int | None = None,
    prompts: int | None = None,
    max_new_tokens: int | None = None,
) -> dict[str, Any]:
    """Evaluate θ_step (default: the latest checkpoint) on the prompts of `data_path` (the first
    `prompts` of them, default all), `samples` per prompt (default eval.samples); write and return
    {"run_id", "step", "data", "reward", "samples", "path", "metrics": {...}, "by_source": {src: {...}}}."""
    run = RunDir(Path(run_dir))
    if not run.config_path.exists():
        raise DataError(f"{run.root} is not a run directory (no config.yaml); check the run id and --runs-dir")
    step = policy_step(run, step)
    run.check_config()  # before anything the config names is imported: a run directory is data until then
    path = Path(data_path)
    rows = load_dataset(path, limit=prompts)
    cfg = load_saved_config(run.config_path)
    # A copy, not a validated assignment: the run's checks tie reward to data.source (reasoning-gym data
    # is scored by its checkers), but what is scored here is the file, whatever the run trained on.
    cfg = cfg.model_copy(update={"reward": reward_config(reward, cfg.reward)})
    _check_reward_fits(cfg.reward, rows, path)
    n = cfg.eval.samples if samples is None else samples
    if n < 1:
        raise DataError(f"--samples must be >= 1, got {n}")
    if n * len(rows) > MAX_EVAL_SEQUENCES:  # every response is held until scored (evals/evaluation.py)
        raise DataError(
            f"{path}: {len(rows):,} prompts x --samples {n} = {n * len(rows):,} responses held at once, more than "
            f"{MAX_EVAL_SEQUENCES:,}; lower --samples or take fewer rows with --prompts N"
        )
    budget = max_new_tokens or cfg.rollout.max_new_tokens
    s = Session(run, cfg)
    t = Timer()
    try:
        _check_lengths(rows, s.tokenizer, _max_positions(run.policy(step)), budget, path)
        s.use_weights(s.run.policy(step), t)
        with t("generation"):
            res = evaluate_prompts(
                s.engine(t),
                s.tokenizer,
                rows,
                s.verifier,
                n=n,
                temperature=cfg.eval.temperature,
                max_new_tokens=budget,
                seed=stage_seed(cfg, step, "evaluate"),
                keep_samples=True,
            )
    finally:
        s.close()
    scored = [
        ScoredSample(x["prompt_id"], x["data_source"], x["answer"], x["reward"], x["status"], x["response_len"])
        for x in res.samples
    ]
    with t("majority_vote"):  # answer equivalence is math-verify's, whatever reward scored the samples
        voter = run_verifier(run, "math_verify", True, None, cfg.reward.timeout_s, cfg.reward.workers)
        scores = benchmark_metrics(scored, n, math_verify_pairs(voter))
    stage = data_stage(path)
    out: dict[str, Any] = {
        "run_id": run.run_id,
        "step": step,
        "data": str(path),
        "reward": cfg.reward.fn or cfg.reward.backend,
        "samples": n,
        "metrics": scores["metrics"],
        "by_source": scores["by_source"],
        "seconds": {k: round(v, 3) for k, v in t.seconds.items()},
    }
    run.write_metrics(step, stage, flat_metrics(out))
    result = run.root / "evals" / stage / f"step_{step:06d}.json"
    out["path"] = run.rel(result)
    atomic_write(result, json.dumps(out, indent=2) + "\n")
    return out


def flat_metrics(result: dict[str, Any]) -> dict[str, float]:
    """The numbers of a result as one level of metric names: eval/<metric> over all prompts and
    eval/<data_source>/<metric> per source; statuses as eval/status_<status>."""
    flat: dict[str, float] = {}
    groups = {"eval": result["metrics"], **{f"eval/{src}": m for src, m in result["by_source"].items()}}
    for prefix, m in groups.items():
        for k, v in m.items():
            if k == "status":
                flat.update({f"{prefix}/status_{st}": float(c) for st, c in v.items()})
            else:
                flat[f"{prefix}/{k}"] = float(v)
    flat.update({f"time/evaluate/{k}": v for k, v in result.get("seconds", {}).items()})
    return flat
