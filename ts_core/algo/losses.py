"""The Thinking Seeds policy loss (docs/algorithm.md §3), as pure functions over typed tensors.

One response is `prefix + continuation`. The prefix was written by a historical checkpoint h, the
continuation by the rollout policy θ_old. Each token gets the importance ratio against *the policy
that actually wrote it*:

    continuation / on-policy token:  r = π_θ / π_θold,  ψ = min(r·A, clip(r, 1-ε_low, 1+ε_high)·A)
    prefix token, `prefix_loss`:
        clip     r = π_θ / π_h, the same clipped surrogate       (token-level importance ratio)
        shaped   ψ = f(π_θ)·A,  f(p) = p / (p + γ), no clip        (LUFFY policy shaping)
        capped   ψ = min(r, c_max)·A with the weight held fixed    (truncated importance weight)
        context  no gradient: the prefix is only context          (PrefixRL / QuestA)
        position the clip term times w(t) = 1 − t/L for prefix token t = 0..L−1 of a prefix of L
                 tokens (our own definition; `prefix_position_weights`)

The loss is −ψ aggregated with verl's `loss_agg_mode`, plus optional entropy bonus and KL penalty.
The trainer never sees rewards, only `advantages` (prime-rl's split).

Shapes: B sequences, T response positions (right-padded). All per-token tensors are (B, T).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Literal

import torch

from thinking_seeds.algo.populations import population_stats
from thinking_seeds.algo.stats import Stats
from thinking_seeds.plugins import load_function

if TYPE_CHECKING:
    from thinking_seeds.config import RunConfig

LossAggMode = Literal["token-mean", "seq-mean-token-mean", "seq-mean-token-sum-norm"]
# |log r| is clamped here before exp: past it exp overflows fp32 (e^88) long before any loss could use
# the value, and a ratio of e^20 is clipped or capped by every surrogate anyway.
LOG_RATIO_CLAMP = 20.0


def exp_ratio(log_numer: torch.Tensor, log_denom: torch.Tensor) -> torch.Tensor:
    """r = exp(log_numer - log_denom), its log clamped to ±LOG_RATIO_CLAMP (an overflow guard only)."""
    return torch.exp((log_numer - log_denom).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP))


@dataclass
class LossInputs:
    """Everything the loss needs for one (micro-)batch.

    logprobs            (B, T) log π_θ(token) with grad, at the rollout temperature
    old_logprobs        (B, T) log π_θold(token): the rollout policy (meaningful off the prefix)
    behaviour_logprobs  (B, T) log π_h(token): the historical policy (meaningful on the prefix)
    advantages          (B,) or (B, T)
    response_mask       (B, T) bool: generated tokens (prefix and continuation), not padding
    prefix_mask         (B, T) bool: tokens written by a historical checkpoint (⊆ response_mask)
    seeded              (B,) bool: the sample started from someone else's tokens
    entropy             (B, T) token entropy under π_θ (with grad if entropy_coeff > 0), optional
    ref_logprobs        (B, T) log π_ref(token), needed only when kl_coef > 0
    token_weights       (B, T) detached per-token multiplier of the policy-gradient loss, optional (1 when
                        None): the rollout–trainer mismatch correction (algo/rollout_correction.py)
    """

    logprobs: torch.Tensor
    old_logprobs: torch.Tensor
    behaviour_logprobs: torch.Tensor
    advantages: torch.Tensor
    response_mask: torch.Tensor
    prefix_mask: torch.Tensor
    seeded: torch.Tensor
    entropy: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    token_weights: torch.Tensor | None = None


@dataclass(frozen=True)
class LossSettings:
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    clip_ratio_c: float | None = None
    prefix_loss: str = "clip"  # a registered surrogate or package.module:function (get_surrogate)
    shaped_gamma: float = 0.1
    cap: float = 2.0
    loss_agg_mode: LossAggMode = "token-mean"
    entropy_coeff: float = 0.0
    kl_coef: float = 0.0
    kl_type: Literal["k1", "k3"] = "k3"
    # Normalisers for the *global* batch. Micro-batches and processes then each contribute their
    # share of one global mean, so 1 process and N processes give the same gradient.
    #   token-mean: total loss tokens;  seq-mean-*: total sequences;  None: this batch's own count.
    global_tokens: float | None = None
    global_seqs: float | None = None
    # seq-mean-token-sum-norm divides each sequence's sum by this constant (Dr. GRPO: max length).
    seq_norm_len: float | None = None

    @classmethod
    def from_config(cls, cfg: RunConfig, **counts: float) -> LossSettings:
        """The settings as the run config holds them: each field read from `loss.<name>` or
        `prefix.<name>` (`prefix_loss`: prefix.loss), the Dr. GRPO length from rollout.max_new_tokens, and
        the global counts given. Nothing is copied by hand, so a field added to both stays in step."""
        values: dict[str, object] = {"seq_norm_len": float(cfg.rollout.max_new_tokens)}
        for f in fields(cls):
            name = f.name.removeprefix("prefix_")
            for section in (cfg.loss, cfg.prefix):
                if name in type(section).model_fields:
                    values[f.name] = getattr(section, name)
                    break
        return cls(**(values | counts))  # type: ignore[arg-type]


@dataclass
class LossOutput:
    loss: torch.Tensor
    # Sums and counts, not means, so micro-batches and ranks can be reduced exactly: see `Stats`.
    stats: Stats


# ---------------------------------------------------------------------------------------------
# Surrogates: each returns (per-token loss, per-token "gradient lost to clipping" mask); its inputs
# are (logprobs, denom_logprobs, adv, settings, prefix_mask), all (B, T) but the settings.
# ---------------------------------------------------------------------------------------------

Surrogate = Callable[..., tuple[torch.Tensor, torch.Tensor]]


@dataclass(frozen=True)
class PrefixSurrogate:
    """A prefix loss: its function, and whether prefix tokens count in the loss at all (`context`: no)."""

    fn: Surrogate
    in_loss: bool = True


SURROGATES: dict[str, PrefixSurrogate] = {}


def register_surrogate(name: str, in_loss: bool = True):
    def deco(fn):
        SURROGATES[name] = PrefixSurrogate(fn, in_loss)
        return fn

    return deco


def get_surrogate(name: str) -> PrefixSurrogate:
    """The registered surrogate `name`, or a user's `package.module:function` (imported once, then
    registered under its path, as reward.fn is)."""
    if name not in SURROGATES:
        if ":" not in name:
            raise KeyError(f"unknown prefix loss {name!r}; known: {', '.join(sorted(SURROGATES))}")
        SURROGATES[name] = PrefixSurrogate(load_function(name, "prefix.loss"))
    return SURROGATES[name]


@register_surrogate("clip")
def clipped_surrogate(
    logprobs: torch.Tensor,
    denom_logprobs: torch.Tensor,
    adv: torch.Tensor,
    s: LossSettings,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clip (with clip-higher and optional dual clip) on r = exp(logprobs - denom_logprobs).

    Returns the per-token loss −ψ and a bool mask of tokens whose gradient the clip zeroes.
    """
    ratio = exp_ratio(logprobs, denom_logprobs)
    loss1 = -adv * ratio
    loss2 = -adv * ratio.clamp(1.0 - s.clip_ratio_low, 1.0 + s.clip_ratio_high)
    loss = torch.maximum(loss1, loss2)
    # The clipped branch is active (gradient 0) where it is strictly larger.
    clipped = loss2 > loss1
    if s.clip_ratio_c is not None:
        # Dual clip: with A < 0 a huge ratio would give an unbounded loss; cap it at -A·c.
        loss3 = -adv * s.clip_ratio_c
        dual = (adv < 0) & (loss3 < loss)
        loss = torch.where(dual, loss3, loss)
        clipped = clipped | dual
    return loss, clipped


