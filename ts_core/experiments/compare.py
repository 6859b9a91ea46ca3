"""The comparison experiment: methods x seeds (x ablation sweeps) on one task and one budget.

    specs = plan("tiny", ["grpo", "thinking_seeds"], [0, 1, 2], overrides=["iterations=60"],
                 sweep={"prefix.ratio_max": ["0.4", "0.8"]}, compare_id="abl")
    results = run_all(specs, Path("runs"), parallel=2)      # subprocesses, resumable
    raise_on_failures(results)

`plan` expands (method, sweep point, seed) into RunSpecs whose run ids read
`<compare_id>-<method>[-<key>=<value>...]-s<seed>` and whose overrides are the shared ones, then the
sweep point, then `algorithm=<method>` and `seed=<seed>`. It resolves every configuration and refuses
a comparison whose runs would not see the same task, the same prompts per iteration, the same
samples per prompt, the same number of iterations and the same evaluation (BUDGET_KEYS): a method
that is better only because it saw more data is not a result. Ablations are sweeps through the same
planner (`--sweep pool.size=1,4 --sweep prefix.ratio_max=0.4,0.8`: the cartesian product, or one key
at a time with `one_at_a_time`), and `reference_members` lets an ablation's report include the base
configuration's runs from an earlier comparison instead of training them again.

`run_all` starts each run as `python -m thinking_seeds.pipeline.loop ...` with OMP_NUM_THREADS=1, at most `parallel`
at once, output in `runs/<id>/train.log`. A run whose last iteration is complete is skipped without
starting a process; an interrupted one resumes (the loop skips completed stages). Every run
directory gets a `compare.json` marker (compare id, method, seed, sweep point) that the comparison
report uses to find and group the runs.

Never imports prefect (flows/compare.py wraps this).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from thinking_seeds.config import ALGORITHMS, ConfigError, RunConfig, load_config
from thinking_seeds.pipeline.checkpoint_eval import FINAL_TEST_STAGE
from thinking_seeds.store.parquet_io import shareable

__all__ = [
    "BUDGET_KEYS", "CONTROL_METHOD", "DEFAULT_METHODS", "FINAL_TEST_STAGE", "MARKER", "TRAINING_TIME_SQL",
    "CompareError", "Job", "JobResult", "RunSpec",
    "check_same_budget", "compare_members", "is_complete", "parse_list", "parse_sweep", "plan", "raise_on_failures",
    "reference_members", "spec_of", "final_test_jobs", "run_final_tests",
    "report_dir", "run_all", "run_comparison", "run_jobs", "train_seconds", "write_marker",
]

# The five methods of the headline comparison (SPEC §4; dr_grpo is available too).
DEFAULT_METHODS = ("grpo", "seq_mix", "luffy", "prefix_context", "thinking_seeds")
CONTROL_METHOD = "sft_control"
MARKER = "compare.json"
# What every run of a comparison must share (dotted keys of RunConfig; a section means all of it).
BUDGET_KEYS = (
    "data",  # the task: data set, sizes, generator seed
    "model.path",  # the same starting point
    "iterations",
    "rollout.prompts_per_iteration",
    "rollout.group_size",  # samples per prompt (seeded + on-policy)
    "rollout.max_new_tokens",
    "rollout.temperature",
    "eval",  # the same evaluation: split, prompts, samples, temperature, seeded pass@k
)
# SQL filter over the metrics view: the time/* metrics that count as training. Evaluations of any
# kind (in-training, nightly `evaluate-<split>`, the final test) are left out of the budget.
TRAINING_TIME_SQL = f"starts_with(name, 'time/') AND NOT starts_with(stage, 'evaluate') AND stage <> '{FINAL_TEST_STAGE}'"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._=+-]*$")
_RESERVED = ("algorithm", "seed")  # set by the planner, once per run


class CompareError(RuntimeError):
    """Runs of a comparison failed; the message names them and their logs."""


# ---------------------------------------------------------------------------------------------
# planning
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    """One run of a comparison: what `ts train` would be called with."""

    run_id: str
    compare_id: str
    method: str
    seed: int
    preset: str
    base_overrides: tuple[str, ...] = ()  # shared by every run of the comparison
    sweep: tuple[tuple[str, str], ...] = ()  # this run's sweep point, (dotted key, value)

    @property
    def overrides(self) -> list[str]:
        """--set values in the order they apply: shared, sweep point, method, seed."""
        return [*self.base_overrides, *(f"{k}={v}" for k, v in self.sweep), f"algorithm={self.method}",
                f"seed={self.seed}"]

    @property
    def variant(self) -> str:
        """Method plus sweep point: what the report groups seeds by."""
        return " ".join([self.method, *(f"{k}={v}" for k, v in self.sweep)])

    def config(self) -> RunConfig:
        return load_config(self.preset, self.overrides)

    def marker(self) -> dict[str, Any]:
        return {"compare_id": self.compare_id, "run_id": self.run_id, "method": self.method, "seed": self.seed,
                "variant": self.variant, "sweep": dict(self.sweep), "preset": self.preset,
                "overrides": self.overrides}


def parse_list(text: str | Sequence[str], what: str) -> list[str]:
    """"a,b" or ["a,b", "c"] -> ["a", "b", "c"] (blank items are an error)."""
    items = [text] if isinstance(text, str) else list(text)
    out = [x.strip() for item in items for x in str(item).split(",")]
    if not out or any(not x for x in out):
        raise ConfigError(f"{what}: {items!r} has an empty item; give a comma-separated list like a,b,c")
    return out


def parse_sweep(items: Sequence[str]) -> dict[str, list[str]]:
    """["pool.size=1,4", "prefix.ratio_max=0.4,0.8"] -> {"pool.size": ["1", "4"], ...}."""
    sweep: dict[str, list[str]] = {}
    for item in items:
        if "=" not in item:
            raise ConfigError(f"sweep {item!r} must look like section.key=v1,v2 (e.g. pool.size=1,4)")
        key, values = item.split("=", 1)
        key = key.strip()
        if key in sweep:
            raise ConfigError(f"sweep key {key!r} is given twice; list all its values once: {key}=v1,v2,...")
        sweep[key] = parse_list(values, f"sweep {key}")
    return sweep


def _fmt(v: Any) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


def _dotted(cfg: dict[str, Any], key: str) -> Any:
    node: Any = cfg
    for part in key.split("."):
        node = node[part]
    return node


def check_same_budget(configs: dict[str, RunConfig]) -> None:
    """Raise ConfigError unless every run agrees on BUDGET_KEYS; the message names runs, keys and values."""
    if not configs:
        return
    items = list(configs.items())
    ref_id, ref = items[0]
    ref_d = ref.model_dump(mode="json")
    problems: list[str] = []
    for run_id, cfg in items[1:]:
        d = cfg.model_dump(mode="json")
        for key in BUDGET_KEYS:
            a, b = _dotted(ref_d, key), _dotted(d, key)
            if a != b:
                if isinstance(a, dict) and isinstance(b, dict):
                    diff = {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)}
                    for k, (x, y) in diff.items():
                        problems.append(f"{run_id} has {key}.{k}={y!r} but {ref_id} has {x!r}")
                else:
                    problems.append(f"{run_id} has {key}={b!r} but {ref_id} has {a!r}")
    if problems:
        shown = problems[:8] + ([f"... and {len(problems) - 8} more"] if len(problems) > 8 else [])
        raise ConfigError(
            "the runs of a comparison must share the task, prompts per iteration, samples per prompt, "
            "iterations and evaluation, but:\n  " + "\n  ".join(shown)
            + "\nset these once for all methods (--set), and sweep only method settings (prefix.*, pool.*, "
              "rollout.seeds_per_group, ...)"
        )


def plan(
    preset: str,
    methods: Sequence[str],
    seeds: Sequence[int],
    overrides: Sequence[str] | None = None,
    sweep: dict[str, list[Any]] | None = None,
    compare_id: str = "compare",
    one_at_a_time: bool = False,
) -> list[RunSpec]:
    """Every (method, sweep point, seed) of the comparison as a RunSpec, validated (see module doc).

    Sweep points are the cartesian product of the sweep's values, or with `one_at_a_time` one key
    varied at a time from the base configuration (the usual ablation: 2 keys x 2 values = 4
    points, not 4 combinations; the base point itself is not run — see `reference_members`).
    """
    if not _RUN_ID.match(compare_id or ""):
        raise ConfigError(f"comparison id {compare_id!r} must be a plain name (letters, digits, . _ = + -)")
    per_method = method_seeds(methods)
    methods = list(per_method)
    if not methods:
        raise ConfigError("no methods: give at least one of " + ", ".join(ALGORITHMS))
    unknown = [m for m in methods if m not in ALGORITHMS]
    if unknown:
        raise ConfigError(f"unknown method(s) {', '.join(unknown)}; choose from {', '.join(ALGORITHMS)}")
    try:
        seeds = [int(s) for s in seeds]
    except (TypeError, ValueError):
        raise ConfigError(f"seeds must be integers, got {list(seeds)!r}") from None
    if not seeds:
        raise ConfigError("no seeds: give at least one (e.g. 0,1,2)")
    if len(set(seeds)) != len(seeds):
        raise ConfigError(f"seeds {seeds} name a seed twice")
    overrides = list(overrides or [])
    sweep = {k: [_fmt(v) for v in vs] for k, vs in (sweep or {}).items()}
    for item in overrides:
        key = item.split("=", 1)[0].strip()
        if key in _RESERVED:
            raise ConfigError(f"--set {item}: the comparison sets {key} per run; use --methods / --seeds instead")
    for key, values in sweep.items():
        if key in _RESERVED:
            raise ConfigError(f"sweep over {key!r}: use --methods / --seeds for that")
        if not values:
            raise ConfigError(f"sweep {key!r} has no values")
        if len(set(values)) != len(values):
            raise ConfigError(f"sweep {key!r} repeats a value: {values}")
    if not sweep:
        points: list[tuple[tuple[str, str], ...]] = [()]
    elif one_at_a_time:
        points = [((k, v),) for k, vs in sweep.items() for v in vs]
    else:
        points = [tuple(zip(sweep, combo)) for combo in itertools.product(*sweep.values())]

    specs: list[RunSpec] = []
    for method in methods:
        for point in points:
            for seed in per_method[method] or seeds:
                parts = [compare_id, method, *(f"{k}={v}" for k, v in point), f"s{seed}"]
                run_id = "-".join(parts)
                if not _RUN_ID.match(run_id) or "/" in run_id:
                    raise ConfigError(f"run id {run_id!r} would not be a plain directory name; "
                                      "sweep values may use letters, digits and . _ = + - only")
                specs.append(RunSpec(run_id, compare_id, method, seed, preset, tuple(overrides), tuple(point)))
    if len({s.run_id for s in specs}) != len(specs):
        raise ConfigError("two runs of the plan got the same run id; make the sweep values distinct")

    configs: dict[str, RunConfig] = {}
    for spec in specs:
        try:
            configs[spec.run_id] = spec.config()
        except ConfigError as e:
            raise ConfigError(f"run {spec.run_id} (method {spec.method}, sweep {dict(spec.sweep) or '-'}): {e}") from None
    check_same_budget(configs)
    return specs


def method_seeds(methods: Sequence[str]) -> dict[str, list[int]]:
    """["grpo:0-4", "luffy:0-1", "seq_mix"] -> {"grpo": [0..4], "luffy": [0, 1], "seq_mix": []}.

    A method may carry its own seed range (`name:lo-hi` or `name:s`); [] means the comparison's
    --seeds. Lets one comparison spend more seeds where the question is sharpest (issue #9: grpo and
    thinking_seeds 5 seeds, seq_mix 3, luffy and prefix_context 2).
    """
    out: dict[str, list[int]] = {}
    for item in methods:
        name, _, rng = str(item).partition(":")
        name = name.strip()
        if name in out:
            raise ConfigError(f"methods name {name!r} twice")
        if not rng:
            out[name] = []
            continue
        lo, _, hi = rng.partition("-")
        try:
            out[name] = list(range(int(lo), int(hi or lo) + 1))
        except ValueError:
            raise ConfigError(f"method {item!r}: seeds must be a range like {name}:0-4 or one seed like {name}:3") from None
        if not out[name]:
            raise ConfigError(f"method {item!r}: the seed range is empty; write it low-high, e.g. {name}:0-4")
    return out


# ---------------------------------------------------------------------------------------------
# markers and completion
# ---------------------------------------------------------------------------------------------


def write_marker(run_root: Path, marker: dict[str, Any]) -> Path:
    """Write `<run>/compare.json` atomically (unchanged content is not rewritten)."""
    run_root.mkdir(parents=True, exist_ok=True)
    path = run_root / MARKER
    text = json.dumps(marker, indent=2, sort_keys=True)
    if path.exists():
        try:
            old = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            old = None
        if old is not None and old.get("compare_id") != marker.get("compare_id"):
            raise ConfigError(f"{run_root} belongs to comparison {old.get('compare_id')!r}, not {marker.get('compare_id')!r}; "
                              "choose another --id")
        if old == json.loads(text):
            return path
    fd, tmp = tempfile.mkstemp(dir=run_root, prefix=f".{MARKER}.", suffix=".tmp")
    shareable(tmp, fd)  # mkstemp makes 0600: the marker follows the umask like every run file
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)
    return path


def compare_members(compare_id: str, runs_dir: Path) -> list[dict[str, Any]]:
    """The markers of every run directory under `runs_dir` that belongs to `compare_id`."""
    out = []
    base = Path(runs_dir)
    if not base.is_dir():
        return out
    for d in sorted(base.iterdir()):
        path = d / MARKER
        if not path.is_file():
            continue
        try:
            m = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if m.get("compare_id") == compare_id:
            m["run_id"] = d.name
            out.append(m)
    return out


def spec_of(marker: dict[str, Any]) -> RunSpec:
    """The RunSpec a run's `compare.json` marker was written from."""
    sweep = tuple((k, _fmt(v)) for k, v in (marker.get("sweep") or {}).items())
    point = {f"{k}={v}" for k, v in sweep}
    base = tuple(o for o in marker.get("overrides", []) if o.split("=", 1)[0] not in _RESERVED and o not in point)
    return RunSpec(marker["run_id"], marker["compare_id"], marker["method"], int(marker["seed"]),
                   marker.get("preset", "tiny"), base, sweep)


