"""Our GRPO step against TRL's GRPOTrainer on the same model, prompts and settings (issue #12, item 5).

    make trl-venv                                   # TRL in its own venv (.venv-trl), never in .venv
    OMP_NUM_THREADS=1 .venv/bin/python bench/peer_trl.py [--rounds 5] [--steps 5] [--ours loop,prefect]

Every round runs each side once, interleaved, the order turned every round (a drift of the machine's
load spreads over all sides instead of landing on one):

  trl      bench/_trl_driver.py under .venv-trl/bin/python: GRPOTrainer, steps+1 optimizer steps from
           θ_0 (the first is the warm-up), a fresh process per round;
  loop     our tiny preset with algorithm=grpo through the plain loop (pipeline.loop.train), in this
           process, steps+2 iterations from θ_0: iteration 0 is the warm-up, the last one carries the
           run's final evaluation, iterations 1..steps are measured;
  prefect  the same through the Prefect training flow (`ts train`; no server), in this process;
  seeds    the tiny preset with its own algorithm (thinking_seeds: historical seeds, the pool's
           snapshots) through the plain loop, in this process: the ratio seeds / loop is what
           Thinking Seeds costs over our GRPO per step.

Memory: every side's process tree (the side's process and its descendants: for ours this process,
which runs the pipeline, with the persistent trainer, the verifier's worker, the child guard and
Prefect's server; for TRL the driver) is sampled every 0.1 s (bench/process_tree.py TreePeak): the peak
of the sum of its RSS, per round, and per role for ours.

Same model (data/models/tiny-chainsum, fp32), same prompts (TRL's step i+1 gets our iteration i's 16
prompts, unshuffled), same reward (math-verify on the last \\boxed{}), 8 samples per prompt, 64 new
tokens, T = 1, AdamW lr 1e-4 constant, clip 0.2/0.28, token-mean loss, no KL, one optimizer step on
the whole batch of 128, 1 torch thread, CPU. The driver's docstring lists TRL's settings.

A step's wall time is end-to-end: for us from the end of iteration k-1 (its last manifest) to the end
of iteration k, so it holds everything a training run pays per step (generation, verification, the
update, the checkpoint, Parquet, manifests, orchestration); for TRL from one optimizer step's end to
the next (TrainerCallback.on_step_end). Per round: the median step of each side; then the median over
rounds of the per-round ratio ours/TRL, with its range. The same for CPU time (user + system of the
process and its live children: the verifier's workers, Prefect's server), which the load of other
jobs on a shared machine disturbs less than wall time. Our step's split comes from the stage
manifests (seconds and perf/* metrics of each stage); TRL's from timers around `_generate`, the reward
function and `_prepare_inputs`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from process_tree import TreePeak  # noqa: E402

DRIVER = ROOT / "bench" / "_trl_driver.py"
PRESET = "tiny"

# Our step's parts (seconds), from the stage manifests of one iteration.
OUR_PARTS = ("generation", "verify", "fwd_bwd", "checkpoint", "parquet_io", "else")
TRL_PARTS = ("generation", "reward", "prep_else", "update_else")


def overrides(steps: int, algorithm: str = "grpo") -> list[str]:
    """grpo on the tiny preset (16 prompts x 8, 64 tokens, lr 1e-4, 1 optimizer step per batch: the
    preset's own values); evaluation off except θ_0's and the final 1-sample check."""
    return [
        f"algorithm={algorithm}",
        f"iterations={steps + 2}",
        f"eval.every={steps + 3}",
        "eval.prompts=1",
        "eval.samples=1",
        "eval.seeded=false",
    ]


def load_avg() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def write_prompts(steps: int, base: Path) -> tuple[Path, list[int], dict]:
    """Our iterations 0..steps' prompts as the driver's JSON; the first prompt's token ids; settings."""
    from thinking_seeds.config import load_config
    from thinking_seeds.engine.models import encode_prompt
    from thinking_seeds.pipeline.loop import run_prepare
    from thinking_seeds.pipeline.session import Session
    from thinking_seeds.store.run_dir import RunDir

    cfg = load_config(PRESET, overrides(steps))
    run = RunDir.for_run("prompts", base)
    run_prepare(run, cfg)
    s = Session(run, cfg)
    per_step = [s.iteration_prompts(k) for k in range(steps + 1)]
    data = [[{"messages": p.chat(), "ground_truth": p.ground_truth} for p in step] for step in per_step]
    path = base / "prompts.json"
    path.write_text(json.dumps(data))
    ids = encode_prompt(s.tokenizer, per_step[0][0].chat())
    settings = {
        "model": str(run.policy(0)),
        "prompts": cfg.rollout.prompts_per_iteration,
        "group": cfg.rollout.group_size,
        "max_new": cfg.rollout.max_new_tokens,
        "lr": cfg.update.lr,
        "temperature": cfg.rollout.temperature,
        "clip": (cfg.loss.clip_ratio_low, cfg.loss.clip_ratio_high),
        "loss_agg": cfg.loss.loss_agg_mode,
        "kl": cfg.loss.kl_coef,
        "mini_batches": cfg.update.mini_batches,
        "epochs": cfg.update.epochs,
        "grad_clip": cfg.update.grad_clip,
        "dtype": cfg.model.dtype,
    }
    return path, ids, settings


def trl_round(trl_python: Path, model: str, prompts: Path, steps: int, a, work: Path) -> dict:
    out = work / "trl.json"
    cmd = [str(trl_python), str(DRIVER), "--model", model, "--prompts", str(prompts), "--steps", str(steps + 1)]
    cmd += ["--out", str(out), "--group", str(a.group), "--max-new", str(a.max_new), "--lr", str(a.lr)]
    t = time.perf_counter()
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    with TreePeak(proc.pid, uss=False) as peak:
        stdout, stderr = proc.communicate()
    p = subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        raise SystemExit(f"the TRL driver failed (exit {p.returncode})")
    res = json.loads(out.read_text())
    res["process_s"] = time.perf_counter() - t
    res["peak_rss_mib"], res["roles"] = peak.peak_sum, peak.by_role()
    walls, parts = res["step_walls"][1:], res["step_parts"][1:]  # step 1: the warm-up
    res["walls"], res["cpu"] = walls, res["step_cpu"][1:]
    res["parts"] = [
        {
            "generation": q["generate"],
            "reward": q["reward"],
            "prep_else": q["prepare"] - q["generate"] - q["reward"],
            "update_else": w - q["prepare"],
            "tokens": q["tokens"],
            "cpu_generation": q["generate_cpu"],
            "cpu_update_else": c - q["prepare_cpu"],
        }
        for w, c, q in zip(walls, res["cpu"], parts, strict=True)
    ]
    return res


def our_parts(run, k: int, wall: float) -> dict:
    """Iteration k's split, from its stage manifests (`time/<stage>/<part>` and `perf/*`)."""
    sec = {st: (run.read_manifest(k, st).seconds, run.read_manifest(k, st).metrics) for st in STAGES}
    cont, ver, upd = sec["continuation"], sec["verify"], sec["update"]
    gen = sum(sec[st][0].get(x, 0.0) for st in ("seeds", "continuation") for x in ("generation", "weight_swap"))
    out = {
        "generation": gen,
        "verify": ver[0].get("verification", 0.0),
        "fwd_bwd": upd[1].get("perf/fwd_bwd_s", 0.0),
        # θ_k's optimizer state + rollouts read by the trainer, θ_{k+1} written with hashes, the snapshot link
        "checkpoint": upd[1].get("perf/load_s", 0.0)
        + upd[1].get("perf/save_s", 0.0)
        + sum(sec["snapshot"][0].values()),
        "parquet_io": cont[0].get("io", 0.0) + ver[0].get("io", 0.0) + sec["seeds"][0].get("io", 0.0),
        "tokens": cont[1].get("rollout/generated_tokens", 0.0),
    }
    out["else"] = wall - sum(out[p] for p in OUR_PARTS if p != "else")
    return out


STAGES = ("snapshot", "seeds", "continuation", "verify", "update", "evaluate")


def cpu_seconds() -> float:
    """User + system CPU seconds of this process and its live descendants: the same measure as the
    TRL side's (bench/_trl_driver.py, which imports nothing of ours and so keeps its own copy)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _trl_driver import cpu_seconds as measure

    return measure()


@contextlib.contextmanager
def stamp_iteration_ends(stamps: dict[int, tuple[float, float, float, dict]]):
    """(wall, CPU, CPU of this process alone, CPU per Timer part) at the moment each iteration's last
    manifest (evaluate k) is written, in the plain loop and the Prefect flow alike (both write their
    manifests in this process). The stages' Timer parts (`with t("generation")`) are also timed in
    the CPU time of the thread that runs them, summed per part name over the iteration."""
    import psutil

    from thinking_seeds.pipeline.session import Timer
    from thinking_seeds.store.run_dir import RunDir

    original, original_call = RunDir.write_manifest, Timer.__call__
    part_cpu: dict[str, float] = {}
    me = psutil.Process()

    def write_manifest(self, m):
        original(self, m)
        if m.stage == "evaluate":
            t = me.cpu_times()
            stamps[m.iteration] = (time.perf_counter(), cpu_seconds(), t.user + t.system, dict(part_cpu))
            part_cpu.clear()

    @contextlib.contextmanager
    def call(self, name):
        c = time.thread_time()
        try:
            with original_call(self, name):
                yield
        finally:
            part_cpu[name] = part_cpu.get(name, 0.0) + time.thread_time() - c

    RunDir.write_manifest, Timer.__call__ = write_manifest, call
    try:
        yield
    finally:
        RunDir.write_manifest, Timer.__call__ = original, original_call


def ours_round(mode: str, steps: int, base: Path, tag: str) -> dict:
    from thinking_seeds.config import load_config
    from thinking_seeds.store.run_dir import RunDir

    run_id = f"peer-{mode}-{tag}"
    os.environ["TS_RUNS_DIR"] = str(base)
    t = time.perf_counter()
    stamps: dict[int, tuple[float, float, float, dict]] = {}
    with stamp_iteration_ends(stamps), TreePeak(os.getpid(), uss=False) as peak:
        if mode == "prefect":
            from thinking_seeds.flows.train import train_flow

            train_flow(preset=PRESET, run_id=run_id, overrides=overrides(steps))
        else:
            from thinking_seeds.pipeline.loop import train

            algorithm = "thinking_seeds" if mode == "seeds" else "grpo"
            train(RunDir.for_run(run_id, base), load_config(PRESET, overrides(steps, algorithm)))
    total = time.perf_counter() - t
    run = RunDir.for_run(run_id, base)
    ks = range(1, steps + 1)  # iteration 0: the warm-up; steps+1: the run's final evaluation
    walls = [stamps[k][0] - stamps[k - 1][0] for k in ks]
    res = {"walls": walls, "cpu": [stamps[k][1] - stamps[k - 1][1] for k in ks]}
    res["parts"] = [our_parts(run, k, w) for k, w in zip(ks, walls, strict=True)]
    for k, p in zip(ks, res["parts"], strict=True):
        p["cpu_children"] = (stamps[k][1] - stamps[k - 1][1]) - (stamps[k][2] - stamps[k - 1][2])
        p["cpu_generation"] = stamps[k][3].get("generation", 0.0) + stamps[k][3].get("weight_swap", 0.0)
        p["cpu_update_total"] = stamps[k][3].get("update_total", 0.0)
    res["process_s"] = total
    res["peak_rss_mib"], res["roles"] = peak.peak_sum, peak.by_role()
    shutil.rmtree(run.root, ignore_errors=True)
    return res


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=5, help="measured steps per side and round (plus warm-up)")
    ap.add_argument(
        "--ours",
        default="loop,prefect,seeds",
        help="our sides: loop (GRPO, plain loop), prefect (GRPO, the flow), seeds (thinking_seeds, plain loop)",
    )
    ap.add_argument("--trl-python", type=Path, default=ROOT / ".venv-trl" / "bin" / "python")
    ap.add_argument("--json", type=Path, default=None, help="also write every round's figures here")
    a = ap.parse_args()
    if not a.trl_python.exists():
        raise SystemExit(f"{a.trl_python} is missing: run `make trl-venv` first")
    import torch
    import transformers

    import thinking_seeds

    torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    ours = [s for s in a.ours.split(",") if s]
    sides = ["trl", *ours]
    base = Path(tempfile.mkdtemp(prefix="ts-peer-trl-"))
    rounds: list[dict[str, dict]] = []
    try:
        prompts, our_ids, st = write_prompts(a.steps, base)
        a.group, a.max_new, a.lr = st["group"], st["max_new"], st["lr"]
        model = str(thinking_seeds_model())
        print(
            f"machine: {platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, "
            f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']}, torch threads {torch.get_num_threads()}, "
            f"load {load_avg()} (1/5/15 min)",
            flush=True,
        )
        print(
            f"ours: thinking_seeds {_version(thinking_seeds)}, git {_git()}, torch {torch.__version__}, "
            f"transformers {transformers.__version__}",
            flush=True,
        )
        print(f"settings: {json.dumps({k: v for k, v in st.items() if k != 'model'})}, model {model}", flush=True)
        for r in range(a.rounds):
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            row: dict[str, dict] = {}
            for side in order:
                load0 = load_avg()
                if side == "trl":
                    res = trl_round(a.trl_python, model, prompts, a.steps, a, base)
                    if r == 0:
                        print(
                            f"TRL: trl {res['versions']['trl']}, transformers {res['versions']['transformers']}, "
                            f"torch {res['versions']['torch']}, threads {res['torch_threads']}, optimizer "
                            f"{res['optim']}; prompt token ids identical to ours: {res['first_prompt_ids'] == our_ids}",
                            flush=True,
                        )
                else:
                    res = ours_round(side, a.steps, base, f"r{r}")
                res["load"] = f"{load0} -> {load_avg()}"
                row[side] = res
                print(
                    f"round {r} {side:8s} step median {med(res['walls']):6.2f} s, CPU {med(res['cpu']):5.2f} s  "
                    f"(steps {', '.join(f'{w:.2f}' for w in res['walls'])}; process {res['process_s']:.0f} s; "
                    f"tree peak RSS {res['peak_rss_mib']:.0f} MiB; load {res['load']})",
                    flush=True,
                )
            rounds.append(row)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    report(rounds, sides, ours, a)


def report(rounds: list[dict], sides: list[str], ours: list[str], a) -> None:
    n = len(rounds)
    print(f"\nstep wall time, s: median of {a.steps} steps per round (after 1 warm-up step), {n} rounds interleaved")
    print(f"{'side':8s} " + " ".join(f"{f'r{r}':>6s}" for r in range(n)) + f" {'median':>7s}")
    for side in sides:
        per = [med(row[side]["walls"]) for row in rounds]
        print(f"{side:8s} " + " ".join(f"{x:6.2f}" for x in per) + f" {med(per):7.2f}")
    for side in ours:
        ratios = [med(row[side]["walls"]) / med(row["trl"]["walls"]) for row in rounds]
        print(
            f"ours ({side}) / TRL: median of per-round ratios {med(ratios):.3f}x "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}; per round {', '.join(f'{x:.3f}' for x in ratios)})"
        )
    if "seeds" in ours and "loop" in ours:
        ratios = [med(row["seeds"]["walls"]) / med(row["loop"]["walls"]) for row in rounds]
        print(
            f"Thinking Seeds / our GRPO (both the plain loop): median of per-round ratios {med(ratios):.3f}x "
            f"(range {min(ratios):.3f}-{max(ratios):.3f}; per round {', '.join(f'{x:.3f}' for x in ratios)})"
        )
    print("\npeak RSS of the side's process tree, MiB (sampled every 0.1 s)")
    for side in sides:
        per = [row[side]["peak_rss_mib"] for row in rounds]
        ratio = med([row[side]["peak_rss_mib"] / row["trl"]["peak_rss_mib"] for row in rounds])
        procs = med([sum(n for n, _, _ in row[side]["roles"].values()) for row in rounds])
        print(
            f"{side:8s} " + " ".join(f"{x:6.0f}" for x in per) + f" {med(per):7.0f}  "
            f"{ratio:.2f}x TRL's, {procs:.0f} processes"
        )
    for side in ours:
        last = rounds[-1][side]["roles"]
        cells = ", ".join(
            f"{role} {n}x {rss:.0f}" for role, (n, rss, _) in sorted(last.items(), key=lambda kv: -kv[1][1])
        )
        print(f"  {side} by role (last round, peak RSS MiB): {cells}")
    print("\nstep CPU time (user + system, the process and its live children), s: same medians")
    for side in sides:
        per = [med(row[side]["cpu"]) for row in rounds]
        print(f"{side:8s} " + " ".join(f"{x:6.2f}" for x in per) + f" {med(per):7.2f}")
    for side in ours:
        ratios = [med(row[side]["cpu"]) / med(row["trl"]["cpu"]) for row in rounds]
        print(
            f"ours ({side}) / TRL, CPU time: median of per-round ratios {med(ratios):.3f}x "
            f"(range {min(ratios):.3f}-{max(ratios):.3f})"
        )

    def split(side: str, parts: tuple[str, ...]) -> None:
        allp = [p for row in rounds for p in row[side]["parts"]]
        walls = [w for row in rounds for w in row[side]["walls"]]
        tok = med([p["tokens"] for p in allp])
        cells = "  ".join(f"{k} {med([p[k] for p in allp]):.3f}" for k in parts)
        print(f"{side:8s} step {med(walls):.3f}: {cells}  | tokens/step {tok:.0f}")

    print(f"\nsplit of a step, s (median over all {n * a.steps} measured steps of each part; parts need not add up)")
    split("trl", TRL_PARTS)
    for side in ours:
        split(side, OUR_PARTS)
    print("CPU time of the shared work, s (the thread that runs it)")
    split("trl", ("cpu_generation", "cpu_update_else"))
    for side in ours:
        split(side, ("cpu_generation", "cpu_update_total", "cpu_children"))
    print(
        "  trl: generation = _generate (tokenize, model.generate, decode); reward = the reward fn (in-process);\n"
        "       prep_else = advantages, padding, bookkeeping in _prepare_inputs; update_else = the rest of the\n"
        "       step: loss forward/backward, optimizer step, Trainer loop\n"
        "  ours: generation = continuation sampling (+ weight swap); verify = math-verify in the worker pool;\n"
        "       fwd_bwd = loss forward/backward + optimizer step; checkpoint = θ_k/optimizer/rollouts load +\n"
        "       θ_{k+1} save (+ snapshot link); parquet_io = rollouts/prefix Parquet in the stages; else = the\n"
        "       rest: manifests and output hashing, metrics Parquet, stage dispatch (Prefect's task runs), advantages\n"
        "  CPU: trl update_else = the step's CPU minus _prepare_inputs'; ours update_total = the update stage\n"
        "       (load, fwd/bwd, save); cpu_children = the verifier workers, Prefect's server, the child guard"
    )
    if a.json:
        a.json.write_text(json.dumps(rounds, indent=1))


def thinking_seeds_model() -> Path:
    from thinking_seeds.config import load_config
    from thinking_seeds.engine.models import resolve_model_path

    return Path(resolve_model_path(load_config(PRESET, []).model.path))


def _version(mod) -> str:
    from importlib.metadata import version

    try:
        return version("thinking-seeds")
    except Exception:
        return getattr(mod, "__version__", "?")


def _git() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True)
        return head.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
