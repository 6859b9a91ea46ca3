"""Group-relative advantage estimators (GRPO family), registered by name as in verl's core_algos.

Every estimator has the same signature::

    fn(rewards: (N,) float, group_index: (N,) long, baseline_mask: (N,) bool | None,
       epsilon: float) -> advantages: (N,) float

`group_index[i]` is the prompt sample i answers (any integer ids, not necessarily contiguous).
`baseline_mask[i]` says whether sample i helps define its group's baseline statistics (docs/algorithm.md §2
step 5, `advantage.baseline`):

- `group`:     all True -> seeded and on-policy samples share one baseline.
- `on_policy`: True only for on-policy samples -> seeded samples are judged against what the
               current policy achieves on its own, so a seed that helps gets a positive advantage.

Every sample gets an advantage, whether or not it is in the baseline. Edge cases, shared by all
estimators (each is tested):

- a group with no baseline samples falls back to the whole group as its baseline, so a prompt
  whose samples are all seeded still gets a group-relative signal instead of none;
- a group of size 1 gets advantage 0: there is nothing to be relative to.

Outcome rewards only (one scalar per sample); broadcasting over response tokens is the loss's job.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "AdvantageEstimator",
    "compute_dr_grpo_outcome_advantage",
    "compute_grpo_outcome_advantage",
    "compute_rloo_outcome_advantage",
    "get_adv_estimator",
    "register_adv_est",
]


class AdvantageEstimator(Protocol):
    def __call__(
        self,
        rewards: torch.Tensor,
        group_index: torch.Tensor,
        baseline_mask: torch.Tensor | None = None,
        epsilon: float = 1e-6,
    ) -> torch.Tensor: ...


ADVANTAGE_ESTIMATORS: dict[str, AdvantageEstimator] = {}


def register_adv_est(name: str) -> Callable[[AdvantageEstimator], AdvantageEstimator]:
    """Decorator: register an advantage estimator under `name` (e.g. the config's `advantage.estimator`)."""

    def decorator(fn: AdvantageEstimator) -> AdvantageEstimator:
        if name in ADVANTAGE_ESTIMATORS and ADVANTAGE_ESTIMATORS[name] is not fn:
            raise ValueError(
                f"advantage estimator {name!r} is already registered "
                f"({ADVANTAGE_ESTIMATORS[name].__name__}); pick another name"
            )
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return decorator


def get_adv_estimator(name: str) -> AdvantageEstimator:
    """Look up a registered estimator; unknown names fail with the list of known ones."""
    try:
        return ADVANTAGE_ESTIMATORS[name]
    except KeyError:
        known = ", ".join(sorted(ADVANTAGE_ESTIMATORS))
        raise ValueError(
            f"unknown advantage estimator {name!r}; known estimators: {known}. "
            f"Fix `advantage.estimator` in the config or register one with @register_adv_est."
        ) from None


def _check_inputs(rewards: torch.Tensor, group_index: torch.Tensor, baseline_mask: torch.Tensor | None) -> torch.Tensor:
    """Validate shapes/dtypes and return a concrete (N,) bool baseline mask."""
    if rewards.dim() != 1 or not rewards.is_floating_point():
        raise ValueError(
            f"rewards must be a 1-D float tensor (N,), got shape {tuple(rewards.shape)} dtype {rewards.dtype}"
        )
    if group_index.shape != rewards.shape or group_index.is_floating_point() or group_index.dtype == torch.bool:
        raise ValueError(
            f"group_index must be an integer tensor with the shape of rewards {tuple(rewards.shape)}, "
            f"got shape {tuple(group_index.shape)} dtype {group_index.dtype}"
        )
    if not torch.isfinite(rewards).all():
        bad = torch.nonzero(~torch.isfinite(rewards)).flatten().tolist()
        raise ValueError(f"rewards must be finite; non-finite at sample indices {bad[:10]}")
    if baseline_mask is None:
        return torch.ones_like(rewards, dtype=torch.bool)
    if baseline_mask.shape != rewards.shape or baseline_mask.dtype != torch.bool:
        raise ValueError(
            f"baseline_mask must be a bool tensor with the shape of rewards {tuple(rewards.shape)}, "
            f"got shape {tuple(baseline_mask.shape)} dtype {baseline_mask.dtype}"
        )
    return baseline_mask


def _groups(group_index: torch.Tensor, baseline_mask: torch.Tensor):
    """Yield (member indices, baseline indices) per group, applying the empty-baseline fallback."""
    for g in torch.unique(group_index):
        members = torch.nonzero(group_index == g).flatten()
        base = members[baseline_mask[members]]
        if base.numel() == 0:  # no baseline samples: judge the group against itself
            base = members
        yield members, base


@register_adv_est("grpo")
def compute_grpo_outcome_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    baseline_mask: torch.Tensor | None = None,
    epsilon: float = 1e-6,
    norm_adv_by_std: bool = True,
) -> torch.Tensor:
    """GRPO: A_i = (r_i - mean_B) / (std_B + epsilon), B = the group's baseline samples.

    std is the unbiased (Bessel) std, as torch.std and verl. When B has no spread (all its
    rewards equal, or a single sample) there is no scale to normalise by and the advantage is
    the centred reward r_i - mean_B, unscaled. With B = the whole group that is exactly 0 for
    every sample (no signal, as in GRPO); with baseline='on_policy' it keeps the signal of a
    seeded sample that beat a uniform on-policy group instead of inflating it by 1/epsilon.

    Args:
        rewards: (N,) float outcome reward per sample.
        group_index: (N,) long, the prompt each sample belongs to.
        baseline_mask: (N,) bool, samples that define the baseline; None = all.
        epsilon: added to std to keep the division stable.
        norm_adv_by_std: False gives Dr. GRPO (see `dr_grpo`).

    Returns:
        (N,) advantages, dtype of rewards.
    """
    baseline_mask = _check_inputs(rewards, group_index, baseline_mask)
    r = rewards.double()  # float64: group stats on float32 rewards drift by ulps
    adv = torch.zeros_like(r)
    for members, base in _groups(group_index, baseline_mask):
        rb = r[base]
        if bool((rb == rb[0]).all()):
            # Exact: the mean of equal values computed by sum/n can be off by an ulp.
            adv[members] = r[members] - rb[0]
            continue
        centred = r[members] - rb.mean()
        adv[members] = centred / (rb.std() + epsilon) if norm_adv_by_std else centred
    return adv.to(rewards.dtype)


