"""Importance-ratio levels (the GSPO switch).

Each returns the log importance ratio per token, shaped [B, T]; the surrogate
exponentiates and clips it. Sequence levels give every token of a response the
same value, so clipping decides per sequence. Padding positions get log-ratio 0
so that stray values there can never produce NaN gradients.
"""

from __future__ import annotations

import torch

from trainer.objective.registry import RATIOS


def _token_log_ratio(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return torch.where(mask.bool(), logp - old_logp, torch.zeros_like(logp))


@RATIOS.register("token", per_sequence=False)
def token(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log r_it = log π_θ(o_it) − log π_old(o_it).

    PPO's per-token ratio (Schulman et al. 2017, arXiv 1707.06347) as used by GRPO
    (arXiv 2402.03300) and DAPO (arXiv 2503.14476).
    """
    return _token_log_ratio(logp, old_logp, mask)


@RATIOS.register("sequence", per_sequence=True)
def sequence(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_i = (1/T_i) Σ_t m_it log r_it, broadcast to every token of response i.

    GSPO: Zheng et al. 2025, Group Sequence Policy Optimization (arXiv 2507.18071), eq. 7:
    s_i is the geometric mean of the token ratios.
    """
    m = mask.to(logp.dtype)
    per_seq = _token_log_ratio(logp, old_logp, mask).sum(-1) / m.sum(-1).clamp(min=1)
    return per_seq.unsqueeze(-1).expand_as(logp)


@RATIOS.register("sequence_token", per_sequence=True)
def sequence_token(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log s_it = sg[log s_i] + log π_θ(o_it) − sg[log π_θ(o_it)] (sg = stop-gradient).

    GSPO-token: Zheng et al. 2025 (arXiv 2507.18071), eq. 13: the value of s_i with a
    per-token gradient ∂s_it/∂log π_θ(o_it) = s_i, so token-wise advantages stay possible.
    """
    seq = sequence(logp.detach(), old_logp, mask)
    return torch.where(mask.bool(), seq + logp - logp.detach(), torch.zeros_like(logp))


@RATIOS.register("sequence_product", per_sequence=True)
def sequence_product(logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """log w_i = Σ_t m_it log r_it, broadcast to every token of response i: w_i = Π_t r_it, the whole response's
    importance ratio (no 1/T_i, unlike GSPO's geometric mean).

    TRL 1.16's `RLOOTrainer` (`trl/trainer/rloo_trainer.py`, `_compute_loss`: the sequence log-probs' difference,
    exponentiated and PPO-clipped once per response, averaged over responses) after Ahmadian et al. 2024, Back to
    Basics (arXiv 2402.14740), which treats the whole response as one action. With the clip surrogate and
    seq_mean_token_mean it is TRL's loss; a response with no loss token gets 0 here (TRL: −A_i, with no gradient).
    """
    m = mask.to(logp.dtype)
    per_seq = _token_log_ratio(logp, old_logp, mask).sum(-1) * (m.sum(-1) > 0)
    return per_seq.unsqueeze(-1).expand_as(logp)