def reference_members(reference_id: str, specs: Sequence[RunSpec], runs_dir: Path) -> list[dict[str, Any]]:
    """The unswept runs of comparison `reference_id` that an ablation `specs` is measured against.

    An ablation varies method settings around a base configuration that an earlier comparison
    already ran (e.g. `thinking_seeds` of the main comparison, seeds 0-2). Rather than training the
    base point again, the ablation's report includes those runs: same methods, same seeds, no sweep
    point, complete, and on the same budget (BUDGET_KEYS) as every run of `specs`. Each returned
    marker gets `reference` (the id) and a `variant` naming the base values of the swept keys.
    Raises ConfigError when the reference has no such run or its budget differs.
    """
    specs = [s for s in specs if s.method != CONTROL_METHOD]
    methods = {s.method for s in specs}
    seeds = {s.seed for s in specs}
    keys = list(dict.fromkeys(k for s in specs for k, _ in s.sweep))
    found = [m for m in compare_members(reference_id, runs_dir)
             if m.get("method") in methods and m.get("seed") in seeds and not m.get("sweep")]
    if not found:
        raise ConfigError(f"--reference {reference_id}: no run of that comparison under {runs_dir} has method "
                          f"{'/'.join(sorted(methods))}, seed {'/'.join(map(str, sorted(seeds)))} and no sweep point; "
                          f"run `ts compare --id {reference_id} ...` first or drop --reference")
    configs = {s.run_id: s.config() for s in specs}
    out = []
    for m in found:
        ref = spec_of(m)
        if not is_complete(ref, runs_dir):
            raise ConfigError(f"--reference {reference_id}: run {ref.run_id} is not complete; finish it with "
                              f"`ts compare --id {reference_id} ...` (same command) first")
        cfg = ref.config()
        configs[ref.run_id] = cfg
        d = cfg.model_dump(mode="json")
        base = " ".join(f"{k}={_fmt(_dotted(d, k))}" for k in keys)
        out.append({**m, "reference": reference_id,
                    "variant": f"{m['method']} {base} [{reference_id}]" if base else f"{m['method']} [{reference_id}]"})
    check_same_budget(configs)
    return out