@register_adv_est("dr_grpo")
def compute_dr_grpo_outcome_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    baseline_mask: torch.Tensor | None = None,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """Dr. GRPO: A_i = r_i - mean_B, no std division (it biases towards too-easy/too-hard prompts).

    Same shapes and edge cases as `grpo`; `epsilon` is accepted for a uniform signature and unused.
    """
    return compute_grpo_outcome_advantage(rewards, group_index, baseline_mask, epsilon, norm_adv_by_std=False)


@register_adv_est("rloo")
def compute_rloo_outcome_advantage(
    rewards: torch.Tensor,
    group_index: torch.Tensor,
    baseline_mask: torch.Tensor | None = None,
    epsilon: float = 1e-6,
) -> torch.Tensor:
    """RLOO: A_i = r_i - mean of the *other* baseline samples of i's group.

    With B = the whole group of size n this is verl's form r_i * n/(n-1) - mean * n/(n-1).
    A sample outside B has nothing to leave out: its baseline is mean_B. A baseline sample that
    is the only one in B falls back to the mean of the rest of its group (same rule as an empty
    B). A group of size 1 gets 0. `epsilon` is accepted for a uniform signature and unused.

    Args/Returns: as `grpo` — (N,) rewards, (N,) group_index, (N,) baseline_mask -> (N,) advantages.
    """
    baseline_mask = _check_inputs(rewards, group_index, baseline_mask)
    r = rewards.double()
    adv = torch.zeros_like(r)
    for members, base in _groups(group_index, baseline_mask):
        if members.numel() == 1:
            continue  # nothing to compare with
        in_base = torch.isin(members, base)
        if base.numel() == 1:
            # The lone baseline sample would leave nothing: use the rest of the group instead.
            others = members[members != base[0]]
            baseline_of_base = r[others].mean()
        else:
            baseline_of_base = (r[base].sum() - r[members]) / (base.numel() - 1)
        baseline = torch.where(in_base, baseline_of_base, r[base].mean())
        adv[members] = r[members] - baseline
    return adv.to(rewards.dtype)
