"""TRL's side of bench/peer_trl.py: GRPOTrainer for a few steps on our tiny model and prompts, timed.

    .venv-trl/bin/python bench/_trl_driver.py --model data/models/tiny-chainsum --prompts P.json --steps 5 --out R.json

Runs in TRL's own venv (`make trl-venv`), never the project's; it imports nothing of ours. The prompts
file (written by bench/peer_trl.py) holds, step by step, the 16 prompts our GRPO iteration k draws
(`Session.iteration_prompts(k)`), each with its chat messages and ground truth; the dataset is not
shuffled, so TRL's step k+1 sees exactly our iteration k's prompts. The reward is ours, in-process:
the last `\\boxed{...}` of the completion checked against the ground truth by math-verify, parsed and
verified exactly as thinking_seeds.data.verifier_worker does (no worker process, no timeout alarm).

Settings matched to our tiny GRPO (see BENCHMARKS.md): 8 generations per prompt, 16 prompts (128
completions) per optimizer step in one forward/backward, 64 new tokens, T = 1, top-p 1, no top-k,
AdamW lr 1e-4 constant (betas 0.9/0.999, no weight decay), grad clip 1.0, clip 0.2/0.28, loss_type
"dapo" (token mean over the batch's tokens), beta 0 (no reference model, no KL), group-std advantages,
num_iterations 1, fp32, CPU, 1 torch thread, no gradient checkpointing, no logging, no saving.

Timing: a TrainerCallback stamps the end of every optimizer step; step i's wall time is the gap from
step i-1's end (step 1 from train begin: the warm-up, reported apart), and so is its CPU time (user +
system, this process and its children: none here). Inside a step, wrappers time
`_generate` (tokenize the prompts, model.generate, decode), the reward function, and `_prepare_inputs`
(generation + rewards + advantages + padding); the rest of the step is the loss forward/backward,
the optimizer step and the Trainer's bookkeeping.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("WANDB_DISABLED", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def last_boxed(text: str) -> str | None:
    """thinking_seeds.data.verdicts.last_boxed, copied (this venv does not have our package)."""
    start = text.rfind("\\boxed{")
    while start != -1:
        depth = 0
        for i in range(start + len("\\boxed"), len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    content = text[start + len("\\boxed{") : i].strip()
                    return content or None
        start = text.rfind("\\boxed{", 0, start)
    return None


def math_verify_reward(answer: str | None, ground_truth: str) -> float:
    """thinking_seeds.data.verifier_worker._score_math_verify's decision, in-process."""
    if answer is None:
        return 0.0
    from math_verify import parse, verify

    gold = parse(ground_truth if "\\boxed" in ground_truth else f"\\boxed{{{ground_truth}}}", parsing_timeout=None)
    pred = parse(f"\\boxed{{{answer}}}", parsing_timeout=None)
    return 1.0 if gold and verify(gold, pred, timeout_seconds=None) else 0.0


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live descendants (bench/peer_trl.py's measure)."""
    import psutil

    me = psutil.Process()
    total = 0.0
    for p in [me, *me.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--prompts", required=True, help="JSON: [[{messages, ground_truth}, ...16], ...] one list per step")
    ap.add_argument("--steps", type=int, required=True, help="optimizer steps (the first is the warm-up)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--max-new", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-4)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    t_start = time.perf_counter()
    import logging
    import tempfile

    import torch
    import transformers
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    transformers.logging.set_verbosity_error()
    t_import = time.perf_counter() - t_start

    steps_prompts = json.loads(open(a.prompts).read())[: a.steps]
    n_prompts = len(steps_prompts[0])
    rows = [p for step in steps_prompts for p in step]
    ds = Dataset.from_list([{"prompt": p["messages"], "ground_truth": p["ground_truth"]} for p in rows])

    keys = ("generate", "reward", "prepare", "tokens", "generate_cpu", "prepare_cpu")
    timers: dict[str, float] = dict.fromkeys(keys, 0.0)

    def reward_fn(completions, ground_truth, **_):
        t = time.perf_counter()
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        out = [math_verify_reward(last_boxed(x), g) for x, g in zip(texts, ground_truth, strict=True)]
        timers["reward"] += time.perf_counter() - t
        return out

    reward_fn.__name__ = "math_verify_boxed"

    tok = AutoTokenizer.from_pretrained(a.model, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32, local_files_only=True)
    batch = n_prompts * a.group
    out_dir = tempfile.mkdtemp(prefix="trl-bench-")
    cfg = GRPOConfig(
        output_dir=out_dir,
        max_steps=a.steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=a.group,
        num_iterations=1,
        max_completion_length=a.max_new,
        temperature=1.0,
        top_p=1.0,
        top_k=0,
        learning_rate=a.lr,
        lr_scheduler_type="constant",
        warmup_steps=0,
        weight_decay=0.0,
        adam_beta1=0.9,
        adam_beta2=0.999,
        max_grad_norm=1.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        beta=0.0,
        scale_rewards="group",
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        shuffle_dataset=False,
        seed=a.seed,
        logging_strategy="no",
        save_strategy="no",
        eval_strategy="no",
        report_to="none",
        disable_tqdm=True,
        optim="adamw_torch",  # our trainer: torch.optim.AdamW (for-loop); TRL would pick the fused one
        dataloader_num_workers=0,
        log_completions=False,
    )

    stamps: list[float] = []
    cpu: list[float] = []

    class StepTimer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            stamps.append(time.perf_counter())
            cpu.append(cpu_seconds())

        def on_step_end(self, args, state, control, **kw):
            stamps.append(time.perf_counter())
            cpu.append(cpu_seconds())
            parts.append(dict(timers))
            for key in timers:
                timers[key] = 0.0

    parts: list[dict[str, float]] = []
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward_fn],
        args=cfg,
        train_dataset=ds,
        processing_class=tok,
        callbacks=[StepTimer()],
    )

    def timed(name, fn, count_tokens=False):
        def wrapper(*args, **kw):
            t, c = time.perf_counter(), time.thread_time()
            res = fn(*args, **kw)
            timers[name] += time.perf_counter() - t
            timers[name + "_cpu"] += time.thread_time() - c
            if count_tokens:
                timers["tokens"] += sum(len(c) for c in res[1])  # completion ids, EOS included
            return res

        return wrapper

    trainer._generate = timed("generate", trainer._generate, count_tokens=True)
    trainer._prepare_inputs = timed("prepare", trainer._prepare_inputs)
    # The prompt ids TRL feeds the model, for bench/peer_trl.py's check against our encode_prompt.
    first_ids = tok.apply_chat_template(
        rows[0]["messages"], add_generation_prompt=True, tokenize=True, return_dict=True
    )["input_ids"]
    t_setup = time.perf_counter() - t_start
    try:
        trainer.train()
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)  # save_strategy="no": only an empty folder
    walls = [b - a_ for a_, b in zip(stamps, stamps[1:], strict=False)]
    cpus = [b - a_ for a_, b in zip(cpu, cpu[1:], strict=False)]
    res = {
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__, "trl": trl.__version__},
        "torch_threads": torch.get_num_threads(),
        "import_s": t_import,
        "setup_s": t_setup,
        "step_walls": walls,
        "step_cpu": cpus,
        "step_parts": parts,
        "first_prompt_ids": list(first_ids),
        "optimizer": type(trainer.optimizer).__name__,
        "optim": str(cfg.optim),
    }
    with open(a.out, "w") as f:
        json.dump(res, f)


if __name__ == "__main__":
    main()
