"""Statistics of the update that combine exactly across micro-batches and processes.

Every metric name is declared once, in METRICS, with how it combines (verl-style names; a declared
name also covers its `/<population>` or `/<bucket>` children: `actor/ratio_max` covers
`actor/ratio_max/prefix`):

    mean  Σ value / Σ count. Sums and counts are added within a process and SUM-reduced across
          processes, so the metric is the mean over the union of every process's tokens, not a
          mean of per-process means (which weighs a process with few tokens like one with many).
    sum   Σ value, SUM across processes.
    max   MAX across processes (a mean of per-process maxima is no maximum of anything).
    min   MIN across processes.

Values stay tensors on the device that computed them: adding a 0-dim tensor queues a kernel and
never waits for it, so recording a statistic costs no host-device synchronisation. `Stats.metrics()`
packs everything into two vectors (additive, extreme), all-reduces them across processes when
asked (SUM and MAX; a minimum travels negated inside the MAX) and reads them back with one sync.

Float64 throughout: token counts of a large update exceed float32's exact integers (2**24), and
float64 keeps the metrics of a single process bit-identical to summing Python floats.
"""

from __future__ import annotations

from typing import Literal

import torch

Reduction = Literal["mean", "sum", "max", "min"]

METRICS: dict[str, Reduction] = {
    # compute_policy_loss (algo/losses.py), per population on_policy | continuation | prefix | all
    "actor/pg_loss": "mean",
    "actor/zero_adv_frac": "mean",
    "actor/kl": "mean",
    "actor/pg_clipfrac": "mean",
    "actor/pg_clipfrac_adv": "mean",
    "actor/ratio_mean": "mean",
    "actor/ratio_max": "max",
    "actor/ratio_above_frac": "mean",
    "actor/grad_tokens": "mean",
    "actor/entropy": "mean",
    "actor/effective_entropy": "mean",
    # the trainer (train/trainer.py)
    "actor/prefix_abs_log_ratio": "mean",  # per source-age bucket
    "actor/grad_norm": "mean",  # over optimizer steps (every process sees the same all-reduced norm)
    "actor/optimizer_steps": "max",  # every process takes the same steps: not a sum over processes
    "perf/cuda_max_memory_gib": "max",  # the fullest GPU is the one that runs out
}

_IDENTITY = {"max": float("-inf"), "min": float("inf")}


def reduction_of(name: str) -> Reduction:
    """The declared reduction of `name`: its own entry, or that of its nearest declared parent."""
    parts = name.split("/")
    for n in range(len(parts), 0, -1):
        r = METRICS.get("/".join(parts[:n]))
        if r is not None:
            return r
    raise KeyError(f"metric {name!r} has no declared reduction; add it (or a parent) to algo/stats.py METRICS")