def is_complete(spec: RunSpec, runs_dir: Path) -> bool:
    """True when the run's last iteration (update and evaluate) finished with this config."""
    from thinking_seeds.store.run_dir import RunDir

    cfg = spec.config()
    run = RunDir.for_run(spec.run_id, runs_dir)
    k = cfg.iterations - 1
    h = cfg.config_hash()
    return all(run.completed(k, stage, h) is not None for stage in ("update", "evaluate"))


def train_seconds(run_ids: Sequence[str], runs_dir: Path) -> dict[str, float]:
    """Training wall time per run: the sum of its stages' `time/*` metrics, evaluation left out.

    Evaluation is the same for every method (and for the SFT control), so the budget compared is
    the time spent producing the policy. Runs without timings are absent from the result.
    """
    if not run_ids:
        return {}
    from thinking_seeds.store.sql import connect, query

    con = connect(runs_dir=runs_dir)
    try:
        ids = ", ".join("'" + r.replace("'", "''") + "'" for r in run_ids)
        res = query(con, f"""
            SELECT run_id, sum(value) AS seconds FROM metrics
            WHERE run_id IN ({ids}) AND {TRAINING_TIME_SQL}
            GROUP BY run_id""")
    finally:
        con.close()
    return {r: float(s) for r, s in res.rows}


