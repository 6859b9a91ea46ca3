"""Build the tiny base model offline: char tokenizer + small Llama + supervised warm-up (docs/algorithm.md §7).

The warm-up teaches two solution strategies (`a`: left-to-right partial sums, `b`: positive terms
first) 50/50, then stops while the model is still unreliable — RL needs headroom (pass@1 low) and
diversity (pass@16 well above pass@1). Accuracy climbs steeply late in the warm-up, so candidate
checkpoints are evaluated along the way and the chosen one is the one whose held-out pass@1 lies
in the target band with the most headroom to pass@16.

    python -m thinking_seeds.train.warmup                           # rebuilds data/models/tiny-chainsum
    python -m thinking_seeds.train.warmup --steps 300 --out /tmp/m  # a quick, weaker one

The full rebuild takes about 5 minutes alone on 2 cores.

This module holds the build's loop (train, evaluate candidates, save the resumable state) and its
command line. The supervised step itself is train/sft.py's (shared with the SFT control and SmolLM2's
warm-up), the resumable state train/warmup_state.py's, and the choice among the candidates with the
report and the rebuild chain train/warmup_report.py's.
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
import tempfile
import time
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from thinking_seeds.config import DataConfig
from thinking_seeds.data.builtin_tasks import BUILTIN_TASKS, get_task
from thinking_seeds.data.rewards import Verifier
from thinking_seeds.data.sources import load_dataset
from thinking_seeds.engine.models import builtin_model_path, char_tokenizer, count_params, load_model, tiny_llama
from thinking_seeds.engine.rollout import HFEngine
from thinking_seeds.evals.evaluation import evaluate_prompts
from thinking_seeds.train.sft import encode_corpus, sft_optimizer, sft_step
from thinking_seeds.train.warmup_report import choose, publish, stage_model, warmup_report
from thinking_seeds.train.warmup_state import STATE_FILE, ResumeError, corpus_digest, load_state, restore, save_state


def warmup_pairs(spec, splits: dict[str, Path], n: int, seed: int, data_cfg: DataConfig, *, keep_out_train: bool):
    """The warm-up corpus: n (question, solution) pairs of problems in none of the held-out splits, and
    with `keep_out_train` in none of the RL training prompts either (build_tiny_model's rl_train_size)."""
    kept_out = ("validation", "test", "train") if keep_out_train else ("validation", "test")
    return spec.warmup_corpus(n, seed, set().union(*(spec.held_out_keys(splits[k]) for k in kept_out)), data_cfg)


def build_tiny_model(
    out_dir: Path,
    *,
    task: str = "chain_sum",
    steps: int = 700,
    batch_size: int = 64,
    lr: float = 2e-3,
    schedule: str = "constant",
    min_lr_factor: float = 0.1,
    corpus_size: int = 100_000,
    eval_every: int = 100,
    eval_from: int = 500,
    eval_prompts: int = 64,
    eval_samples: int = 16,
    max_new_tokens: int = 64,
    target: tuple[float, float] | None = (0.15, 0.30),
    seed: int = 0,
    warmup_steps: int = 75,
    data_cfg: DataConfig | None = None,
    rl_train_size: int | None = None,
    init: Path | None = None,
    until_plateau: float | None = None,
    command: str | None = None,
    model_size: dict[str, int] | None = None,
    state_dir: Path | None = None,
    save_every: int | None = None,
    resume: bool = False,
    stop_after: int | None = None,
) -> dict:
    """Warm a fresh tiny Llama up on `task`'s worked solutions and save the chosen candidate.

    `target` = a pass@1 band: the candidate in it with the most pass@n headroom (the chain_sum demo
    model, stopped early on purpose). `target=None`: the last candidate (a model trained to its
    supervised plateau: countdown, `schedule="cosine"`), with the plateau check in the report.

    `rl_train_size`: the RL training split's size (data.train_size); its prompts are kept out of the
    corpus too. A finite task needs it: game24's warm-up otherwise covers every multiset RL trains on,
    the base memorizes them (training reward 0.98 against validation pass@1 0.31 on the first base)
    and RL gets no learning signal. None: only the held-out splits are kept out (countdown: its problem
    space is so large that RL's prompts are new anyway).

    `init`: continue from that model (and its tokenizer) instead of a fresh one, evaluating it first
    (step 0): a second phase at a low constant lr when the first one ended still improving. With
    `until_plateau`, training stops at the first evaluation after which the last three pass@1 lie
    within that spread (e.g. 0.02 = ±1 point); its report nests the report of `init`.

    `command`: the command line that ran this build; the report's `rebuild` is then the chain that
    rebuilds the model from nothing (the init's own `rebuild`, then this command).

    `model_size`: tiny_llama's hidden / layers / heads / intermediate for a fresh model (default 0.86M).
    `state_dir`: save the resumable state there every `save_every` steps (default: eval_every) and keep
    the candidates there; `resume` continues from its last save, bit-exactly (`warmup_state`);
    `stop_after`: stop after that step's save without writing `out_dir` (a build run in slices).
    Returns {"stopped_at": step} then.
    """
    _check_resume(resume, state_dir)  # before the corpus is built: that takes a minute
    t0 = time.time()
    torch.manual_seed(seed)
    spec = get_task(task)
    # the RL task: its held-out prompts (and with rl_train_size its training prompts) never appear in the warm-up
    if data_cfg is None:
        data_cfg = DataConfig(source=task, **({} if rl_train_size is None else {"train_size": rl_train_size}))
    work = Path(tempfile.mkdtemp(prefix="ts-warmup-"))
    verifier = Verifier(backend=spec.reward, partial_credit=False)  # its worker pool starts at the first score
    try:  # the work folder and the verifier's workers go on any end but a kill -9
        cand_root = Path(state_dir) / "candidates" if state_dir is not None else work
        splits = spec.build_splits(work / "data", data_cfg)
        val_prompts = load_dataset(splits["validation"], limit=eval_prompts)
        pairs = warmup_pairs(spec, splits, corpus_size, seed, data_cfg, keep_out_train=rl_train_size is not None)

        model, tok, init_report = _start_model(spec, init, seed, model_size)
        ids, labels, _ = encode_corpus(tok, pairs)
        total = steps if schedule == "cosine" else None
        opt, sched = sft_optimizer(model, lr, warmup_steps, total, min_lr_factor)
        # A continued warm-up draws other batches than its first phase did from the same corpus.
        gen = torch.Generator().manual_seed(seed + (1 if init is not None else 0))
        engine = HFEngine(model, tok, batch_size=256)

        candidates: list[dict] = []
        first = 0 if init is not None else 1
        save_every = save_every or eval_every
        settings = dict(
            task=task, steps=steps, batch_size=batch_size, lr=lr, schedule=schedule, min_lr_factor=min_lr_factor,
            corpus_size=corpus_size, eval_every=eval_every, eval_from=eval_from, eval_prompts=eval_prompts,
            eval_samples=eval_samples, max_new_tokens=max_new_tokens, seed=seed, warmup_steps=warmup_steps,
            init=str(init) if init is not None else None, until_plateau=until_plateau, model_size=model_size,
        )  # fmt: skip
        # only when set: an earlier build's settings (and its resume check) stay as they were
        if rl_train_size is not None:
            settings["rl_train_size"] = rl_train_size
        digest = corpus_digest(ids, labels)
        if resume:
            state = load_state(Path(state_dir), settings=settings, digest=digest)
            first = restore(state, model=model, opt=opt, sched=sched, gen=gen)
            candidates = state["candidates"]
            t0 = time.time() - state["elapsed"]
        with Progress(
            TextColumn("warm-up"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"),
        ) as bar:
            bar_task = bar.add_task("sft", total=steps, info="", completed=max(0, first - 1))
            for step in range(first, steps + 1):
                loss = (
                    sft_step(model, opt, sched, ids, labels, batch_size, gen, tok.pad_token_id)
                    if step
                    else float("nan")
                )
                info = f"loss {loss:.3f}"
                if step == 0 or (step >= eval_from and (step % eval_every == 0 or step == steps)):
                    model.eval()
                    res = evaluate_prompts(
                        engine,
                        tok,
                        val_prompts,
                        verifier,
                        n=eval_samples,
                        max_new_tokens=max_new_tokens,
                        seed=seed,
                        label=None if task == "chain_sum" else spec.label,
                    )
                    cdir = cand_root / f"step_{step:06d}"
                    candidates.append(
                        _candidate(model, res, cdir, step=step, loss=loss, n=eval_samples, sched=sched, t0=t0)
                    )
                    info += f" | pass@1 {res.pass_at_k[1]:.3f} pass@{eval_samples} {res.pass_at_k[eval_samples]:.3f}"
                    bar.console.log(f"step {step}: {info}")
                    last3 = [c["pass@1"] for c in candidates[-3:]]
                    if until_plateau is not None and len(last3) == 3 and max(last3) - min(last3) <= until_plateau:
                        bar.console.log(f"plateau: the last three pass@1 {last3} lie within {until_plateau}")
                        break
                bar.update(bar_task, advance=1, info=info)
                if state_dir is not None and step and (step % save_every == 0 or step == stop_after):
                    extra = {"candidates": candidates, "elapsed": time.time() - t0, "settings": settings}
                    save_state(Path(state_dir), step=step, model=model, opt=opt, sched=sched, gen=gen, extra={
                        **extra, "corpus_digest": digest})  # fmt: skip
                    bar.console.log(f"step {step}: state saved to {state_dir}")
                if step == stop_after:
                    return {"stopped_at": step}

        best = choose(candidates, target, eval_samples)
        out_dir = Path(out_dir)
        tmp_out = stage_model(best["dir"], tok, out_dir)
        report = warmup_report(
            settings, best=best, target=target, candidates=candidates, params=count_params(model),
            final_lr=sched.get_last_lr()[0], build_seconds=round(time.time() - t0, 1), init=init,
            init_report=init_report, eval_prompts=len(val_prompts), command=command,
        )  # fmt: skip
        publish(tmp_out, out_dir, report)
        return report
    finally:
        try:
            verifier.kill_pool()  # not close(): its workers ignore Ctrl-C, and a stuck one would hold the exit
        finally:
            shutil.rmtree(work, ignore_errors=True)


def _check_resume(resume: bool, state_dir: Path | None) -> None:
    """A --resume needs a state directory holding a saved state (one-line ResumeError otherwise)."""
    if resume and state_dir is None:
        raise ResumeError("--resume needs --state-dir (where the interrupted build saved its state)")
    if resume and not (Path(state_dir) / STATE_FILE).is_file():
        raise ResumeError(f"--resume: no {STATE_FILE} in {state_dir}; start the build without --resume")


def _start_model(spec, init: Path | None, seed: int, model_size: dict[str, int] | None):
    """(model, tokenizer, init's warmup_report or None): `init` and its tokenizer, else a fresh tiny Llama
    over the task's characters."""
    if init is None:
        tok = char_tokenizer(spec.charset)
        model = tiny_llama(len(tok), tok.pad_token_id, tok.eos_token_id, seed=seed, **(model_size or {}))
        return model, tok, None
    model, tok = load_model(init)
    report = Path(init) / "warmup_report.json"
    return model, tok, json.loads(report.read_text()) if report.is_file() else None


def _candidate(model, res, cdir: Path, *, step: int, loss: float, n: int, sched, t0: float) -> dict:
    """Save the evaluated model to `cdir` and return its row of the report's candidates (`res`: its evaluation)."""
    model.save_pretrained(cdir)
    return {
        "step": step,
        "pass@1": res.pass_at_k[1],
        f"pass@{n}": res.pass_at_k[n],
        "distinct_patterns": res.distinct_labels,
        "pattern_entropy": res.label_entropy,
        "strategy_b": res.strategy_share.get("b"),
        "loss": loss,
        "lr": sched.get_last_lr()[0],
        "seconds": round(time.time() - t0, 1),
        "dir": str(cdir),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", default="chain_sum", choices=sorted(BUILTIN_TASKS))
    ap.add_argument("--out", type=Path, default=builtin_model_path("tiny"))
    ap.add_argument("--steps", type=int, default=700)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument(
        "--schedule",
        default="constant",
        choices=["constant", "cosine"],
        help="after the ramp: constant lr, or cosine decay to 0.1 x lr at the last step",
    )
    ap.add_argument(
        "--select",
        default="band",
        choices=["band", "last"],
        help="band: the candidate with pass@1 in 0.15-0.30 (the demo model); last: the final one (plateau)",
    )
    ap.add_argument("--min-lr-factor", type=float, default=0.1, help="cosine: the last step's lr as a share of --lr")
    ap.add_argument("--corpus-size", type=int, default=100_000)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--eval-from", type=int, default=500)
    ap.add_argument("--eval-prompts", type=int, default=64)
    ap.add_argument(
        "--eval-samples",
        type=int,
        default=16,
        help="samples per prompt in each evaluation (pass@1 is their mean; more samples, less noise)",
    )
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--warmup-steps", type=int, default=75, help="linear learning-rate ramp, then the schedule")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: all cores)")
    ap.add_argument(
        "--init", type=Path, default=None, help="continue from this model (a second phase) instead of a fresh one"
    )
    ap.add_argument(
        "--until-plateau",
        type=float,
        default=None,
        help="stop once the last three evaluations' pass@1 lie within this spread (e.g. 0.02)",
    )
    ap.add_argument("--hidden", type=int, default=None, help="fresh model: hidden size (default 128: 0.86M)")
    ap.add_argument("--layers", type=int, default=None, help="fresh model: layers (default 4)")
    ap.add_argument("--intermediate", type=int, default=None, help="fresh model: MLP width (default 384)")
    ap.add_argument(
        "--rl-train-size",
        type=int,
        default=None,
        help="keep the RL training split of this size (data.train_size) out of the corpus too (game24: else the "
        "base memorizes the prompts RL trains on)",
    )
    ap.add_argument("--state-dir", type=Path, default=None, help="save the resumable state (and the candidates) here")
    ap.add_argument("--save-every", type=int, default=None, help="steps between state saves (default: eval-every)")
    ap.add_argument("--resume", action="store_true", help="continue from --state-dir's last save (same command)")
    ap.add_argument("--stop-after", type=int, default=None, help="stop after this step's save (a build in slices)")
    a = ap.parse_args()
    if a.rl_train_size is not None and a.rl_train_size < 1:
        ap.error(f"--rl-train-size {a.rl_train_size}: the RL training split needs at least 1 prompt")
    size = {k: v for k, v in (("hidden", a.hidden), ("layers", a.layers), ("intermediate", a.intermediate)) if v}
    if a.threads:
        torch.set_num_threads(a.threads)
    try:
        rep = run_build(a, size)
    except ResumeError as e:  # one line, exit 2: the command line is what is wrong
        print(f"warmup: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    except ValueError as e:  # e.g. --rl-train-size leaves no multiset for the warm-up corpus
        if "warm-up corpus" not in str(e):
            raise
        print(f"warmup: {e}; lower --rl-train-size", file=sys.stderr)
        raise SystemExit(2) from None
    if "stopped_at" in rep:
        print(f"stopped after step {rep['stopped_at']}; continue with the same command and --resume")
        return
    print(json.dumps({k: v for k, v in rep.items() if k != "candidates"}, indent=2))
    chosen = next(c for c in rep["candidates"] if c["step"] == rep["chosen_step"])
    print("chosen:", json.dumps(chosen))


# build_tiny_model's keywords that the command line's flags of the same name give as they are
FLAGS_AS_GIVEN = (
    "task", "steps", "batch_size", "lr", "schedule", "min_lr_factor", "corpus_size", "eval_every", "eval_prompts",
    "eval_samples", "max_new_tokens", "seed", "warmup_steps", "init", "until_plateau", "rl_train_size", "state_dir",
    "save_every", "resume", "stop_after",
)  # fmt: skip


def run_build(a: argparse.Namespace, size: dict[str, int]) -> dict:
    return build_tiny_model(
        a.out,
        **{k: getattr(a, k) for k in FLAGS_AS_GIVEN},
        eval_from=min(a.eval_from, a.steps),
        target=None if a.select == "last" else (0.15, 0.30),
        # --resume is how this build was run, not what it is: the rebuild chain leaves it out.
        command=shlex.join(
            ["python", "-m", "thinking_seeds.train.warmup", *(x for x in sys.argv[1:] if x != "--resume")]
        ),
        model_size=size or None,
    )


if __name__ == "__main__":
    main()
