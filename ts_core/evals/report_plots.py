"""The run report's PNG curves (report.py lays them out): accuracy and pass@k, entropy, effective
entropy, clip fraction by population, the seeds of each iteration by source checkpoint, and prefix
diversity (by iteration and by source age), drawn on matplotlib's Agg canvas directly
(no pyplot, no global backend switch); each file written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from thinking_seeds.algo.population_names import REPORTED_POPULATIONS
from thinking_seeds.store.atomic import atomic_write
from thinking_seeds.store.sql import QueryResult

POPULATIONS = REPORTED_POPULATIONS  # the loss's populations and "all" (algo/population_names.py)
# file stem -> (title, y label)
PLOTS = {
    "accuracy": ("Held-out accuracy and pass@k", "accuracy / pass@k"),
    "entropy": ("Token entropy by population (actor/entropy)", "entropy (nats)"),
    "effective_entropy": ("Effective entropy: tokens that carry gradient (actor/effective_entropy)", "entropy (nats)"),
    "clip_fraction": ("Gradient lost to clipping (actor/pg_clipfrac)", "fraction of tokens clipped"),
    "seeds_by_source": ("Seeds by source checkpoint: which snapshot of the pool wrote each iteration's seeds", "seeds"),
    "prefix_diversity": (
        "Prefix diversity over the run: distinct / all character 3-grams of the prefixes",
        "distinct 3-gram ratio",
    ),
}
SEEDED_PLOTS = ("seeds_by_source", "prefix_diversity")  # drawn only for a method that trains on prefixes


def _figure(width: float) -> tuple[Any, Any]:
    """A figure on its own Agg canvas (no pyplot), and matplotlib's MaxNLocator for integer axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(width, 4), dpi=100)
    FigureCanvasAgg(fig)
    return fig, MaxNLocator