# ---------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------


@dataclass
class Job:
    """One subprocess of a comparison: a run, or an SFT control."""

    run_id: str
    cmd: list[str]
    log: Path
    done: bool = False  # already complete: not started


@dataclass
class JobResult:
    run_id: str
    status: str  # done | skipped | failed
    returncode: int | None
    seconds: float
    log: str
    tail: str = field(default="", repr=False)


def child_env(runs_dir: Path) -> dict[str, str]:
    """The environment of a run's process: one torch thread, the runs folder (the package is installed)."""
    env = dict(os.environ)
    env.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
                "TS_RUNS_DIR": str(Path(runs_dir).resolve()), "PYTHONUNBUFFERED": "1"})
    return env


def _tail(path: Path, lines: int = 20) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            text = f.read().decode(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])


def _last_line(path: Path) -> str:
    t = _tail(path, 1).strip()
    return t[-90:]


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    """Signal the process group this module started for `proc` (its leader is proc itself)."""
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run_jobs(jobs: Sequence[Job], runs_dir: Path, parallel: int = 2, title: str = "runs",
             console: Any = None, env: dict[str, str] | None = None, poll: float = 0.5) -> list[JobResult]:
    """Run `jobs` as subprocesses, at most `parallel` at once, with a rich progress display.

    Output goes to each job's log (appended). A failed job does not stop the others. Interrupting
    (Ctrl-C) terminates the processes started here, then re-raises.
    """
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    if parallel < 1:
        raise ConfigError(f"parallel must be >= 1, got {parallel}")
    console = console or Console(stderr=True)
    env = env or child_env(runs_dir)
    results: dict[str, JobResult] = {}
    pending = [j for j in jobs if not j.done]
    for j in jobs:
        if j.done:
            results[j.run_id] = JobResult(j.run_id, "skipped", 0, 0.0, str(j.log))
    running: dict[str, tuple[Job, subprocess.Popen, float, Any, Any]] = {}
    with Progress(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeElapsedColumn(), console=console, transient=False) as progress:
        overall = progress.add_task(f"{title} done", total=len(jobs), completed=len(jobs) - len(pending))
        for r in results.values():
            progress.console.print(f"[dim]skip {r.run_id}: already complete[/]")
        try:
            while pending or running:
                while pending and len(running) < parallel:
                    job = pending.pop(0)
                    job.log.parent.mkdir(parents=True, exist_ok=True)
                    fh = open(job.log, "a", buffering=1)
                    fh.write(f"\n=== {time.strftime('%Y-%m-%d %H:%M:%S')} {' '.join(job.cmd)}\n")
                    # Own session: an interrupt here ends the run's whole process group (its verifier
                    # workers too), and a terminal's Ctrl-C reaches only this supervisor.
                    proc = subprocess.Popen(job.cmd, stdout=fh, stderr=subprocess.STDOUT, env=env, cwd=os.getcwd(),
                                            start_new_session=True)
                    tid = progress.add_task(f"  {job.run_id}", total=None)
                    running[job.run_id] = (job, proc, time.perf_counter(), fh, tid)
                time.sleep(poll)
                for run_id, (job, proc, t0, fh, tid) in list(running.items()):
                    rc = proc.poll()
                    if rc is None:
                        progress.update(tid, description=f"  {run_id}: {_last_line(job.log)}")
                        continue
                    fh.close()
                    progress.remove_task(tid)
                    del running[run_id]
                    secs = time.perf_counter() - t0
                    ok = rc == 0
                    results[run_id] = JobResult(run_id, "done" if ok else "failed", rc, secs, str(job.log),
                                                "" if ok else _tail(job.log))
                    progress.advance(overall)
                    progress.console.print(f"[green]done[/] {run_id} ({secs:.0f}s)" if ok
                                           else f"[red]failed[/] {run_id} (exit {rc}), log: {job.log}")
        except BaseException:
            for job, proc, _, fh, _ in running.values():
                _signal_group(proc, signal.SIGTERM)
            for job, proc, _, fh, _ in running.values():
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
                fh.close()
            raise
    return [results[j.run_id] for j in jobs]


