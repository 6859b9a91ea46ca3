"""A comparison's pre-registered protocol: what it runs and what it will test, fixed before it runs.

    record = register(spec, specs, runs_dir)        # docs/results/<id>/protocol.json + protocol.md
    protocol_lines(load(spec.report_dir))           # the report's "Protocol" section

Before the first confirmatory run `ts compare` writes protocol.json: the methods (each variant's
preset, overrides, seeds, the config hash of every run and the resolved config), the SFT control,
the primary endpoint (test pass@1 of the primary pair, paired t at equal seed, two-sided α 0.05),
the secondary endpoints (the claims table's rows, Holm-adjusted), and the validation selection's
grid, scores and choice (selection.py) when there was one; with its hash. A rerun computes the
protocol again: the same hash goes on; a different one is refused (ConfigError, exit 2) unless
`--amend-protocol` is given, which records the amendment (when, from which hash to which, what
changed, and whether any run had already started). The report states whether anything changed
after the first run started, and what.

What the hash covers: everything above except the readable resolved configs, which are stored but
not hashed: a config field added to the code later (its default out of the config hash, as
tests/unit/test_archives_restorable.py demands) changes the dump, not what a run computes, so the
runs' config hashes stand for their configs. A comparison run before this module existed has no
protocol.json: one is registered on its next full run only if some planned run is still to start (the
record names the runs that had started); with every run begun it stays unregistered, and its report
says its claims are exploratory (`register`).
"""

from __future__ import annotations

import hashlib
import json
import statistics
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from thinking_seeds.config import ConfigError
from thinking_seeds.experiments.claims_tables import _table
from thinking_seeds.experiments.members import archive_record
from thinking_seeds.experiments.planning import COMPUTE_MATCHED, EQUAL_ITERATIONS, PRIMARY_METRIC
from thinking_seeds.experiments.run_spec import PROTOCOL_FILE
from thinking_seeds.store.atomic import atomic_write

__all__ = ["PROTOCOL_FILE", "SECONDARY", "changes", "load", "protocol_lines", "protocol_of", "register"]

SECONDARY = (
    "test pass@1, thinking seeds − seq_mix",
    "effective entropy (all tokens, last iterations), thinking seeds − grpo",
    "|A|-weighted clipped share of all tokens, thinking seeds − seq_mix (lower is the claim)",
    "test pass@k at the largest k, thinking seeds − grpo and − θ_0",
    "share of the hard prompts (θ_0 final-test success < 25%) solved at least once, thinking seeds − grpo",
    "distinct correct solution patterns per test prompt, thinking seeds − grpo",
    "effective entropy, validation pass@k and distinct patterns at matched validation pass@1 (matched.py)",
)


def protocol_of(
    spec: Any, specs: Sequence[Any], selection: dict[str, Any] | None = None, runs_dir: Path | None = None
) -> dict[str, Any]:
    """The protocol of `spec` as planned (`specs` = spec.runs(), with their recorded defaults from
    compare.prepare): the hashed part and the readable configs. The SFT controls' configs keep the old
    defaults their records hold (under `runs_dir`, in the archive or in this protocol as registered:
    sft_control.recorded_controls), so a comparison registered before a default changed hashes as registered."""
    from thinking_seeds.experiments.sft_control import control_config, control_run_id, recorded_controls

    methods: dict[str, Any] = {}
    configs: dict[str, Any] = {}
    for s in specs:
        entry = methods.setdefault(
            s.variant,
            {"method": s.method, "overrides": [o for o in s.overrides if not o.startswith("seed=")], "runs": {}},
        )
        cfg = s.config()
        entry["runs"][s.run_id] = {"seed": s.seed, "config_hash": cfg.config_hash()}
        if s.variant not in configs:
            dump = cfg.model_dump(mode="json")
            dump.pop("seed", None)
            configs[s.variant] = dump
    control = None
    if spec.control:
        seeds, base = spec.control_seed_list(specs), specs[0].base_overrides
        kept = recorded_controls(spec.compare_id, spec.preset, base, seeds, runs_dir, spec.report_dir)
        control = {
            "seconds": spec.control_seconds,
            "corpus_size": spec.control_corpus_size,
            "max_steps": spec.control_max_steps,
            "runs": {
                control_run_id(spec.compare_id, k): control_config(spec.preset, base, k, kept[k]).config_hash()
                for k in seeds
            },
        }
    pair = spec.primary_pair
    hashed = {
        "compare_id": spec.compare_id,
        "preset": spec.preset,
        "methods": methods,
        "control": control,
        "final_test": spec.final_test,
        "reference": spec.reference,
        "primary_endpoint": None
        if pair is None
        else {
            "metric": PRIMARY_METRIC,
            "what": "test pass@1 of the final policy on the whole test split",
            "pair": list(pair),
            "test": "paired t-test at equal seed, two-sided, alpha 0.05",
        },
        "secondary_endpoints": list(SECONDARY),
        "multiplicity": "Holm over every row of the report's claims table",
        "selection": selection,
    }
    if spec.reading != COMPUTE_MATCHED:  # only then: a protocol registered before the option keeps its hash
        hashed["reading"] = spec.reading
        if pair is not None:
            hashed["primary_endpoint"]["what"] += (
                " at equal iterations (an arm given more iterations: its checkpoint at the other arm's count)"
            )
    return {"protocol": hashed, "hash": _hash(hashed), "configs": configs}


