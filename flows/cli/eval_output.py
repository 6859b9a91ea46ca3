"""What `ts eval` prints: a pass@k table (one row per data source and one over all prompts; k as
columns), then the other numbers; `--format json` prints ONE object, `--format csv` the table.

Both evaluations come out in one shape:

    {"run_id": "demo", "step": 4, "split": "test" | "data": "asdiv.parquet", "samples": 8,
     "metrics": {"prompts": 64, "samples": 512, "avg@8": .., "pass@1": .., "maj@1": .., "status": {"ok": 90, ..}},
     "by_source": {"asdiv": {...}},   # --data only
     "seeded": {...},                 # the explorable-space evaluation, when it ran
     "path": "evals/...", "seconds": {...}}

Counts (prompts, samples, statuses) are integers.
"""

from __future__ import annotations

import json
import re
from typing import Any

import typer

from thinking_seeds.flows.cli.output import OutputFormat, _jsonable, console, emit

__all__ = ["print_result", "split_result"]

_COUNTS = {"prompts", "samples"}
_AT_K = re.compile(r"(avg|pass|maj)@(\d+)")  # the metrics shown as the table's columns


def _metric_order(name: str) -> tuple[int, int, str]:
    m = _AT_K.fullmatch(name)
    if m:
        return (("avg", "pass", "maj").index(m.group(1)), int(m.group(2)), name)
    return (3, 0, name)


def _group(flat: dict[str, float], prefix: str) -> dict[str, Any]:
    """The `prefix/*` numbers of a split evaluation as a group: accuracy as avg@n, counts as ints."""
    out: dict[str, Any] = {}
    status: dict[str, int] = {}
    n = max((int(k.split("@")[1]) for k in flat if k.startswith(f"{prefix}/pass@")), default=None)
    for key, v in flat.items():
        if not key.startswith(prefix + "/"):
            continue
        name = key[len(prefix) + 1 :]
        if name.startswith("status_"):
            status[name[7:]] = int(v)
        elif name == "accuracy" and n is not None:
            out[f"avg@{n}"] = v
        elif name in _COUNTS:
            out[name] = int(v)
        else:
            out[name] = v
    if n is not None and "prompts" in out:
        out["samples"] = out["prompts"] * n
    ordered = {k: out[k] for k in sorted(out, key=lambda k: (k not in _COUNTS, _metric_order(k)))}
    if status:
        ordered["status"] = dict(sorted(status.items()))
    return ordered


# The one line under a table with a seeded row: what that row measures, next to the plain one.
SEEDED_LEGEND = (
    "all (seeded): every sample continues a prefix that a checkpoint of the run's historical pool wrote "
    "(θ_{step} writes only the continuation: the solutions the pool's seeds let it reach); "
    "all: θ_{step}'s own samples from the prompt alone."
)


def split_result(res: dict[str, Any]) -> dict[str, Any]:
    """`evaluate_checkpoint`'s result (flat eval/* metrics) in the shape of the module docstring."""
    flat = res["metrics"]
    out: dict[str, Any] = {"run_id": res["run_id"], "step": res["step"], "split": res["split"]}
    metrics = _group(flat, "eval")
    out["samples"] = max((int(k.split("@")[1]) for k in metrics if k.startswith("pass@")), default=None)
    out["metrics"] = metrics
    if any(k.startswith("eval_seeded/") for k in flat):
        seeded = _group(flat, "eval_seeded")
        seeded.setdefault("prompts", metrics.get("prompts"))
        out["seeded"] = seeded
    out["path"] = res.get("path")
    out["seconds"] = {k.split("/", 2)[2]: round(v, 3) for k, v in flat.items() if k.startswith("time/evaluate/")}
    return out


def _table_rows(groups: dict[str, dict[str, Any]]) -> tuple[list[str], list[tuple]]:
    names = sorted({k for g in groups.values() for k in g if _AT_K.fullmatch(k)}, key=_metric_order)
    columns = ["source", "prompts", *names]
    rows = [(label, g.get("prompts"), *(g.get(k) for k in names)) for label, g in groups.items()]
    return columns, rows


def print_result(res: dict[str, Any], fmt: OutputFormat) -> None:
    """Print a result of `ts eval` (either evaluation) as the module docstring says."""
    out = res if "by_source" in res else split_result(res)
    if fmt is OutputFormat.json:
        typer.echo(json.dumps(_jsonable(out), indent=2))
        return
    groups: dict[str, dict[str, Any]] = dict(out.get("by_source", {}))
    if "seeded" in out:
        groups["all (seeded)"] = out["seeded"]
    groups["all"] = out["metrics"]
    columns, rows = _table_rows(groups)
    if fmt is OutputFormat.csv:
        emit(columns, rows, fmt)
        return
    on = f"{out['data']}" if "data" in out else f"the {out['split']} split"
    title = f"{out['run_id']}: θ_{out['step']} on {on}, {out['samples']} samples per prompt"
    if out.get("reward"):
        title += f", reward {out['reward']}"
    emit(columns, rows, fmt, title=title)
    if "seeded" in out:
        console().print(SEEDED_LEGEND.format(step=out["step"]), soft_wrap=True)  # one line, whatever the width
    m = out["metrics"]
    other = [(k, v) for k, v in m.items() if k not in _COUNTS and k != "status" and not _AT_K.fullmatch(k)]
    con = console()
    if m.get("status"):
        counts = ", ".join(f"{s} {c}" for s, c in m["status"].items())
        con.print(f"statuses: {counts} (of {m.get('samples')} samples)")
    if other:
        emit(["metric", "value"], other, fmt, title="other metrics (all prompts)")
    if out.get("path"):
        con.print(f"written: {out['path']}")