@register_surrogate("shaped")
def shaped_surrogate(
    logprobs: torch.Tensor,
    denom_logprobs: torch.Tensor,
    adv: torch.Tensor,
    s: LossSettings,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """LUFFY policy shaping: ψ = f(π_θ)·A with f(p) = p / (p + γ); no ratio, no clip.

    f'(p) = γ / (p + γ)², so low-probability tokens of the guide get a larger push than under
    log π_θ, which keeps the policy from collapsing onto the guide's likely tokens.
    """
    p = torch.exp(logprobs)
    loss = -adv * p / (p + s.shaped_gamma)
    return loss, torch.zeros_like(loss, dtype=torch.bool)


@register_surrogate("capped")
def capped_surrogate(
    logprobs: torch.Tensor,
    denom_logprobs: torch.Tensor,
    adv: torch.Tensor,
    s: LossSettings,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Truncated importance weight: ψ = min(r, c)·A with the weight treated as a constant.

    The gradient is min(r, c)·A·∇log π_θ: a large ratio is bounded, never zeroed, so no gradient
    is lost to clipping (the value of the loss is min(r, c)·A, as written).
    """
    weight = exp_ratio(logprobs, denom_logprobs).clamp(max=s.cap).detach()
    # exp(lp - sg(lp)) == 1 in value, ∇ = ∇lp: value w·A, gradient w·A·∇log π_θ.
    loss = -adv * weight * torch.exp(logprobs - logprobs.detach())
    return loss, torch.zeros_like(loss, dtype=torch.bool)


@register_surrogate("position")
def position_surrogate(
    logprobs: torch.Tensor,
    denom_logprobs: torch.Tensor,
    adv: torch.Tensor,
    s: LossSettings,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The clip surrogate weighed by prefix_position_weights: trust in a prefix token falls with its depth."""
    loss, clipped = clipped_surrogate(logprobs, denom_logprobs, adv, s)
    if prefix_mask is None:
        raise ValueError("prefix.loss=position needs the prefix mask")
    return loss * prefix_position_weights(prefix_mask).to(loss.dtype), clipped


@register_surrogate("context", in_loss=False)
def context_surrogate(
    logprobs: torch.Tensor,
    denom_logprobs: torch.Tensor,
    adv: torch.Tensor,
    s: LossSettings,
    prefix_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """No gradient: the prefix is only context (PrefixRL / QuestA); it leaves the loss's mean too (in_loss)."""
    return torch.zeros_like(logprobs), torch.zeros_like(logprobs, dtype=torch.bool)


def prefix_position_weights(prefix_mask: torch.Tensor) -> torch.Tensor:
    """`prefix.loss=position`: w(t) = 1 − t/L on prefix token t (0-based) of a row whose prefix has L tokens,
    1 off the prefix. Detached constants: w = 1, 1 − 1/L, …, 1/L from the first prefix token to the last.

    Our own definition (not a published form): a prefix token at depth t is conditioned on t off-policy
    tokens before it, so its ratio π_θ/π_h measures the policy on a context it did not choose; the
    weight trusts the shallow tokens fully and the deepest, next to the cut, least (never 0, so
    every prefix token keeps some gradient). Positions are counted along the mask, so the prefix
    need not start at column 0.
    """
    m = prefix_mask.to(torch.float32)
    t = m.cumsum(-1) - 1.0  # 0 at the first prefix token of each row
    L = m.sum(-1, keepdim=True).clamp(min=1.0)
    return torch.where(prefix_mask.bool(), 1.0 - t / L, torch.ones_like(m))


# ---------------------------------------------------------------------------------------------
# Aggregation (verl's names)
# ---------------------------------------------------------------------------------------------


def aggregate(loss_mat: torch.Tensor, mask: torch.Tensor, s: LossSettings) -> torch.Tensor:
    """Reduce a (B, T) token loss over `mask` to a scalar.

    token-mean               Σ_bt l·m / Σ_bt m                  (every token weighs the same)
    seq-mean-token-mean      mean_b (Σ_t l·m / Σ_t m)            (every sequence weighs the same)
    seq-mean-token-sum-norm  mean_b (Σ_t l·m / L)                (Dr. GRPO: L a constant, no length bias)
    The denominators use the global batch counts of `s` when given.
    """
    m = mask.to(loss_mat.dtype)
    mode = s.loss_agg_mode
    if mode == "token-mean":
        denom = s.global_tokens if s.global_tokens is not None else m.sum().clamp(min=1.0)
        return (loss_mat * m).sum() / denom
    seq_tokens = m.sum(-1)
    has_tokens = (seq_tokens > 0).to(loss_mat.dtype)
    if mode == "seq-mean-token-mean":
        seq_loss = (loss_mat * m).sum(-1) / seq_tokens.clamp(min=1.0)
    elif mode == "seq-mean-token-sum-norm":
        norm = s.seq_norm_len if s.seq_norm_len is not None else float(loss_mat.shape[-1])
        seq_loss = (loss_mat * m).sum(-1) / norm
    else:
        raise KeyError(
            f"unknown loss_agg_mode {mode!r}; known: token-mean, seq-mean-token-mean, seq-mean-token-sum-norm"
        )
    denom = s.global_seqs if s.global_seqs is not None else has_tokens.sum().clamp(min=1.0)
    return (seq_loss * has_tokens).sum() / denom


def kl_penalty(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, kind: str) -> torch.Tensor:
    """Per-token KL(π_θ || π_ref) estimate: k1 = log r, k3 = r⁻¹ − 1 + log r with r = π_θ/π_ref."""
    log_ratio = logprobs - ref_logprobs
    if kind == "k1":
        return log_ratio
    if kind == "k3":
        neg = (-log_ratio).clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
        return torch.exp(neg) - 1.0 - neg
    raise KeyError(f"unknown kl_type {kind!r}; known: k1, k3")


# ---------------------------------------------------------------------------------------------
# The loss
# ---------------------------------------------------------------------------------------------


def compute_policy_loss(inp: LossInputs, s: LossSettings) -> LossOutput:
    """Token-level mix-policy loss.

    Returns the scalar loss to minimise and additive statistics (docs/algorithm.md §5 names, verl style):
    actor/pg_loss, actor/pg_clipfrac/<pop>, actor/pg_clipfrac_adv/<pop>, actor/ratio_mean/<pop>,
    actor/ratio_max/<pop>, actor/ratio_above_frac/<pop>, actor/entropy/<pop>,
    actor/effective_entropy/<pop>, actor/kl (when kl_coef > 0), with <pop> in
    on_policy | continuation | prefix | all.
    """
    resp = inp.response_mask.bool()
    prefix = inp.prefix_mask.bool() & resp
    adv = inp.advantages if inp.advantages.dim() == 2 else inp.advantages[:, None].expand_as(inp.logprobs)
    adv = adv.to(inp.logprobs.dtype)

    # Continuation and on-policy tokens: the rollout policy wrote them.
    own_loss, own_clipped = clipped_surrogate(inp.logprobs, inp.old_logprobs, adv, s)
    own_ratio = exp_ratio(inp.logprobs.detach(), inp.old_logprobs)

    surrogate = get_surrogate(s.prefix_loss)
    pre_loss, pre_clipped = surrogate.fn(inp.logprobs, inp.behaviour_logprobs, adv, s, prefix)
    # `context` (in_loss False): the prefix leaves the loss altogether (no gradient, not in the mean).
    loss_mask = resp if surrogate.in_loss else resp & ~prefix
    pre_ratio = exp_ratio(inp.logprobs.detach(), inp.behaviour_logprobs)

    token_loss = torch.where(prefix, pre_loss, own_loss)
    if inp.token_weights is not None:  # verl's decoupled form: a constant factor on each token's surrogate
        token_loss = token_loss * inp.token_weights.detach().to(token_loss.dtype)
    clipped = torch.where(prefix, pre_clipped, own_clipped) & loss_mask
    ratio = torch.where(prefix, pre_ratio, own_ratio)

    pg_loss = aggregate(token_loss, loss_mask, s)
    loss = pg_loss

    stats = Stats()
    n_tok = loss_mask.sum()
    # Token mean of −ψ whatever the aggregation: additive across micro-batches and ranks.
    stats.add("actor/pg_loss", (token_loss.detach() * loss_mask).sum(), n_tok)
    stats.add("actor/zero_adv_frac", ((adv == 0) & loss_mask).sum(), n_tok)
    if s.entropy_coeff > 0:
        if inp.entropy is None:
            raise ValueError("entropy_coeff > 0 needs LossInputs.entropy (computed with grad)")
        loss = loss - s.entropy_coeff * aggregate(inp.entropy, loss_mask, s)
    if s.kl_coef > 0:
        if inp.ref_logprobs is None:
            raise ValueError("kl_coef > 0 needs LossInputs.ref_logprobs (log-probs under the reference model)")
        kl = kl_penalty(inp.logprobs, inp.ref_logprobs, s.kl_type)
        loss = loss + s.kl_coef * aggregate(kl, loss_mask, s)
        stats.add("actor/kl", (kl.detach() * loss_mask).sum(), n_tok)

    # docs/algorithm.md §5: tokens that carry gradient = in the loss, advantage ≠ 0 (a group whose rewards are
    # all equal carries none) and not clipped.
    grad_mask = loss_mask & ~clipped & (adv != 0)
    population_stats(stats, inp, s.clip_ratio_high, adv.detach(), ratio, clipped, grad_mask)
    return LossOutput(loss=loss, stats=stats)
