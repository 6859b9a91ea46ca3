"""The PNG plots of a comparison report: curves over iterations (mean ± std band over seeds) and
pass@k at the final step, one colour per variant.

    paths = plots(out_dir, data, variants, ks)    # {"accuracy": out_dir/accuracy.png or None, ...}

A plot with nothing to draw is not written (and an old file of that name is removed, so a stale
plot never passes for this report's). Never imports prefect.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from thinking_seeds.experiments.compare_data import POPULATIONS, mean_std
from thinking_seeds.store.atomic import atomic_write

__all__ = ["PLOTS", "SMOOTH", "plots"]

PLOTS = {
    "accuracy": "Held-out accuracy (eval/accuracy), mean ± std over seeds",
    "strategy_b": "Task diversity: share of strategy-b solutions (eval/strategy_b)",
    "distinct_patterns": "Task diversity: distinct correct solution patterns per prompt (eval/distinct_patterns)",
    "entropy": "Token entropy by population (actor/entropy)",
    "effective_entropy": "Effective entropy by population (actor/effective_entropy)",
    "clip_fraction": "Gradient lost to clipping by population (actor/pg_clipfrac)",
    "pass_at_k": "pass@k at the final step: plain (solid) vs seeded (dashed) sampling",
}


SMOOTH = 10  # iterations in the moving average of the per-iteration (update) curves


def _smooth(pts: list[tuple[int, float]], window: int = SMOOTH) -> list[tuple[int, float]]:
    """Trailing moving average over `window` points: per-iteration entropy and clip fractions move
    by more from one batch to the next than over the whole run, which hides the trend."""
    out, ys = [], []
    for x, y in pts:
        ys.append(y)
        out.append((x, statistics.fmean(ys[-window:])))
    return out


def _band(per_seed: list[list[tuple[int, float]]]) -> tuple[list[int], list[float], list[float]]:
    by_x: dict[int, list[float]] = defaultdict(list)
    for pts in per_seed:
        for x, y in pts:
            by_x[x].append(y)
    xs = sorted(by_x)
    means = [statistics.fmean(by_x[x]) for x in xs]
    stds = [statistics.stdev(by_x[x]) if len(by_x[x]) > 1 else 0.0 for x in xs]
    return xs, means, stds


def _figure(ncols: int = 1, nrows: int = 1, size: tuple[float, float] = (7, 4)):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=size, dpi=100)
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(nrows, ncols, i + 1) for i in range(nrows * ncols)]
    return fig, axes


def _draw(
    ax,
    groups: dict[str, list[list[tuple[int, float]]]],
    colors: dict[str, str],
    title: str,
    ylabel: str,
    unit: bool = False,
) -> bool:
    from matplotlib.ticker import MaxNLocator

    drawn = False
    for variant, per_seed in groups.items():
        per_seed = [p for p in per_seed if p]
        if not per_seed:
            continue
        xs, ms, ss = _band(per_seed)
        ax.plot(xs, ms, marker="o", markersize=3, label=variant, color=colors[variant])
        if any(ss):
            lo = [m - s for m, s in zip(ms, ss, strict=True)]
            hi = [m + s for m, s in zip(ms, ss, strict=True)]
            ax.fill_between(xs, lo, hi, color=colors[variant], alpha=0.2, linewidth=0)
        drawn = True
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("iteration (policy step)", fontsize=8)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    if unit:
        ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=7)
    return drawn


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    return atomic_write(path, lambda f: fig.savefig(f, format="png"))


def plots(out: Path, data: dict[str, Any], variants: dict[str, list[str]], ks: list[int]) -> dict[str, Path | None]:
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    colors = {v: cmap(i % 10) for i, v in enumerate(variants)}
    curves = data["curves"]

    def groups(name: str, smooth: bool = False) -> dict[str, list[list[tuple[int, float]]]]:
        pick = (lambda pts: _smooth(pts)) if smooth else (lambda pts: pts)
        return {v: [pick(curves[r].get(name, [])) for r in runs] for v, runs in variants.items()}

    paths: dict[str, Path | None] = {}
    for stem, name, ylabel in (
        ("accuracy", "eval/accuracy", "accuracy (avg@n)"),
        ("strategy_b", "eval/strategy_b", "share of strategy b"),
        ("distinct_patterns", "eval/distinct_patterns", "distinct patterns / prompt"),
    ):
        fig, (ax,) = _figure()
        drawn = _draw(ax, groups(name), colors, PLOTS[stem], ylabel, unit=stem != "distinct_patterns")
        paths[stem] = _save(fig, out / f"{stem}.png") if drawn else None
    for stem, metric, ylabel in (
        ("entropy", "entropy", "entropy (nats)"),
        ("effective_entropy", "effective_entropy", "entropy (nats)"),
        ("clip_fraction", "pg_clipfrac", "fraction of tokens clipped"),
    ):
        fig, axes = _figure(2, 2, (11, 7))
        drawn = [
            _draw(ax, groups(f"actor/{metric}/{pop}", smooth=True), colors, f"{pop}", ylabel)
            for ax, pop in zip(axes, POPULATIONS, strict=True)
        ]
        fig.suptitle(f"{PLOTS[stem]}, {SMOOTH}-iteration moving average", fontsize=10)
        paths[stem] = _save(fig, out / f"{stem}.png") if any(drawn) else None
    # pass@k at the final step, plain vs seeded
    fig, (ax,) = _figure()
    drawn = False
    for v, runs in variants.items():
        for prefix, style in (("eval", "-"), ("eval_seeded", "--")):
            xs, ms = [], []
            for k in ks:
                s = mean_std([data["per_run"].get(r, {}).get(f"{prefix}/pass@{k}", float("nan")) for r in runs])
                if s is not None:
                    xs.append(k)
                    ms.append(s[0])
            if xs:
                ax.plot(
                    xs,
                    ms,
                    style,
                    marker="o",
                    markersize=3,
                    color=colors[v],
                    label=f"{v} ({'seeded' if prefix == 'eval_seeded' else 'plain'})",
                )
                drawn = True
    ax.set_xscale("log", base=2)
    ax.set_xticks(ks, [str(k) for k in ks])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("k", fontsize=8)
    ax.set_ylabel("pass@k", fontsize=8)
    ax.set_title(PLOTS["pass_at_k"], fontsize=9)
    ax.grid(alpha=0.3)
    if drawn:
        ax.legend(fontsize=6)
    paths["pass_at_k"] = _save(fig, out / "pass_at_k.png") if drawn else None
    for stem, p in paths.items():
        stale = out / f"{stem}.png"
        if p is None and stale.exists():
            stale.unlink()  # an old plot must not pass for this report's
    return paths
