"""KL to a reference policy (k1/k2/k3 estimators) and per-token log-probs and entropy."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainer.objective.registry import KL_ESTIMATORS

if TYPE_CHECKING:
    from trainer.objective.settings import ObjectiveSettings

# Bounds log(π_θ/π_ref) so that k3's exp stays finite for tokens the reference finds absurd.
MAX_LOG_RATIO = 20.0


def _log_r(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    return (logp - ref_logp).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


@KL_ESTIMATORS.register("k1")
def k1(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k1 = log r, r = π_θ/π_ref: unbiased for KL(π_θ‖π_ref) on samples of π_θ, high variance.

    Schulman 2020, Approximating KL Divergence (joschu.net/blog/kl-approx.html).
    """
    return _log_r(logp, ref_logp)


@KL_ESTIMATORS.register("k2")
def k2(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k2 = ½ (log r)²: biased, low variance, always ≥ 0. Schulman 2020 (as k1)."""
    return 0.5 * _log_r(logp, ref_logp) ** 2


@KL_ESTIMATORS.register("k3")
def k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """k3 = r⁻¹ − 1 + log r: unbiased and ≥ 0. Schulman 2020; GRPO's KL term (arXiv 2402.03300, eq. 4)."""
    log_r = _log_r(logp, ref_logp)
    return torch.exp(-log_r) - 1.0 + log_r


def kl_reward_penalty(
    old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, s: ObjectiveSettings
) -> torch.Tensor:
    """[N] P_i = β Σ_t m_it kl(log π_old(o_it) − log π_ref(o_it)), β = `kl_reward_coef`, kl = `kl_reward_estimator`;
    the reward the advantage sees is R_i − P_i. `old_logp`, `ref_logp`, `mask`: [N, T] (mask 1 on response tokens).
    Computed without gradient: it is part of the reward.

    The KL penalty in the reward of RLHF's PPO (Ziegler et al. 2019, arXiv 1909.08593; Ouyang et al. 2022, arXiv
    2203.02155) as verl 0.9.1 applies it to GRPO-family runs (`algorithm.use_kl_in_reward`: `apply_kl_penalty` in
    `verl/trainer/ppo/ray_trainer.py`, `kl_penalty` in `verl/trainer/ppo/core_algos.py`): the per-token score minus
    β·kl_t with kl_t of the old policy's log-probs (recomputed by the trainer before the update) against the
    reference's; an outcome estimator sums the token rewards, so the group statistics see R_i − P_i. TRL 1.16's
    RLOOTrainer does the same with k1 summed per response (`beta`). "A Comedy of Estimators" (arXiv 2512.21852) and
    arXiv 2506.09477 argue that k1 in the reward gives the KL-regularised objective's gradient where k3 in the loss
    (GRPO's `kl_coef`) does not.
    Departs from verl: a fixed β (verl's adaptive controller, `kl_ctrl.type: adaptive`, is not here); harness's
    estimators clamp log r to ±20 for k1 and k2 too (verl's only for k3) and do not cap k3 at 10 (verl clamps it to
    [−10, 10]); an estimator with a per-token advantage (verl's REINFORCE++ returns-to-go) would see Σ_{t'≥t}, harness's
    per-response estimators see the whole sum at every token. OpenRLHF 0.11.2 (`compute_approx_kl` and
    `compute_reward` in `openrlhf/models/utils.py`) differs more: it adds −β·kl_t per token after the group
    normalisation (the baseline never sees the KL), clamps every estimator to [−10, 10], and takes either the loss
    or the reward, never both.
    """
    with torch.no_grad():
        kl = KL_ESTIMATORS[s.kl_reward_estimator](old_logp, ref_logp)
        return s.kl_reward_coef * (kl * mask).sum(-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log π(o_t) = z[o_t] − logsumexp(z), for logits [B, T, V] and tokens [B, T]."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v π_v log π_v = logsumexp(z) − Σ_v softmax(z)_v z_v, per token ([B, T, V] → [B, T])."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)