def _hash(hashed: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(hashed, sort_keys=True).encode()).hexdigest()[:16]


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(d, dict):
        out: dict[str, Any] = {}
        for k, v in d.items():
            out |= _flat(v, f"{prefix}.{k}" if prefix else str(k))
        return out
    return {prefix: d}


def changes(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """`key: old -> new` for every leaf that differs between two protocol records (configs included,
    so a changed setting is named, not only the run's config hash)."""
    a = _flat({"protocol": old.get("protocol"), "configs": old.get("configs")})
    b = _flat({"protocol": new.get("protocol"), "configs": new.get("configs")})
    keys = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    return [f"{k}: {a.get(k, '(absent)')!r} -> {b.get(k, '(absent)')!r}" for k in keys]


def _started(specs: Sequence[Any], runs_dir: Path) -> list[str]:
    """The planned runs that have begun: a config.yaml (training started) or a restored archive copy."""
    out = []
    for s in specs:
        root = Path(runs_dir) / s.run_id
        if (root / "config.yaml").is_file() or archive_record(root) is not None:
            out.append(s.run_id)
    return out


def load(report_dir: Path) -> dict[str, Any] | None:
    path = Path(report_dir) / PROTOCOL_FILE
    return json.loads(path.read_text()) if path.is_file() else None


def register(
    spec: Any, specs: Sequence[Any], runs_dir: Path, selection: dict[str, Any] | None = None, now: str | None = None
) -> dict[str, Any] | None:
    """Write protocol.json (+ protocol.md) for the planned comparison, or check it against the one
    registered; returns the record. Raises ConfigError when it changed without `spec.amend_protocol`.

    A comparison with no protocol whose every planned run has already begun (an archive from before
    protocols existed, restored in a fresh clone) is left unregistered and None returned: a record
    written now would pre-register nothing, yet its report would name a primary endpoint and drop the
    note that the readings are exploratory, so the report rebuilt from the archive would differ from
    the committed one."""
    now = now or datetime.now(UTC).isoformat(timespec="seconds")
    old = load(spec.report_dir)
    started = _started(specs, runs_dir)
    if old is None and specs and len(started) == len(specs):
        return None
    new = protocol_of(spec, specs, selection, runs_dir)
    if old is None:
        record = new | {"registered_at": now, "runs_started_before_registration": started, "amendments": []}
    elif old["hash"] == new["hash"]:
        return old
    else:
        diff = changes(old, new)
        if not spec.amend_protocol:
            shown = "; ".join(diff[:6]) + (f"; ... {len(diff) - 6} more" if len(diff) > 6 else "")
            raise ConfigError(
                f"{spec.report_dir / PROTOCOL_FILE} registers protocol {old['hash']}, this command plans "
                f"{new['hash']} ({shown}); rerun with the registered settings, or add --amend-protocol to record "
                "the change as an amendment"
            )
        amendment = {"at": now, "from_hash": old["hash"], "to_hash": new["hash"], "changes": diff}
        amendment["runs_started_before"] = started
        record = old | new | {"amendments": [*old.get("amendments", []), amendment]}
    spec.report_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(record, indent=2, sort_keys=True) + "\n"
    atomic_write(spec.report_dir / PROTOCOL_FILE, lambda f: f.write(text), mode="w")
    md = "\n".join(["# Protocol", "", *protocol_lines(record, detail=True)]) + "\n"
    atomic_write(spec.report_dir / "protocol.md", lambda f: f.write(md), mode="w")
    return record


def protocol_lines(record: dict[str, Any] | None, detail: bool = False) -> list[str]:
    """Markdown: when and how the protocol was registered, what it fixes, and every amendment."""
    if record is None:
        return [
            "No protocol.json: this comparison's methods and endpoints were not registered before its runs "
            "(it predates `ts compare`'s protocol); read its claims as exploratory.",
            "",
        ]
    p = record["protocol"]
    pe = p.get("primary_endpoint")
    primary = f"{pe['what']}, {' − '.join(pe['pair'])}, {pe['test']}" if pe else "none (no --primary pair compared)"
    before = record.get("runs_started_before_registration") or []
    when = (
        "before the first run started"
        if not before
        else f"after {len(before)} of its runs had started (not pre-registered for those)"
    )
    md = [
        f"Protocol `{record['hash']}` (protocol.json), registered {record['registered_at']} {when}. Primary "
        f"endpoint: {primary}. Secondary endpoints: the claims table's rows ({p['multiplicity']}"
        + ("; every row read at equal iterations" if p.get("reading") == EQUAL_ITERATIONS else "")
        + ").",
        "",
    ]
    sel = p.get("selection")
    if sel:
        chosen = ", ".join(f"{m} {sel['key']}={v}" for m, v in sel["chosen"].items())
        md += [
            f"Selected on validation ({sel['prompts']} prompts × {sel['samples']} samples, seeds "
            f"{', '.join(map(str, sel['seeds']))}; the test split was not read): {sel['key']} from "
            f"{', '.join(sel['grid'])}, {sel['rule']}: {chosen}.",
            "",
            *selection_score_lines(sel),
        ]
    amendments = record.get("amendments") or []
    late = [x for x in amendments if x.get("runs_started_before")]
    if not amendments:
        md += ["Nothing was changed after registration.", ""]
    else:
        md += [
            f"{len(amendments)} amendment(s); {len(late)} made after runs had started"
            + (" — the protocol changed after the first run started:" if late else ":"),
            "",
        ]
        for x in amendments:
            n = len(x.get("runs_started_before") or [])
            moment = f"after {n} runs had started" if n else "before any run"
            md.append(f"- {x['at']} ({moment}), {x['from_hash']} -> {x['to_hash']}: " + "; ".join(x["changes"][:10]))
        md.append("")
    if detail:
        md += ["| variant | overrides | seeds |", "|---|---|---|"]
        for v, e in p["methods"].items():
            seeds = ", ".join(str(r["seed"]) for r in e["runs"].values())
            md.append(f"| {v} | `{' '.join(e['overrides'])}` | {seeds} |")
        md += ["", "Secondary endpoints:", "", *(f"- {s}" for s in p["secondary_endpoints"]), ""]
    return md


def selection_score_lines(sel: dict[str, Any]) -> list[str]:
    """The selection's every score (mean over the seeds, then each seed), the choice in bold, and a
    warning when a choice lies on the grid's edge: the best value may then lie outside the grid, which
    a registered protocol does not widen after the fact."""
    grid, scores = list(sel["grid"]), sel.get("scores") or {}
    if not scores:
        return []
    rows = []
    for m, by_value in scores.items():
        cells = [m]
        for v in grid:
            per_seed = by_value.get(v) or {}
            if not per_seed:
                cells.append("—")
                continue
            vals = [per_seed[s] for s in sorted(per_seed, key=int)]
            cell = f"{statistics.fmean(vals):.3f} ({' / '.join(f'{x:.3f}' for x in vals)})"
            cells.append(f"**{cell}**" if sel["chosen"].get(m) == v else cell)
        rows.append(cells)
    md = _table(["method", *(f"{sel['key']}={v}" for v in grid)], rows)
    md += [
        "Validation pass@1 of each final policy: mean over the seeds (each seed in parentheses); bold is the choice.",
        "",
    ]
    edge = [m for m, v in sel["chosen"].items() if len(grid) > 1 and v in (grid[0], grid[-1])]
    if edge:
        md += [
            f"The choice lies on the grid's edge for {', '.join(edge)}: the best value may lie outside the "
            "grid, and the registered protocol does not widen it.",
            "",
        ]
    return md