def _scalar(value: torch.Tensor | float) -> torch.Tensor:
    """A 0-dim float64 tensor on the value's own device (no sync: a dtype cast is a queued kernel)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise ValueError(f"a statistic is one number, got a tensor of shape {tuple(value.shape)}")
        return value.detach().reshape(()).to(torch.float64)
    return torch.tensor(float(value), dtype=torch.float64)


class Stats:
    """Named statistics of one process: sums and counts of means, sums, maxima, minima (tensors).

        stats.add("actor/pg_clipfrac/prefix", clipped.sum(), n_tokens)   # mean: value and count
        stats.add("actor/ratio_max/prefix", ratio.masked_fill(~m, -inf).max())   # max: value only
        stats.metrics()                        # {name: float}, this process
        stats.metrics(across_processes=True)   # the same over every process of torch.distributed

    A mean whose total count is 0 and a maximum (minimum) of nothing (±inf) are left out of the
    metrics, so an empty population never reads as "0".
    """

    def __init__(self) -> None:
        self.totals: dict[str, torch.Tensor] = {}  # mean and sum metrics: Σ value
        self.counts: dict[str, torch.Tensor] = {}  # mean metrics: Σ count
        self.extremes: dict[str, torch.Tensor] = {}  # max and min metrics

    def add(self, name: str, value: torch.Tensor | float, count: torch.Tensor | float | None = None) -> None:
        """Record one observation of `name`; `count` is required for mean metrics and refused otherwise."""
        kind = reduction_of(name)
        if (count is None) == (kind == "mean"):
            raise ValueError(f"{name} is a {kind} metric: " + ("pass a count" if kind == "mean" else "pass no count"))
        v = _scalar(value)
        # No `.to(device)` anywhere: a CPU 0-dim tensor joins a GPU one as a scalar argument, while
        # a copy between devices would wait for the GPU.
        if kind in _IDENTITY:
            old = self.extremes.get(name)
            pick = torch.maximum if kind == "max" else torch.minimum
            self.extremes[name] = v if old is None else pick(old, v)
            return
        old = self.totals.get(name)
        self.totals[name] = v if old is None else old + v
        if count is not None:
            c = _scalar(count)
            old_c = self.counts.get(name)
            self.counts[name] = c if old_c is None else old_c + c

    def merge(self, other: Stats) -> Stats:
        """Fold another Stats (e.g. one micro-batch's) into this one; returns self."""
        for name, total in other.totals.items():
            self.add(name, total, other.counts.get(name))
        for name, value in other.extremes.items():
            self.add(name, value)
        return self

    def names(self) -> list[str]:
        return list(dict.fromkeys([*self.totals, *self.extremes]))

    def metrics(self, across_processes: bool = False) -> dict[str, float]:
        """{name: value} of this process, or of all processes of the default torch.distributed group.

        Every process must call it (a collective) when `across_processes` is true; names recorded
        on some processes only are fine: the others contribute the identity (0, or ∓inf).
        """
        names = self.names()
        device = home_device(self)
        if across_processes:
            import torch.distributed as dist

            if not (dist.is_available() and dist.is_initialized()):
                raise RuntimeError("Stats.metrics(across_processes=True) needs an initialised torch.distributed group")
            nccl = dist.get_backend() == "nccl"  # NCCL reduces GPU tensors only, gloo CPU ones
            device = torch.device("cuda", torch.cuda.current_device()) if nccl else torch.device("cpu")
            gathered: list[list[str] | None] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, names)
            names = sorted({n for ns in gathered for n in ns or []})
        additive, extreme = pack(self, names, device)
        if across_processes:
            dist.all_reduce(additive, op=dist.ReduceOp.SUM)
            dist.all_reduce(extreme, op=dist.ReduceOp.MAX)
        return unpack(names, torch.cat([additive, extreme]).tolist())  # the one host-device sync


def home_device(stats: Stats) -> torch.device:
    """Where the statistics were computed: the first accelerator device among them, else the CPU
    (values given as Python numbers are CPU tensors and join the others as scalars)."""
    for t in (*stats.totals.values(), *stats.extremes.values()):
        if t.device.type != "cpu":
            return t.device
    return torch.device("cpu")


def pack(stats: Stats, names: list[str], device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The statistics of `names` as two float64 vectors on `device`.

    additive (2·N_additive,): [Σ value, Σ count] per mean or sum metric (count 0 for a sum), to be
        SUM-reduced. A name this process never recorded contributes (0, 0).
    extreme (N_extreme,): the maximum per max metric and the *negated* minimum per min metric, to
        be MAX-reduced. A name this process never recorded contributes -inf.
    Both keep the order of `names` (filtered by kind), which `unpack` relies on. The vectors are
    built on the device that holds the statistics and moved to `device` in one copy each.
    """
    home = home_device(stats)
    zero = torch.zeros((), dtype=torch.float64, device=home)
    neg_inf = torch.full((), float("-inf"), dtype=torch.float64, device=home)
    additive, extreme = [], []
    for name in names:
        kind = reduction_of(name)
        if kind in _IDENTITY:
            v = stats.extremes.get(name)
            extreme.append(neg_inf if v is None else zero + (-v if kind == "min" else v))  # zero +: lifts a CPU scalar
        else:
            for part in (stats.totals.get(name), stats.counts.get(name)):
                additive.append(zero if part is None else zero + part)

    def stack(xs: list[torch.Tensor]) -> torch.Tensor:
        return (torch.stack(xs) if xs else torch.zeros(0, dtype=torch.float64, device=home)).to(device)

    return stack(additive), stack(extreme)


def unpack(names: list[str], values: list[float]) -> dict[str, float]:
    """Inverse of `pack` on the concatenated (reduced) vectors read back to the host."""
    kinds = [reduction_of(n) for n in names]
    n_additive = 2 * sum(k not in _IDENTITY for k in kinds)
    additive, extreme = iter(values[:n_additive]), iter(values[n_additive:])
    out: dict[str, float] = {}
    for name, kind in zip(names, kinds, strict=True):
        if kind in _IDENTITY:
            v = next(extreme)
            if v != float("-inf"):
                out[name] = -v if kind == "min" else v
            continue
        total, count = next(additive), next(additive)
        if kind == "sum":
            out[name] = total
        elif count > 0:
            out[name] = total / count
    return out
