"""Token masks and weights: which tokens the loss trains on, and how much each counts.

`TOKEN_WEIGHTS` lists every such switch; each returns a weight that multiplies the per-token loss ([B, T] or
[B, 1]), or None when its setting is off, so the objective applies them all without looking at their names.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from trainer.objective.aggregation import at_or_above
from trainer.objective.clipping import clipped_surrogate
from trainer.objective.ratios import RATIOS
from trainer.objective.registry import ROLLOUT_CORRECTIONS, SURROGATES
from trainer.objective.settings import ObjectiveSettings
from trainer.objective.terms import PolicyTerms


# ---- the rollout correction: π_old / π_rollout ------------------------------------------------------------------
def _log_gap(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(log π_old − log π_rollout) on loss tokens, 0 elsewhere and where the engine gave no log-probability."""
    return torch.nan_to_num((old_logp - rollout_logp) * mask, nan=0.0)


def _truncate(w: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    return w.clamp(min=low, max=high)


def _drop(w: torch.Tensor, low: float | None, high: float) -> torch.Tensor:
    return w.masked_fill((w < (low if low is not None else -math.inf)) | (w > high), 0.0)


@ROLLOUT_CORRECTIONS.register("token_truncate")
def token_truncate(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, low: float | None, high: float
) -> torch.Tensor:
    """w_it = clip(π_old(o_it)/π_rollout(o_it), low, high): truncated importance sampling.

    Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training" (TIS), as TRL's
    `vllm_importance_sampling_mode=token_truncate`: the sampler (e.g. vLLM) and the trainer compute different
    probabilities for the same weights; the weight corrects the gradient for it, truncated to bound its variance.
    """
    return _truncate(torch.exp(_log_gap(old_logp, rollout_logp, mask)), low, high)


@ROLLOUT_CORRECTIONS.register("token_mask")
def token_mask(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, low: float | None, high: float
) -> torch.Tensor:
    """w_it = π_old/π_rollout where it lies in [low, high], else 0 (the token leaves the loss): masked importance
    sampling, the masking variant of Yao et al. 2025's truncation (TRL's token_mask)."""
    return _drop(torch.exp(_log_gap(old_logp, rollout_logp, mask)), low, high)


@ROLLOUT_CORRECTIONS.register("sequence_truncate", per_sequence=True)
def sequence_truncate(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, low: float | None, high: float
) -> torch.Tensor:
    """w_i = clip(Π_t π_old/π_rollout, low, high), one weight per response ([B, 1]): Yao et al. 2025's truncated
    importance sampling on the whole response (TRL's sequence_truncate)."""
    return _truncate(torch.exp(_log_gap(old_logp, rollout_logp, mask).sum(-1, keepdim=True)), low, high)


@ROLLOUT_CORRECTIONS.register("sequence_mask", per_sequence=True)
def sequence_mask(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, low: float | None, high: float
) -> torch.Tensor:
    """w_i = Π_t π_old/π_rollout where it lies in [low, high], else 0 ([B, 1]): the response leaves the loss when its
    weight does (masked importance sampling after Yao et al. 2025; TRL's sequence_mask)."""
    return _drop(torch.exp(_log_gap(old_logp, rollout_logp, mask).sum(-1, keepdim=True)), low, high)


def correction_weight(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor | None, mask: torch.Tensor, s: ObjectiveSettings
) -> torch.Tensor | None:
    """ρ̄ = the configured rollout correction of π_old/π_rollout (objective.rollout_correction: truncated or masked,
    per token or per response; Yao et al. 2025's truncated importance sampling), [B, T] or [B, 1], for π_old's and the
    rollout engine's log-probs ([B, T]); None when it is off; an error when the engine gave no log-probs."""
    if s.rollout_correction is None:
        return None
    if rollout_logp is None:
        raise ValueError("rollout_correction needs the rollout engine's log-probabilities (rollout_logp)")
    assert s.rollout_correction_max is not None
    fn = ROLLOUT_CORRECTIONS[s.rollout_correction]
    return fn(old_logp, rollout_logp.to(old_logp.dtype), mask, s.rollout_correction_min, s.rollout_correction_max)


def rollout_weight(
    t: PolicyTerms, s: ObjectiveSettings, mean: float | None = None, sampled: torch.Tensor | None = None
) -> torch.Tensor | None:
    """The rollout correction's weight, divided by `mean` when given (`rollout_weight_mean`), or None when it is off;
    an error when the engine gave no log-probs. A response-level weight takes its product over `sampled`, the loss
    tokens before the rollout rejection (t.mask when None), as verl computes its weights from the full response mask."""
    w = correction_weight(t.old_logp, t.rollout_logp, t.mask if sampled is None else sampled, s)
    return w if w is None or mean is None else w / mean


def rollout_weight_mean(
    old_logp: torch.Tensor, rollout_logp: torch.Tensor | None, mask: torch.Tensor, s: ObjectiveSettings
) -> float:
    """w̄ = Σ w / N: the mean of the rollout correction's weight (Yao et al. 2025's truncated or masked IS) over a
    batch, what `rollout_correction_batch_normalize` divides every weight by so that they average 1: over the N loss
    tokens `mask` for a token-level weight, over the N responses with a loss token for a response-level one
    (sequence_truncate, sequence_mask), whose weight counts once whatever its length. A mean not above 1e-8 gives 1
    (the weights stay as they are).

    verl 0.9.1's `rollout_is_batch_normalize` (`compute_rollout_correction_weights` in
    verl/trainer/ppo/rollout_corr_helper.py), there over the whole rollout batch before its mini-batches, its
    responses' full masks (before any rejection), in float64 here. verl's `masked_mean` adds 1e-8 to each count (for a
    response-level weight it averages each response's tokens first, w_i·T_i/(T_i + 1e-8)); on its integer masks the
    1e-8 rounds away in float32.
    """
    m = mask.bool()
    raw = correction_weight(old_logp, rollout_logp, mask, s)
    assert raw is not None and s.rollout_correction is not None
    w = raw.double()
    if ROLLOUT_CORRECTIONS.meta(s.rollout_correction).get("per_sequence", False):
        scored = m.any(-1)
        total, count = w[:, 0][scored].sum(), int(scored.sum())
    else:
        total, count = w.expand(m.shape)[m].sum(), int(m.sum())
    mean = float(total) / max(count, 1)
    return mean if mean > 1e-8 else 1.0


# ---- Clip-Cov and KL-Cov: tokens picked by the covariance of log π and A -----------------------------------------
def covariance(logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Cov_it = (A_it − Ā)·(log π_it − l̄), Ā and l̄ the means over the batch's loss tokens (log π detached).

    Cui et al. 2025, The Entropy Mechanism of RL for Reasoning LMs (arXiv 2505.22617), eq. 11: the entropy change
    of a policy-gradient step goes with minus this covariance, so a few tokens of high covariance drive entropy
    collapse.
    """
    m = mask.to(logp.dtype)
    n = m.sum().clamp(min=1)
    adv = (advantages.unsqueeze(-1) if advantages.dim() == 1 else advantages).expand_as(logp).to(logp.dtype)
    lp = logp.detach()
    return (adv - (adv * m).sum() / n) * (lp - (lp * m).sum() / n)


def covariance_selection(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    s: ObjectiveSettings,
    generator: torch.Generator | None = None,
) -> torch.Tensor | None:
    """The tokens Clip-Cov or KL-Cov act on, over the whole optimisation batch ([B, T] bool; None when both are
    off). n = max(⌊ratio·N⌋, 1) of the N loss tokens (arXiv 2505.22617, §4):

    - KL-Cov: the n tokens of highest covariance;
    - Clip-Cov: n tokens drawn uniformly (with `generator`) among those with ω_low < Cov < ω_high that the clip
      did not already clip.
    """
    if not s.needs_batch_covariance:
        return None

    m = mask.bool()
    cov = covariance(logp, advantages, mask)
    ratio = s.kl_cov_ratio if s.kl_cov_ratio is not None else s.clip_cov_ratio
    assert ratio is not None
    n = max(int(ratio * int(m.sum())), 1)
    out = torch.zeros_like(m)
    if s.kl_cov_ratio is not None:
        flat = torch.where(m, cov, torch.full_like(cov, -torch.inf)).flatten()
        top = flat.topk(min(n, int(m.sum()))).indices
        out.view(-1)[top] = True
        return out
    assert s.clip_cov_bounds is not None
    low, high = s.clip_cov_bounds
    clipped = clipped_surrogate(RATIOS[s.ratio](logp, old_logp, mask), advantages, s.clip_low, s.clip_high).clipped
    eligible = ((cov > low) & (cov < high) & m & ~clipped).flatten().nonzero()[:, 0]
    pick = eligible[torch.randperm(len(eligible), generator=generator)[:n]]
    out.view(-1)[pick] = True
    return out


def clip_cov_mask(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor | None:
    """M_it = 0 for Clip-Cov's tokens (their loss, so their gradient, is cut), 1 elsewhere; None when off.

    Clip-Cov: Cui et al. 2025 (arXiv 2505.22617), §4.2: a random few tokens of high covariance lose their gradient.
    """
    if s.clip_cov_ratio is None:
        return None
    assert t.cov_selected is not None
    return (~t.cov_selected).to(t.logp.dtype)


# ---- masks on the policy's own tokens ---------------------------------------------------------------------------
def off_policy_mask(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor | None:
    """M_i = 1[A_i ≥ 0 or (1/T_i) Σ_t (log π_rollout(o_it) − log π_θ(o_it)) ≤ δ], one per response ([B, 1]).

    DeepSeek-V3.2 (arXiv 2512.02556), eq. 9, off-policy sequence masking: a failing response the policy has
    already moved far from (by the mean per-token KL from the sampler) teaches little and destabilises; it leaves
    the loss.
    The sampler's log-probs when the engine gave them, else π_old's.
    """
    if s.off_policy_threshold is None:
        return None
    behaviour = t.rollout_logp if t.rollout_logp is not None else t.old_logp
    m = t.mask.to(t.logp.dtype)
    kl = torch.nan_to_num(behaviour.to(t.logp.dtype) - t.logp.detach(), nan=0.0)
    mean_kl = (kl * m).sum(-1, keepdim=True) / m.sum(-1, keepdim=True).clamp(min=1.0)
    adv = t.adv if t.adv.shape[-1] == 1 else t.adv[..., :1]
    return ((adv >= 0) | (mean_kl <= s.off_policy_threshold)).to(t.logp.dtype)


def trained_tokens(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor:
    """The loss tokens the policy trains on, [B, T] bool: all of them, or with ρ < 1 those whose entropy is at or
    above the batch's 1 − ρ quantile ("Beyond the 80/20 rule", Wang et al. 2025, arXiv 2506.01939: the gradient
    of the ~20% high-entropy "forking" tokens carries the gain)."""
    m = t.mask.bool()
    if not s.needs_batch_entropy:
        return m
    if t.entropy is None:
        raise ValueError("top_entropy_quantile < 1 needs the tokens' entropy")
    if t.entropy_floor is None:
        return torch.zeros_like(m)
    return at_or_above(t.entropy, t.mask, t.entropy_floor)


def top_entropy_mask(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor | None:
    """M_it = 1[H_it ≥ the batch's 1 − ρ entropy quantile] (arXiv 2506.01939; see `trained_tokens`); None when
    ρ = 1."""
    return trained_tokens(t, s).to(t.logp.dtype) if s.needs_batch_entropy else None


def rollout_correction(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor | None:
    """ℓ_it ← w_it·ℓ_it with the rollout correction's weight (Yao et al. 2025), unless the surrogate folds it into its
    own weight (VESPO)."""
    if t.rollout_weight is None or SURROGATES.meta(s.surrogate)["folds_rollout_correction"]:
        return None
    return t.rollout_weight


# ---- negative-sample reinforcement: the weight of each response by its advantage's sign --------------------------
def sign_weight(advantages: torch.Tensor, positive_weight: float) -> torch.Tensor:
    """w_i = λ for A_i > 0, 1 for A_i ≤ 0 (same shape as `advantages`; λ = `positive_weight`).

    Zhu et al. 2025, The Surprising Effectiveness of Negative Reinforcement in LLM Reasoning (arXiv 2506.01347): the
    policy gradient splits into positive and negative sample reinforcement (PSR, NSR); λ = 0 trains on the negative
    samples only (NSR), λ = 0.1 is W-REINFORCE's λ·L_PSR + L_NSR. The paper splits by the reward (±1, no baseline);
    here by the sign of the configured advantage, what makes the loss push a response up or down (the same split for
    binary rewards in a mixed group). With advantage `baseline_free` (±1) and λ = 0.1 it is the paper's W-REINFORCE
    (the `w_reinforce` preset); NSR as the authors train it also drops the correct responses from the batch
    (`drop_correct`, the `nsr` preset), where λ = 0 here only zero-weights them.
    """
    return torch.where(advantages > 0, torch.full_like(advantages, positive_weight), torch.ones_like(advantages))


def positive_sample_weight(t: PolicyTerms, s: ObjectiveSettings) -> torch.Tensor | None:
    """ℓ_it ← w_i·ℓ_it with w_i = λ for A_i > 0, else 1 (NSR / W-REINFORCE, arXiv 2506.01347; see `sign_weight`);
    None when positive_weight is null. The normalisers are unchanged: a zero-weighted response still counts in B and
    in the token counts, as a λ·L_PSR + L_NSR loss averages over every sample."""
    if s.positive_weight is None:
        return None
    return sign_weight(t.adv.to(t.logp.dtype), s.positive_weight)


TOKEN_WEIGHTS: tuple[Callable[[PolicyTerms, ObjectiveSettings], torch.Tensor | None], ...] = (
    clip_cov_mask,
    off_policy_mask,
    top_entropy_mask,
    rollout_correction,
    positive_sample_weight,
)
"""Every weight on the per-token loss, applied in this order (TRL's for the three it has: off-policy, entropy,
rollout)."""
