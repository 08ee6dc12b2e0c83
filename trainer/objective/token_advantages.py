"""Advantages with one value per response token: the optimal token baseline (OTB) and what it reads.

Registered in `ADVANTAGES` like every estimator (`advantages.py` imports this module). An estimator named in
`registry.TOKEN_ADVANTAGES` returns [groups, G, L], L the longest response's tokens, 0 after each response's end;
the policy loss takes such an advantage per token ([B, T]), and `response_advantages` reduces it to one value per
response for the `adv/*` metrics, the sign flips and the rollout table.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainer.objective.registry import ADVANTAGES


@dataclass(frozen=True)
class TokenProbabilities:
    """What a per-token estimator reads of each response token under the policy that sampled the step, before its
    update and at the sampling temperature (the loop's one no-grad forward: `Trainer._token_probabilities`); each
    [groups, G, L], 0 after a response's end."""

    logp: torch.Tensor
    """log π(o_t): the sampled token's log-probability."""
    sum_pi_squared: torch.Tensor
    """Σ_v π(v)² over the vocabulary at the token's position (`token_sum_pi_squared` of the logits)."""
    rollout_weight: torch.Tensor | None = None
    """ρ̄, the weight of the configured rollout correction (objective.rollout_correction: π_old/π_rollout truncated, or
    0 where a mask mode drops it), [groups, G, L] or [groups, G, 1]; None when the correction is off."""


def response_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """m_it = 1[t < T_i], [..., width] bool, from each response's token count T_i ([...])."""
    return torch.arange(width, device=lengths.device) < lengths[..., None]


@ADVANTAGES.register("optimal_token_baseline", zeroes_flat_groups=False, needs_lengths=True, needs_token_probs=True)
def optimal_token_baseline(
    rewards: torch.Tensor, eps: float, lengths: torch.Tensor, token_probs: TokenProbabilities
) -> torch.Tensor:
    """A_it = (R_i − B_t)·m_it with one baseline per token position t of each group,

        B_t = Σ_j R_j W_jt m_jt / (Σ_j W_jt m_jt + ε),  W_jt = Σ_{s ≤ t} ρ̄²_js w_js m_js,  w_js = 1 − 2π_js + Σ_v π_js²,

    π_js the probability of response j's token s and Σ_v π² its position's collision probability, both under the
    policy before the update (`token_probs`), m the response mask (`lengths`), ρ̄ the rollout correction's weight
    (1 when off). w_js = ‖e_o − π‖² is the squared norm of log π(o_s)'s gradient with respect to the logits (the
    Logit-Gradient Proxy), so W_jt is the "realized energy" of response j's path up to t, and B_t the rewards
    averaged over the responses still running at t, each weighted by its energy. Zero tail: where a group's longest
    response is longer than every other, its baseline is 0 from the second-longest response's length on (there it
    is alone, and its own energy-weighted reward would cancel its advantage). Returns [groups, G, L], L =
    token_probs' width.

    The Optimal Token Baseline: Li, Xu, Li et al. 2026, The Optimal Token Baseline: Variance Reduction for Long-Horizon
    LLM-RL (arXiv 2602.07078): the variance-minimising baseline per token weights the returns by the cumulative
    gradient norm, which the Logit-Gradient Proxy computes from forward probabilities alone (the per-token norm
    √(1 − 2P_c + C(P)): Li 2025, Logit Dynamics in Softmax Policy Gradient Methods, arXiv 2506.12912). Follows verl
    0.9.1's `algorithm.adv_estimator=optimal_token_baseline` (`verl/trainer/ppo/core_algos.py`,
    `compute_optimal_token_baseline_advantage` with its default `handle_zero_tail=True`; `ray_trainer.py` hands it
    `old_log_probs`, `sum_pi_squared` and `rollout_is_weights`; the actor's `compute_log_prob` computes Σπ² as
    exp(logsumexp(2z) − 2·logsumexp(z)) from the same temperature-scaled logits as the old log-probabilities). verl's
    `tir_optimal_token_baseline` (`compute_multi_turn_optimal_token_baseline_advantage`) first packs each response's
    unmasked tokens (a multi-turn response's own turns, without the tool outputs between them), which on a
    single-turn response is the identity: the same advantages (benchmarks/optimal_token_baseline_vs_verl.py). What
    was read: the paper's abstract and introduction, the verl docs page `docs/algo/otb.md` and verl's code; the
    paper's derivation was not, and the formula is verl's code's.
    Departs from verl's release: a group of one response gets 0 here (verl: no baseline, A = R); every token's return
    is the response's reward R_i (with the KL in the reward when objective.kl_reward_coef > 0: its sum, as for every
    estimator), where verl's reward-to-go gives token t the rewards from t on (the same for an outcome reward, on the
    last token); where Σ_j W_jt m_jt + ε = 0 (ε = 0 and every running token certain) the baseline is 0, verl's 0/ε.
    A flat group is not 0: its tokens get R·ε/(Σ W + ε), and a longest response alone past the others R on that tail
    (verl's zero tail), so `zeroes_flat_groups=False`. `eps` = objective.adv_eps (verl 1e-8: the preset `otb`).
    """
    groups, G = rewards.shape
    logp = token_probs.logp
    if logp.dim() != 3 or logp.shape[:2] != rewards.shape or token_probs.sum_pi_squared.shape != logp.shape:
        raise ValueError(
            f"token probabilities must be [groups, G, L] with [groups, G] = {list(rewards.shape)}, got "
            f"{list(logp.shape)} and {list(token_probs.sum_pi_squared.shape)}"
        )
    width = logp.shape[-1]
    if int(lengths.max()) > width:
        raise ValueError(f"a response of {int(lengths.max())} tokens is longer than its token probabilities ({width})")
    if G == 1:
        return rewards.new_zeros((groups, 1, width))
    dtype = rewards.dtype
    m = response_mask(lengths, width).to(dtype)
    w = 1 - 2 * logp.to(dtype).exp() + token_probs.sum_pi_squared.to(dtype)
    if token_probs.rollout_weight is not None:
        w = w * token_probs.rollout_weight.to(dtype) ** 2
    energy = (w * m).cumsum(-1) * m  # W_jt m_jt
    R = rewards[..., None]
    den = energy.sum(1, keepdim=True) + eps
    baseline = torch.where(den > 0, (R * energy).sum(1, keepdim=True) / den, torch.zeros_like(den))
    first, second = lengths.topk(2, dim=1).values.unbind(1)
    alone = (lengths == first[:, None]).sum(1) == 1  # one longest response, longer than every other
    longest = lengths.argmax(1)
    tail = (
        alone[:, None, None]
        & (torch.arange(G, device=lengths.device)[None, :, None] == longest[:, None, None])
        & (torch.arange(width, device=lengths.device)[None, None, :] >= second[:, None, None])
    )
    baseline = torch.where(tail, torch.zeros_like(energy), baseline.expand_as(energy))
    return (R - baseline) * m


def response_advantages(advantages: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Ā_i = A_i under a per-response estimator ([groups, G] in and out), else Ā_i = (1/T_i) Σ_t A_it, the mean of its
    tokens' (a per-token estimator's [groups, G, L], 0 after each response's end, as the optimal token baseline's,
    arXiv 2602.07078; 0 for a response of no token): each response's one advantage, which the `adv/*` metrics, the
    sign flips and the rollout table read."""
    if advantages.dim() == lengths.dim():
        return advantages
    return advantages.sum(-1) / lengths.to(advantages.dtype).clamp(min=1)
