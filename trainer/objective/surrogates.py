"""Clipping forms: how the importance ratio enters the per-token loss (the `surrogate` switch).

Each returns a `Surrogate` from the micro-batch's `PolicyTerms`; the aggregation then normalises it.
"""

from __future__ import annotations

import math

import torch

from trainer.objective.clipping import MAX_LOG_RATIO, Surrogate, clipped_surrogate
from trainer.objective.registry import SURROGATES
from trainer.objective.settings import ObjectiveSettings
from trainer.objective.terms import PolicyTerms

VESPO_MIN_LOG_WEIGHT = math.log(1e-8)
"""VESPO's sequence log-weight floor (its reference implementation's, and TRL's)."""


def _ratio(t: PolicyTerms) -> torch.Tensor:
    return torch.exp(t.log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))


def _unclipped(loss: torch.Tensor, ratio: torch.Tensor) -> Surrogate:
    none = torch.zeros_like(loss, dtype=torch.bool)
    return Surrogate(loss=loss, ratio=ratio, clipped_low=none, clipped_high=none, dual_clipped=none)


@SURROGATES.register("clip", folds_rollout_correction=False)
def clip(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −min(r_it·A_i, clip(r_it, 1 − ε_low, 1 + ε_high)·A_i), optionally dual-clipped.

    PPO (arXiv 1707.06347) as GRPO, DAPO (clip-higher, arXiv 2503.14476) and GSPO (arXiv 2507.18071) use it.
    """
    return clipped_surrogate(t.log_ratio, t.advantages, s.clip_low, s.clip_high, s.dual_clip)


@SURROGATES.register("cispo", folds_rollout_correction=False)
def cispo(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −sg(min(r_it, 1 + ε_high))·A_i·log π_θ(o_it): the weight is capped, never the gradient.

    CISPO: MiniMax-M1 (arXiv 2506.13585), eq. 4-5, with no lower bound on the weight as the paper trained it.
    Every token keeps its gradient, A·∇log π scaled by the capped weight. `clipped_high` marks the tokens whose
    gradient the cap changed: over the cap with A ≠ 0, whatever A's sign (with A = 0 the cap changes nothing).
    """
    ratio = _ratio(t)
    cap = 1.0 + s.clip_high
    loss = -ratio.clamp(max=cap).detach() * t.adv * t.logp
    out = _unclipped(loss, ratio)
    return Surrogate(loss, ratio, out.clipped_low, (ratio > cap) & (t.adv != 0), out.dual_clipped)


@SURROGATES.register("sapo", folds_rollout_correction=False)
def sapo(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −(4/τ)·σ(τ·(r_it − 1))·A_i, τ = τ_pos for A_i > 0 and τ_neg otherwise.

    SAPO (arXiv 2511.20347): a smooth gate in place of the hard clip; its gradient is 4σ(1 − σ) ≤ 1 times
    r·A·∇log π, 1 at r = 1 and fading as r leaves it, so no token's gradient is cut off at a bound.
    """
    assert s.sapo_temperature is not None  # the settings require it for this surrogate
    ratio = _ratio(t)
    pos, neg = s.sapo_temperature
    tau = torch.where(t.adv > 0, torch.full_like(t.adv, pos), torch.full_like(t.adv, neg))
    return _unclipped(-torch.sigmoid(tau * (ratio - 1.0)) * 4.0 / tau * t.adv, ratio)


@SURROGATES.register("kl_cov", folds_rollout_correction=False)
def kl_cov(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −r_it·A_i + β·1[it ∈ K]·|log r_it|, K the batch's tokens of highest covariance of log π and A.

    KL-Cov: Cui et al. 2025 (arXiv 2505.22617), §4.2, eq. 13: no clip; a KL-like penalty holds back only the few
    tokens whose updates drive entropy down. K is picked over the whole optimisation batch (`PolicyTerms.cov_selected`).
    """
    assert s.kl_cov_coef is not None and t.cov_selected is not None
    ratio = _ratio(t)
    penalty = s.kl_cov_coef * t.cov_selected.to(ratio.dtype) * t.log_ratio.abs()
    return _unclipped(-ratio * t.adv + penalty, ratio)


@SURROGATES.register("vespo", folds_rollout_correction=True)
def vespo(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −sg(φ(w_i))·A_i·log π_θ(o_it), φ(w) = e^λ·w^k·e^(−λw) (φ(1) = 1), w_i = Π_t r_it.

    VESPO (arXiv 2602.10693): a Gamma-shaped weight of the response's whole importance ratio, (k, λ) one pair for
    A ≥ 0 and one for A < 0; log w is floored at log 1e-8 and capped at 20. A rollout correction's weight enters
    w_i (its log summed in) instead of multiplying the loss.
    """
    assert s.vespo_k is not None and s.vespo_lambda is not None
    m = t.mask.to(t.logp.dtype)
    with torch.no_grad():
        log_w = (t.log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO) * m).sum(-1, keepdim=True)
        if t.rollout_weight is not None:
            log_w = log_w + torch.log(t.rollout_weight).clamp(VESPO_MIN_LOG_WEIGHT, MAX_LOG_RATIO).sum(-1, keepdim=True)
        log_w = log_w.clamp(VESPO_MIN_LOG_WEIGHT, MAX_LOG_RATIO)
        nonneg = t.adv >= 0
        k = torch.where(nonneg, torch.full_like(t.adv, s.vespo_k[0]), torch.full_like(t.adv, s.vespo_k[1]))
        lam = torch.where(nonneg, torch.full_like(t.adv, s.vespo_lambda[0]), torch.full_like(t.adv, s.vespo_lambda[1]))
        phi = torch.exp(lam + k * log_w - lam * torch.exp(log_w)).nan_to_num(nan=0.0, posinf=0.0, neginf=0.0)
    return _unclipped(-phi * t.adv * t.logp, _ratio(t))
