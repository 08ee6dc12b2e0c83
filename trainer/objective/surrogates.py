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


ROLLOUT_WEIGHT_FLOOR = 1e-10
"""Added to the rollout correction's weight before GMPO takes its log (verl's `compute_policy_loss_geo_mean`)."""


@SURROGATES.register("gmpo", folds_rollout_correction=True)
def gmpo(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_i = −A_i·exp((1/T_i) Σ_t m_it c_it) on each loss token of response i, c_it = min(log r_it, ε_high) for
    A_i > 0 and max(log r_it, −ε_low) for A_i < 0: the geometric mean of the token ratios, each clipped in log space
    on the side PPO's clip binds; the aggregation (seq_mean_token_mean) averages ℓ_i over responses.

    GMPO: Zhao et al. 2025, Geometric-Mean Policy Optimization (arXiv 2507.20673), as verl 0.9.1's
    `loss_mode=geo_mean` (`verl/trainer/ppo/core_algos.py`, `compute_policy_loss_geo_mean`, which credits the
    authors' `callsys/GMPO` `train_zero_math_gmpo.py`) and TRL 1.16's `trl/experimental/gmpo/gmpo_trainer.py`
    compute it. A token's gradient is −A_i·ρ_i/T_i where it is not clipped, 0 where it is, so one outlier ratio
    moves ρ_i by at most its 1/T_i share. A rollout correction's weight enters as the geometric mean of
    w_it + 1e-10 over the response (verl's). Departs from verl's release: T_i, not T_i + 1e-8 (TRL's), and the
    log-ratio bounded at ±20 as every surrogate here.
    """
    m = t.mask.to(t.logp.dtype)
    n = m.sum(-1, keepdim=True).clamp(min=1)
    adv = t.adv if t.adv.shape[-1] == 1 else (t.adv * m).sum(-1, keepdim=True) / n
    log_r = t.log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    high, low = (log_r > s.clip_high) & (adv > 0), (log_r < -s.clip_low) & (adv < 0)
    clipped = torch.where(adv > 0, log_r.clamp(max=s.clip_high), log_r.clamp(min=-s.clip_low))
    log_rho = (clipped * m).sum(-1, keepdim=True) / n
    if t.rollout_weight is not None:
        log_w = torch.log(t.rollout_weight.expand_as(t.logp) + ROLLOUT_WEIGHT_FLOOR)
        log_rho = log_rho + (log_w * m).sum(-1, keepdim=True).detach() / n
    loss = (-adv * torch.exp(log_rho)).expand_as(t.logp)
    out = _unclipped(loss, _ratio(t))
    return Surrogate(loss, out.ratio, low, high, out.dual_clipped)


def _dppo(t: PolicyTerms, s: ObjectiveSettings, pos_out: torch.Tensor, neg_out: torch.Tensor) -> Surrogate:
    """ℓ_it = −A_i·sg(min(r_it, c))·log π_θ(o_it)·1[the token is inside the trust region for A_i's sign]."""
    assert s.dppo_ratio_cap is not None
    ratio = _ratio(t)
    outside = torch.where(t.adv > 0, pos_out, neg_out)
    loss = -t.adv * ratio.clamp(max=s.dppo_ratio_cap).detach() * t.logp * (~outside).to(t.logp.dtype)
    out = _unclipped(loss, ratio)
    return Surrogate(loss, ratio, outside & (t.adv < 0), outside & (t.adv > 0), out.dual_clipped)


@SURROGATES.register("dppo_tv", folds_rollout_correction=False)
def dppo_tv(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """DPPO-Binary-TV: ℓ_it = −A_i·sg(min(r_it, c))·log π_θ(o_it)·M_it, M_it = 0 where A_i > 0 and
    π_θ − π_old > δ_high, or A_i ≤ 0 and π_θ − π_old < −δ_low (π of the sampled token), else 1.

    Qi et al. 2026, Rethinking the Trust Region in LLM Reinforcement Learning (arXiv 2602.04879): the trust region
    is the total variation of the token's binary distribution (sampled or not), |π_θ − π_old|, not the ratio, which
    over-constrains rare tokens and under-constrains likely ones. As verl 0.9.1's `loss_mode=dppo_tv`
    (`compute_policy_loss_dppo_tv`; c is its `clip_ratio_c`). The authors' `sail-sg/Stable-RL` measures from the
    rollout engine's π; with π_old, as here and in verl, it is their `dppo_binary_tv_recompute`.
    """
    assert s.dppo_bounds is not None
    diff = torch.exp(t.logp.detach()) - torch.exp(t.old_logp)
    return _dppo(t, s, diff > s.dppo_bounds[1], diff < -s.dppo_bounds[0])


BINARY_KL_EPS = 1e-8
"""Added to 1 − π inside DPPO's binary KL (the authors' and verl's), so a token at π = 1 stays finite."""


@SURROGATES.register("dppo_kl", folds_rollout_correction=False)
def dppo_kl(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """DPPO-Binary-KL: as dppo_tv with the binary KL D = p·log(p/π) + (1 − p)·log((1 − p + ε)/(1 − π + ε)),
    p = π_old and π = π_θ of the sampled token (ε = 1e-8): M_it = 0 where A_i > 0, π > p and D > δ_high, or A_i ≤ 0,
    π < p and D > δ_low.

    Qi et al. 2026 (arXiv 2602.04879), as verl 0.9.1's `loss_mode=dppo_kl` (`compute_policy_loss_dppo_kl`); the
    authors' `dppo_binary_kl_recompute` (`sail-sg/Stable-RL`, `verl/trainer/ppo/core_algos.py`).
    """
    assert s.dppo_bounds is not None
    lp, old = t.logp.detach(), t.old_logp
    p, q = torch.exp(old), torch.exp(lp)
    kl = p * (old - lp) + (1 - p) * torch.log((1 - p + BINARY_KL_EPS) / (1 - q + BINARY_KL_EPS))
    return _dppo(t, s, (kl > s.dppo_bounds[1]) & (q > p), (kl > s.dppo_bounds[0]) & (q < p))


@SURROGATES.register("dro", folds_rollout_correction=False)
def dro(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −(A_i·log π_θ(o_it) − ½β·(log r_it)²): the policy gradient with a quadratic pull back to π_old in
    place of a clip; its gradient is (−A_i + β·log r_it)·∇log π, on every loss token whatever its A.

    DRO, Direct Reward Optimization, as verl 0.9.1 computes it (`loss_mode=dro`, `compute_policy_loss_dro`; its
    `docs/algo/dro.md`) and Tinker's `dro` loss, which cite Richemond et al. 2024 (arXiv 2405.19107) and Kimi k1.5
    (arXiv 2501.12599, §2.3.2, whose gradient has this form per response). Those papers were not read here: this is
    verl's per-token equation, with verl's advice that the advantage suit DRO's soft formulation left to the user.
    """
    assert s.dro_beta is not None
    loss = -(t.adv * t.logp - 0.5 * s.dro_beta * t.log_ratio.square())
    return _unclipped(loss, _ratio(t))


@SURROGATES.register("gpg", folds_rollout_correction=False)
def gpg(t: PolicyTerms, s: ObjectiveSettings) -> Surrogate:
    """ℓ_it = −A_i·log π_θ(o_it): the plain policy gradient, no ratio and no clip.

    GPG: Chu et al. 2025 (arXiv 2504.02546), as the authors' `AMAP-ML/GPG`
    `open-r1/src/open_r1/gpg_trainer.py` (`compute_loss`: `-per_token_logps * advantages`, a token mean) and verl
    0.9.1's `loss_mode=gpg` (`compute_policy_loss_gpg`). With one optimiser step per rollout batch it is the clip
    surrogate's gradient; it differs once π_θ leaves π_old (no trust region at all).
    """
    return _unclipped(-t.adv * t.logp, _ratio(t))
