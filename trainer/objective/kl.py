"""KL to a reference policy (k1/k2/k3/abs estimators, the forms of the KL term's gradient) and per-token log-probs,
entropy and Σ_v π²."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from trainer.objective.registry import KL_ESTIMATORS, KL_GRADIENTS

if TYPE_CHECKING:
    from trainer.objective.settings import ObjectiveSettings
    from trainer.objective.terms import PolicyTerms

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


@KL_ESTIMATORS.register("abs")
def abs_log_ratio(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """|log r|: ≥ 0 but not an unbiased estimate of the KL (E|log r| ≥ E log r = KL(π_θ‖π_ref)); gradient
    sign(log r)·∇log π_θ. verl 0.9.1's `kl_penalty` `abs` (`kl_penalty_forward` in verl/trainer/ppo/core_algos.py),
    the penalty KL-Cov puts on its tokens (arXiv 2505.22617)."""
    return _log_r(logp, ref_logp).abs()


# OpenRLHF 0.11.2's cap on the importance weight of its unbiased KL gradient (`KL_IS_WEIGHT_CLIP`).
OPENRLHF_WEIGHT_CAP = 10.0


def _straight_through(value: torch.Tensor, surrogate: torch.Tensor) -> torch.Tensor:
    """The value of `value` with the gradient of `surrogate`."""
    return value.detach() + surrogate - surrogate.detach()


@KL_GRADIENTS.register("estimator")
def estimator_gradient(kl: torch.Tensor, ref_logp: torch.Tensor, terms: PolicyTerms) -> torch.Tensor:
    """The KL term is the estimator k_t itself, with its own gradient ∇k_t (GRPO's k3, arXiv 2402.03300, eq. 4;
    verl's `kl_loss_type` without "+", OpenRLHF's default, TRL's `use_bias_correction_kl=False`)."""
    return kl


@KL_GRADIENTS.register("k2_straight_through")
def k2_straight_through(kl: torch.Tensor, ref_logp: torch.Tensor, terms: PolicyTerms) -> torch.Tensor:
    """Value k_t, gradient that of k2: ∇½(log r_t)² = log r_t·∇log π_θ(o_t), r = π_θ/π_ref, whose expectation on
    samples of π_θ is ∇KL(π_θ‖π_ref) (the score has mean 0) where k1's and k3's are not (Schulman 2020,
    joschu.net/blog/kl-approx.html). verl 0.9.1's "+" estimators (`k1+`, `k3+`, `abs+`: `kl_penalty` in
    verl/trainer/ppo/core_algos.py)."""
    return _straight_through(kl, k2(terms.logp, ref_logp))


@KL_GRADIENTS.register("trl_bias_correction")
def trl_bias_correction(kl: torch.Tensor, ref_logp: torch.Tensor, terms: PolicyTerms) -> torch.Tensor:
    """ρ_t·k3_t with ρ = π_θ/π_old at the configured ratio level, differentiable: by the product rule its gradient is
    ρ_t·log r_t·∇log π_θ(o_t) at the token level, the importance-weighted (unbiased off-policy) reverse-KL gradient,
    even where ρ = 1. DeepSeek-V3.2 (arXiv 2512.02556, §3.1, eq. 7); TRL 1.16's `use_bias_correction_kl`
    (`_compute_loss` in trl/trainer/grpo_trainer.py: `per_token_kl * coef_1`). Under a sequence ratio ρ is the
    response's s_i, broadcast to its tokens, as TRL's."""
    return torch.exp(terms.log_ratio) * kl


@KL_GRADIENTS.register("openrlhf_unbiased_gradient")
def openrlhf_unbiased_gradient(kl: torch.Tensor, ref_logp: torch.Tensor, terms: PolicyTerms) -> torch.Tensor:
    """Value k_t, gradient w_t·log r_t·∇log π_θ(o_t), w_t = sg(min(π_θ(o_t)/π_old(o_t), 10)) per token: the gradient of
    w_t·k2_t with the weight detached and capped. DeepSeek-V3.2's importance-weighted KL gradient (arXiv 2512.02556,
    eq. 7), TRL's at the token level wherever ρ ≤ 10, with the estimator's value instead of ρ·k3. OpenRLHF 0.11.2's
    `algo.kl.unbiased_gradient` (`compute_approx_kl` in openrlhf/models/utils.py)."""
    token_log_ratio = torch.where(terms.mask.bool(), terms.logp - terms.old_logp, torch.zeros_like(terms.logp))
    w = torch.exp(token_log_ratio.detach()).clamp(max=OPENRLHF_WEIGHT_CAP)
    return _straight_through(kl, w * k2(terms.logp, ref_logp))


def kl_reward_penalty(
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor,
    mask: torch.Tensor,
    s: ObjectiveSettings,
    coef: float | None = None,
) -> torch.Tensor:
    """[N] P_i = β Σ_t m_it kl(log π_old(o_it) − log π_ref(o_it)), β = `coef` (the adaptive controller's value this
    step: trainer.objective.kl_control) or else `kl_reward_coef`, kl = `kl_reward_estimator`;
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
    Departs from verl: harness's estimators clamp log r to ±20 for k1 and k2 too (verl's only for k3) and do not cap
    k3 at 10 (verl clamps it to [−10, 10]); an estimator with a per-token advantage (verl's REINFORCE++
    returns-to-go) would see Σ_{t'≥t}, harness's per-response estimators see the whole sum at every token.
    OpenRLHF 0.11.2 (`compute_approx_kl` and `compute_reward` in `openrlhf/models/utils.py`) differs more: it adds
    −β·kl_t per token after the group normalisation (the baseline never sees the KL), clamps every estimator to
    [−10, 10], and takes either the loss or the reward, never both.
    """
    with torch.no_grad():
        kl = KL_ESTIMATORS[s.kl_reward_estimator](old_logp, ref_logp)
        return (s.kl_reward_coef if coef is None else coef) * (kl * mask).sum(-1)


def kl_reward_mean(old_logp: torch.Tensor, ref_logp: torch.Tensor, mask: torch.Tensor, s: ObjectiveSettings) -> float:
    """KL̄ = (1/N) Σ_i (Σ_t m_it kl_it)/(Σ_t m_it), kl the `kl_reward_estimator` of log π_old − log π_ref: the mean
    over responses of each one's token-mean KL, what the adaptive controller of the reward's β tracks (Ziegler et al.
    2019, arXiv 1909.08593; verl 0.9.1's `current_kl` in `apply_kl_penalty`, verl/trainer/ppo/ray_trainer.py;
    OpenRLHF's `info["kl"]`)."""
    with torch.no_grad():
        kl = KL_ESTIMATORS[s.kl_reward_estimator](old_logp, ref_logp) * mask
        return (kl.sum(-1) / mask.sum(-1).clamp(min=1)).double().mean().item()


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log π(o_t) = z[o_t] − logsumexp(z), for logits [B, T, V] and tokens [B, T]."""
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """H_t = −Σ_v π_v log π_v = logsumexp(z) − Σ_v softmax(z)_v z_v, per token ([B, T, V] → [B, T])."""
    return torch.logsumexp(logits, dim=-1) - (torch.softmax(logits, dim=-1) * logits).sum(-1)


def token_sum_pi_squared(logits: torch.Tensor) -> torch.Tensor:
    """Σ_v π_v² = exp(logsumexp(2z) − 2·logsumexp(z)), the collision probability of each position's distribution
    ([B, T, V] → [B, T]): what the optimal token baseline's energy w = 1 − 2π(o) + Σ_v π_v² reads (arXiv 2602.07078;
    verl's `calculate_sum_pi_squared_from_logits`, `verl/utils/torch_functional.py`, the same expression)."""
    return torch.exp(torch.logsumexp(2 * logits, dim=-1) - 2 * torch.logsumexp(logits, dim=-1))
