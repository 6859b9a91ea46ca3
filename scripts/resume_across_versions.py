"""A run started by an older version of this code, killed mid-run, resumed by this one: does it end
bit-identically to the older version's uninterrupted run?

    OMP_NUM_THREADS=1 .venv/bin/python scripts/resume_across_versions.py OLD_COMMIT [--iterations 4] [--kill-at 3]

Three runs of the tiny preset (`--no-prefect`), each with the same run id in a folder of its own:

  reference  OLD's code, uninterrupted, `--iterations` iterations;
  killed     OLD's code, the same settings, kill -9 of its process group as soon as iteration
             `--kill-at` has started (its snapshot manifest is on disk: every update before it is done,
             so no update is redone -- a redone update may differ by float reassociation, ~1e-9);
  resumed    this checkout's code on the killed run's folder, to the end.

Then θ_1..θ_N (weights and optimizer state, tensor by tensor), every iteration's rollouts and prefixes
(Arrow-equal), and the config's hash are compared between `resumed` and `reference`. Exit 0 when all
are equal, 1 with the first difference named.

OLD's code runs from a copy laid out as the installed namespace (ts_core/ -> thinking_seeds/, tasks/,
flows/, data/ -> assets/) first on PYTHONPATH, with this checkout's virtualenv: the dependencies are
this checkout's pins, the code is OLD's. Needs git history (not part of the test suite).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN_ID = "across"
LAYOUT = {"ts_core": "thinking_seeds", "tasks": "thinking_seeds/tasks", "flows": "thinking_seeds/flows",
          "data": "thinking_seeds/assets"}  # fmt: skip


def old_tree(commit: str, base: Path) -> Path:
    """OLD's code laid out as the `thinking_seeds` namespace, under base/site."""
    src, site = base / "src", base / "site"
    base.mkdir(parents=True, exist_ok=True)
    archive = base / "old.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), commit], check=True)
    with tarfile.open(archive) as t:
        t.extractall(src, filter="data")
    for folder, target in LAYOUT.items():
        shutil.copytree(src / folder, site / target, dirs_exist_ok=True)
    return site


def train_cmd(runs: Path, iterations: int) -> list[str]:
    return [sys.executable, "-m", "thinking_seeds.flows.cli", "train", "--preset", "tiny", "--run-id", RUN_ID,
            "--no-prefect", "--runs-dir", str(runs), "--set", f"iterations={iterations}"]  # fmt: skip


def env_for(site: Path | None, cwd: Path) -> dict[str, str]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONHASHSEED="0")
    env.pop("PYTHONPATH", None)
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def run_to_end(cmd: list[str], env: dict, cwd: Path, log: Path) -> None:
    with log.open("w") as out:
        rc = subprocess.run(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        sys.exit(f"{' '.join(cmd[2:6])} exited {rc}; its log: {log}\n{log.read_text()[-3000:]}")


def run_and_kill(cmd: list[str], env: dict, cwd: Path, log: Path, marker: Path, timeout: float = 1800) -> None:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    end = time.monotonic() + timeout
    while not marker.exists():
        if proc.poll() is not None:
            sys.exit(f"the run to kill exited ({proc.returncode}) before {marker.name}; its log: {log}")
        if time.monotonic() > end:
            os.killpg(proc.pid, signal.SIGKILL)
            sys.exit(f"the run to kill never reached {marker}")
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def compare(resumed: Path, reference: Path, iterations: int) -> list[str]:
    """The differences between the two run folders (empty: identical results)."""
    import pyarrow.parquet as pq
    import torch
    from safetensors import safe_open

    def state(run: Path, step: int) -> dict:
        out = {}
        for name in ("model.safetensors", "optimizer.safetensors"):
            path = run / "policy" / f"step_{step:06d}" / name
            if path.exists():
                with safe_open(str(path), "pt") as f:
                    out[name] = ({k: f.get_tensor(k) for k in f.keys()}, f.metadata())
        return out

    diffs = []
    for step in range(1, iterations + 1):
        a, b = state(resumed, step), state(reference, step)
        if not a and not b:  # not kept in either run (retention keeps the pool's snapshots and the last)
            continue
        if a.keys() != b.keys():
            diffs.append(f"θ_{step}: files {sorted(a)} against {sorted(b)}")
            continue
        for name in a:
            ta, tb = a[name][0], b[name][0]
            if a[name][1] != b[name][1] or ta.keys() != tb.keys():
                diffs.append(f"θ_{step} {name}: metadata or tensor names differ")
            bad = [k for k in ta if k in tb and not torch.equal(ta[k], tb[k])]
            if bad:
                diffs.append(f"θ_{step} {name}: {len(bad)} tensors differ (first {bad[0]})")
    for k in range(iterations):
        for rel in (f"rollouts/iteration={k}/rollouts.parquet", f"corpus/prefixes/iteration={k}/prefixes.parquet"):
            pa_, pb = resumed / rel, reference / rel
            if pa_.exists() != pb.exists():
                diffs.append(f"{rel}: present in one run only")
            elif pa_.exists() and not pq.read_table(pa_).equals(pq.read_table(pb)):
                diffs.append(f"{rel}: rows differ")
    w0, wn = state(reference, 0), state(reference, iterations)
    if all(torch.equal(w0["model.safetensors"][0][k], v) for k, v in wn["model.safetensors"][0].items()):
        diffs.append("the reference's weights never moved: the check would be vacuous")
    return diffs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("old", help="the older commit that starts the run")
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--kill-at", type=int, default=3, help="kill once this iteration has started")
    ap.add_argument("--keep", type=Path, default=None, help="keep the run folders here (default: a temp folder)")
    args = ap.parse_args()
    if not 1 <= args.kill_at < args.iterations:
        sys.exit(f"--kill-at must be in 1..{args.iterations - 1}")
    base = args.keep or Path(tempfile.mkdtemp(prefix="ts-across-"))
    base.mkdir(parents=True, exist_ok=True)
    old = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", args.old], capture_output=True, text=True)
    new = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    print(f"old {old.stdout.strip()} -> new {new.stdout.strip()} (with uncommitted changes, if any); in {base}")
    site = old_tree(args.old, base / "old")
    work = base / "cwd"
    work.mkdir(exist_ok=True)
    t0 = time.monotonic()
    run_to_end(train_cmd(base / "reference", args.iterations), env_for(site, work), work, base / "reference.log")
    print(f"reference (old code, uninterrupted): {time.monotonic() - t0:.0f} s")
    marker = base / "killed" / RUN_ID / "manifests" / f"iteration={args.kill_at}" / "snapshot.json"
    run_and_kill(train_cmd(base / "killed", args.iterations), env_for(site, work), work, base / "killed.log", marker)
    done = sorted(p.name for p in marker.parent.parent.glob("iteration=*/*.json"))
    print(f"killed (old code) at iteration {args.kill_at}: {len(done)} stage manifests on disk")
    run_to_end(train_cmd(base / "killed", args.iterations), env_for(None, work), work, base / "resumed.log")
    print(f"resumed with this checkout's code: {(base / 'resumed.log').read_text().strip().splitlines()[-1]}")
    diffs = compare(base / "killed" / RUN_ID, base / "reference" / RUN_ID, args.iterations)
    if diffs:
        print("DIFFERENT:\n  " + "\n  ".join(diffs))
        sys.exit(1)
    kept = sorted(p.name for p in (base / "reference" / RUN_ID / "policy").glob("step_*"))
    print(
        f"identical: the policies kept ({', '.join(kept)}: weights, optimizer state) and every iteration's "
        "rollouts and prefixes"
    )


if __name__ == "__main__":
    main()
