"""How long a comparison's runs will take on this machine, from what its runs folder already holds.

A stage's manifest records its seconds (store/manifest.py `seconds`), so a finished iteration of a run
says how long an iteration of those settings takes here. A planned run is measured by its own finished
iterations (a comparison resumed), else by any run in the runs folder with the same settings but its
seed and its number of iterations (an earlier comparison, a pilot, `ts train` of that method): the mean
seconds of their finished iterations, times the iterations the planned run still has to train. The
runs train `parallel` at once, so the wall time is their sum over `parallel` (the measured iterations
ran under whatever load there was then: an estimate, said as one). Settings never run here have no
estimate, and the plan says so instead of guessing.

Not counted: the SFT control (about one mean run per control seed) and the final test of each run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from thinking_seeds.config import ConfigError, RunConfig, load_saved_config
from thinking_seeds.experiments.run_spec import RunSpec
from thinking_seeds.store.manifest import Manifest
from thinking_seeds.store.run_dir import RunDir

__all__ = ["PlanEstimate", "estimate"]


@dataclass
class PlanEstimate:
    runs: int  # planned runs
    complete: int  # of them, trained to their end already
    iterations: int  # iterations still to train, over every planned run
    seconds: float | None  # wall time of the runs still to train at `parallel`; None: nothing measured
    parallel: int
    unmeasured: list[str] = field(default_factory=list)  # variants no run on this machine has measured
    measured_from: int = 0  # finished iterations the estimate rests on

    def text(self) -> str:
        """'15 runs (0 complete), 1800 iterations to train; about 3.2 h on this machine at 2 at once (...)'."""
        head = f"{self.runs} runs ({self.complete} complete), {self.iterations} iterations to train"
        if self.iterations == 0:
            return head
        if self.seconds is None:
            return (
                f"{head}; no estimate of the time: no run with these settings has finished an iteration in this "
                "runs folder (one `ts train` iteration of a method measures it)"
            )
        part = f"; not counted: {', '.join(self.unmeasured)} (never run here)" if self.unmeasured else ""
        return (
            f"{head}; about {_duration(self.seconds)} on this machine at {self.parallel} at once (from "
            f"{self.measured_from} finished iterations of runs with the same settings{part}; the SFT control and "
            "the final tests come on top)"
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _settings_key(cfg: RunConfig) -> str:
    """What makes an iteration cost what it costs: the config but its seed and its length."""
    return cfg.model_copy(update={"seed": 0, "iterations": 1, "started_iterations": None}).config_hash()


def _iteration_seconds(run: RunDir, iterations: int) -> list[float]:
    """Seconds of each finished iteration (its update's manifest exists) of `run`, below `iterations`."""
    out = []
    for k in range(iterations):
        if not run.manifest_path(k, "update").exists():
            break
        manifests = [run.read_manifest(k, s) for s in ("snapshot", "seeds", "continuation", "verify", "update")]
        evaluated = run.read_manifest(k, "evaluate")
        out.append(sum(sum(m.seconds.values()) for m in [*manifests, evaluated] if isinstance(m, Manifest)))
    return out


def _measured(runs_dir: Path) -> dict[str, list[float]]:
    """Settings key -> the seconds of every finished iteration of the runs in `runs_dir`."""
    by_key: dict[str, list[float]] = {}
    for config in sorted(runs_dir.glob("*/config.yaml")):
        try:
            cfg = load_saved_config(config, check_outside=False)
        except (ConfigError, OSError):
            continue  # a damaged run measures nothing; `ts check` says what is wrong with it
        secs = _iteration_seconds(RunDir(config.parent), cfg.iterations)
        if secs:
            by_key.setdefault(_settings_key(cfg), []).extend(secs)
    return by_key


def estimate(specs: Sequence[RunSpec], runs_dir: Path, parallel: int) -> PlanEstimate:
    """The runs, the iterations still to train and their wall time on this machine (see the module)."""
    measured = _measured(Path(runs_dir)) if Path(runs_dir).is_dir() else {}
    complete = iterations = 0
    total = 0.0
    unmeasured: list[str] = []
    used: set[str] = set()  # the settings whose measurements the estimate rests on
    for spec in specs:
        cfg = spec.config()
        done = len(_iteration_seconds(RunDir.for_run(spec.run_id, runs_dir), cfg.iterations))
        left = cfg.iterations - done
        complete += left == 0
        iterations += left
        key = _settings_key(cfg)
        secs = measured.get(key)
        if left and not secs:
            if spec.variant not in unmeasured:
                unmeasured.append(spec.variant)
            continue
        if left:
            total += left * sum(secs) / len(secs)
            used.add(key)
    to_train = max(1, min(parallel, len(specs) - complete))
    seconds = total / to_train if used else None
    measured_from = sum(len(measured[k]) for k in used)
    return PlanEstimate(len(specs), complete, iterations, seconds, parallel, unmeasured, measured_from)