def run_all(specs: Sequence[RunSpec], runs_dir: Path, parallel: int = 2, console: Any = None) -> list[JobResult]:
    """Train every spec (resumable; complete runs are skipped) and return one JobResult per spec.

    Seed by seed (methods in their order within a seed): a comparison stopped half-way leaves
    complete paired sets (every method at seeds 0..s) rather than all seeds of the first methods.
    Each run's final test follows its training in the same process (`thinking_seeds.pipeline.loop --final-test`),
    so such a partial comparison has test numbers too (the report can be written at any time).
    """
    runs_dir = Path(runs_dir).resolve()
    jobs = []
    for spec in sorted(specs, key=lambda sp: sp.seed):
        root = runs_dir / spec.run_id
        write_marker(root, spec.marker())
        cmd = [sys.executable, "-m", "thinking_seeds.pipeline.loop", "--preset", spec.preset, "--run-id", spec.run_id,
               "--runs-dir", str(runs_dir), "--final-test"]
        if spec is specs[0]:
            cmd.append("--final-test-base")  # θ_0 once per comparison, in the run final_test_jobs names
        for o in spec.overrides:
            cmd += ["--set", o]
        jobs.append(Job(spec.run_id, cmd, root / "train.log", done=is_complete(spec, runs_dir)))
    return run_jobs(jobs, runs_dir, parallel, title="runs", console=console)