def _series_plot(
    path: Path,
    title: str,
    ylabel: str,
    series: dict[str, list[tuple[int, float]]],
    styles: dict[str, str] | None = None,
    unit_range: bool = False,
    fraction: bool = False,
) -> Path | None:
    """Lines of (iteration, value) per label; None (and no file) when there is nothing to draw. Lines
    that coincide are drawn once, labelled "a = b"; `unit_range` / `fraction`: the y axis starts at 0."""
    series = _merge_identical({k: sorted(v) for k, v in series.items() if v})
    if not series:
        return None
    fig, MaxNLocator = _figure(7)
    ax = fig.add_subplot(1, 1, 1)
    for label, pts in series.items():
        xs, ys = zip(*pts, strict=True)
        names = label.split(" = ")
        extra = {"color": "black"} if "all" in names else {}  # the population total stands out
        ax.plot(xs, ys, (styles or {}).get(names[0], "-"), marker="o", markersize=3, label=label, **extra)
    ax.set_title(title)
    ax.set_xlabel("iteration (policy step)")
    ax.set_ylabel(ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if unit_range:
        ax.set_ylim(0.0, 1.02)
    elif fraction:  # a fraction is never negative: no axis below 0 (matplotlib pads all-zero data to ±0.04)
        top = max(y for pts in series.values() for _, y in pts)
        ax.set_ylim(0.0, top * 1.1 if top > 0 else 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def _merge_identical(series: dict[str, list[tuple[int, float]]]) -> dict[str, list[tuple[int, float]]]:
    """Series equal at every point (same iterations, values equal to float rounding) become one,
    labelled "a = b" (accuracy = pass@1; on_policy = all when a run has one population)."""
    out: list[tuple[list[str], list[tuple[int, float]]]] = []
    for label, pts in series.items():
        for names, seen in out:
            if [x for x, _ in seen] == [x for x, _ in pts] and all(
                math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12) for (_, a), (_, b) in zip(seen, pts, strict=True)
            ):
                names.append(label)
                break
        else:
            out.append(([label], pts))
    return {" = ".join(names): pts for names, pts in out}


def _diversity_plot(path: Path, history: QueryResult, diversity: QueryResult) -> Path | None:
    """Two panels: the distinct 3-gram ratio of each iteration's prefixes against iteration (points
    coloured by the iteration's mean seed checkpoint age), and the ratio over the whole run against
    source age. None (and no file) when the run has no prefixes with 3-grams."""
    its = [
        (r["iteration"], float(r["distinct_ratio"]), r["mean_source_age"])
        for r in history.to_dicts()
        if _finite(r["distinct_ratio"])
    ]
    ages: list[tuple[int, float, int]] = []  # (source age, ratio, prefixes); data-set guidance is -1
    for row in diversity.to_dicts():
        if row["breakdown"] == "source_age" and _finite(row["distinct_ratio"]):
            age = -1 if row["bucket"] == "dataset" else int(row["bucket"])
            ages.append((age, float(row["distinct_ratio"]), int(row["prefixes"])))
    if not its and not ages:
        return None
    fig, MaxNLocator = _figure(11)
    left, right = fig.add_subplot(1, 2, 1), fig.add_subplot(1, 2, 2)
    if its:
        xs, ys, mean_age = zip(*sorted(its), strict=True)
        left.plot(xs, ys, "-", color="grey", alpha=0.5, linewidth=1)
        shade = [float(a) if _finite(a) else -1.0 for a in mean_age]
        dots = left.scatter(xs, ys, c=shade, cmap="viridis", s=12 if len(xs) < 200 else 4, zorder=3)
        fig.colorbar(dots, ax=left, label="mean source age of the seeds (-1: data set)")
    left.set_title("each iteration's prefixes", fontsize=10)
    left.set_xlabel("iteration")
    left.set_ylabel(PLOTS["prefix_diversity"][1])
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    if ages:
        xs, ys, ns = zip(*sorted(ages), strict=True)
        right.plot(xs, ys, "-", color="grey", alpha=0.5)
        top = max(ns)
        right.scatter(xs, ys, s=[8 + 40 * n / top for n in ns], color="tab:blue", zorder=3)
        if xs[0] < 0:
            right.annotate("data set", (xs[0], ys[0]), textcoords="offset points", xytext=(4, 4), fontsize=8)
    right.set_title("the whole run, by source age (marker size: prefixes)", fontsize=10)
    right.set_xlabel("source age (iterations between the seed's checkpoint and the policy)")
    right.xaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle(PLOTS["prefix_diversity"][0], fontsize=11)
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def _sources_plot(path: Path, sources: QueryResult) -> Path | None:
    """Stacked bars: each iteration's seeds by the pool snapshot θ_j that wrote them (one colour per
    snapshot), so the pool's history shows as the colours that join it. None (and no file) without
    seeds from a checkpoint."""
    rows = [(int(r["iteration"]), int(r["source_step"]), int(r["seeds"])) for r in sources.to_dicts()]
    if not rows:
        return None
    fig, MaxNLocator = _figure(7)
    ax = fig.add_subplot(1, 1, 1)
    its = sorted({it for it, _, _ in rows})
    bottom = dict.fromkeys(its, 0)
    for src in sorted({s for _, s, _ in rows}):
        n = {it: c for it, s, c in rows if s == src}
        ax.bar(its, [n.get(it, 0) for it in its], bottom=[bottom[it] for it in its], width=0.8, label=f"θ_{src}")
        for it in its:
            bottom[it] += n.get(it, 0)
    ax.set_title(PLOTS["seeds_by_source"][0], fontsize=10)
    ax.set_xlabel("iteration (policy step)")
    ax.set_ylabel(PLOTS["seeds_by_source"][1])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8, title="written by", title_fontsize=8)
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def _finite(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _plots(
    reports: Path, results: dict[str, QueryResult], populations: tuple[str, ...] = POPULATIONS, seeded: bool = True
) -> dict[str, Path | None]:
    """The PNGs of PLOTS (without prefix_diversity for a method without prefixes), each None where
    there is nothing to draw; populations: those the method has."""
    ea, cf = results["entropy_accuracy"], results["clip_fraction"]
    acc: dict[str, list[tuple[int, float]]] = {"accuracy": []}
    styles = {"accuracy": "-"}
    ent: dict[str, list[tuple[int, float]]] = {p: [] for p in populations}
    eff: dict[str, list[tuple[int, float]]] = {p: [] for p in populations}
    for row in ea.to_dicts():
        it = row["iteration"]
        if _finite(row["accuracy"]):
            acc["accuracy"].append((it, float(row["accuracy"])))
        for k, v in (row["pass_at_k"] or {}).items():
            if _finite(v):
                acc.setdefault(f"pass@{k}", []).append((it, float(v)))
                styles[f"pass@{k}"] = "--"
        for p in populations:
            if _finite(row[f"entropy_{p}"]):
                ent[p].append((it, float(row[f"entropy_{p}"])))
            if _finite(row[f"eff_entropy_{p}"]):
                eff[p].append((it, float(row[f"eff_entropy_{p}"])))
    # pass@k curves in increasing k after the accuracy line
    acc = {
        "accuracy": acc["accuracy"],
        **{k: acc[k] for k in sorted((k for k in acc if k != "accuracy"), key=lambda s: int(s[5:]))},
    }
    clip: dict[str, list[tuple[int, float]]] = {}
    for row in cf.to_dicts():
        if _finite(row["clipfrac"]) and row["population"] in populations:
            clip.setdefault(row["population"], []).append((row["iteration"], float(row["clipfrac"])))
    data = {
        "accuracy": (acc, styles),
        "entropy": (ent, None),
        "effective_entropy": (eff, None),
        "clip_fraction": (clip, None),
    }
    out: dict[str, Path | None] = {}
    for stem in PLOTS:
        path = reports / f"{stem}.png"
        if stem in SEEDED_PLOTS:
            drawn = None
            if seeded:
                out[stem] = drawn = (
                    _diversity_plot(path, results["prefix_diversity_history"], results["prefix_diversity"])
                    if stem == "prefix_diversity"
                    else _sources_plot(path, results.get("seeds_by_source") or QueryResult([], []))
                )
        else:
            series, st = data[stem]
            title, ylabel = PLOTS[stem]
            out[stem] = drawn = _series_plot(
                path, title, ylabel, series, st, unit_range=stem == "accuracy", fraction=stem == "clip_fraction"
            )
        if drawn is None and path.exists():
            path.unlink()  # a stale plot from an earlier report must not be shown as current
    return out