def final_test_jobs(run_ids: Sequence[str], runs_dir: Path, base_of: str | None = None) -> list[Job]:
    """One `python -m thinking_seeds.pipeline.checkpoint_eval` job per run: its final policy on the whole test split.

    Metrics go to the run's `metrics/iteration=<final step>/final-test.parquet` (a job whose file
    exists is done). `base_of` also evaluates θ_0 of that run (the base model every run starts
    from) into its iteration 0. The in-training evaluation (64 validation prompts) is too noisy to
    separate methods by a point; see thinking_seeds.pipeline.checkpoint_eval.
    """
    from thinking_seeds.pipeline.checkpoint_eval import latest_policy_step
    from thinking_seeds.config import load_saved_config
    from thinking_seeds.store.run_dir import RunDir

    jobs = []
    targets = [(rid, None) for rid in run_ids] + ([(base_of, 0)] if base_of else [])
    for rid, step in targets:
        run = RunDir.for_run(rid, runs_dir)
        step = latest_policy_step(run) if step is None else step
        samples = load_saved_config(run.config_path).eval.test_samples
        cmd = [sys.executable, "-m", "thinking_seeds.pipeline.checkpoint_eval", str(run.root), "--step", str(step), "--split", "test",
               "--all-prompts", "--no-seeded", "--stage", FINAL_TEST_STAGE, "--samples", str(samples)]
        jobs.append(Job(f"{rid} θ_{step}", cmd, run.root / "final_test.log",
                        done=run.metrics(step, FINAL_TEST_STAGE).exists()))
    return jobs


def run_final_tests(specs: Sequence[RunSpec], runs_dir: Path, parallel: int = 2, control: bool = True,
                    console: Any = None) -> list[JobResult]:
    """The final test evaluation of every run of `specs` (and their SFT controls), plus θ_0 once."""
    from thinking_seeds.experiments.sft_control import control_run_id

    ids = [s.run_id for s in specs]
    if control:
        ids += [control_run_id(specs[0].compare_id, seed) for seed in sorted({s.seed for s in specs})]
    jobs = final_test_jobs(ids, Path(runs_dir), base_of=specs[0].run_id)
    return run_jobs(jobs, Path(runs_dir), parallel, title="final test evaluations", console=console)


def raise_on_failures(results: Sequence[JobResult]) -> None:
    failed = [r for r in results if r.status == "failed"]
    if failed:
        parts = [f"{r.run_id} (exit {r.returncode}), log {r.log}:\n{r.tail}" for r in failed]
        raise CompareError(f"{len(failed)} of {len(results)} runs failed; rerun the same command to resume them.\n\n"
                           + "\n\n".join(parts))


def report_dir(out_dir: str | Path, compare_id: str) -> Path:
    """Where a comparison's report goes: <out_dir>/<compare_id>/."""
    return Path(out_dir) / compare_id


def run_comparison(
    preset: str = "tiny",
    methods: Sequence[str] = DEFAULT_METHODS,
    seeds: Sequence[int] = (0, 1, 2),
    overrides: Sequence[str] | None = None,
    sweep: dict[str, list[Any]] | None = None,
    compare_id: str = "compare",
    parallel: int = 2,
    out_dir: str | Path = "docs/results",
    control: bool = True,
    control_seconds: float | None = None,
    command: str | None = None,
    console: Any = None,
    control_max_steps: int | None = None,
    control_corpus_size: int | None = None,
    one_at_a_time: bool = False,
    reference: str | None = None,
    final_test: bool = True,
) -> str:
    """plan -> run_all -> SFT controls -> final test evaluations -> report, in this process (`ts compare --no-prefect`).

    The same steps as `flows.compare.compare_flow`; runs go to `runs_root()`. Raises CompareError
    when a run or control failed (after all the others finished). Returns the report's path.
    """
    from thinking_seeds.experiments.compare_report import write_compare_report
    from thinking_seeds.store.run_dir import runs_root
    from thinking_seeds.experiments.sft_control import run_controls

    specs = plan(preset, list(methods), list(seeds), list(overrides or []), sweep, compare_id, one_at_a_time)
    runs_dir = runs_root()
    if reference:
        reference_members(reference, specs, runs_dir)  # fail before training anything
    raise_on_failures(run_all(specs, runs_dir, parallel=parallel, console=console))
    if control:
        _, results = run_controls(specs, runs_dir, parallel=parallel, budget_seconds=control_seconds,
                                  max_steps=control_max_steps, corpus_size=control_corpus_size, console=console)
        raise_on_failures(results)
    if final_test:
        raise_on_failures(run_final_tests(specs, runs_dir, parallel, control, console=console))
    return str(write_compare_report(compare_id, runs_dir, report_dir(out_dir, compare_id), command=command,
                                    reference=reference))
